"""Python exception chains in a log: which line is a raised exception, which exceptions only wrap
another (the symptom of a death, not its cause), and which one is the root.

Python prints a chain oldest first: the exception raised first (the innermost, the root) is the
first one printed, then "The above exception was the direct cause of the following exception"
(`raise ... from`) or "During handling of the above exception, another exception occurred",
then the newer ones, each with its traceback. vLLM logs "EngineCore failed to start." *before*
the traceback of the real error, and the API server ends with "Engine core initialization
failed. See root cause above."; Ray wraps a worker's error as `RayTaskError(ValueError)` and
reports a dead actor as `ActorDiedError`. So the root of a death is the first raised exception
that is not one of these wrappers. Pure functions, no I/O.
"""

from __future__ import annotations

import re
from collections import deque
from dataclasses import dataclass

__all__ = [
    "RaisedException",
    "TracebackReader",
    "frame_file",
    "raised_exception",
    "says_another_is_the_cause",
]

# `ValueError: msg`, `torch.OutOfMemoryError: msg`, `ray.exceptions.RayTaskError(ValueError): msg`,
# `ncclInternalError: ...`, a bare `AssertionError`.
# A class whose name says it (`...Error`, `...Exception`), or any class a module qualifies
# (`triton.runtime.errors.OutOfResources: ...`, `torch._dynamo.exc.BackendCompilerFailed: ...`).
_EXCEPTION_LINE = re.compile(
    r"^(?P<type>(?:[A-Za-z_]\w*\.)*(?:[A-Za-z_]\w*)?(?:Error|Exception|Exit|Interrupt)"
    r"|(?:[a-z_]\w*\.)+[A-Z]\w*(?=:\s))"
    r"(?:\((?P<inner>(?:[A-Za-z_]\w*\.)*\w+)\))?"
    r"(?::\s(?P<message>.*)|\s*$)"
)
_FRAME = re.compile(r'^\s*File "(?P<file>[^"]*)", line \d+')

# Exceptions that say a process or an engine died, not why: the root is another exception.
# Sources: vLLM's v1/engine/exceptions.py (EngineDeadError, EngineGenerateError), v1/engine/
# utils.py ("Engine core initialization failed. See root cause above.", 0.8+), the V0 engine's
# engine/async_llm_engine.py (AsyncEngineDeadError), engine/multiprocessing (MQEngineDeadError)
# and entrypoints/openai/api_server.py ("Engine process failed to start. See stack trace for
# the root cause.", 0.6-0.10), v1/executor/
# multiproc_executor.py ("WorkerProc initialization failed", "Worker failed"), Ray's
# python/ray/exceptions.py (RayTaskError wraps the task's own exception, ActorDiedError /
# RayActorError / ActorUnavailableError a dead actor), vLLM's model inspection subprocess
# (model_executor/models/registry.py: CalledProcessError, then "Error raised in subprocess").
_WRAPPER_TYPES = re.compile(
    r"(?:^|\.)(?:EngineDeadError|AsyncEngineDeadError|MQEngineDeadError|EngineGenerateError"
    r"|RayTaskError|ActorDiedError|RayActorError"
    r"|ActorUnavailableError|SystemExit|KeyboardInterrupt|CancelledError|BrokenProcessPool"
    r"|CalledProcessError)$"
)
_WRAPPER_MESSAGES = re.compile(
    r"Engine core initialization failed|Frontend process failed during engine core"
    r"|WorkerProc initialization failed|Worker failed|EngineCore encountered an issue"
    r"|See (?:root cause|stack trace) above|See stack trace for the root cause"
    r"|Worker proc \S+ died unexpectedly|Engine process failed to start"
    r"|Error executing method|This might cause deadlock|Error raised in subprocess"
    r"|got fatal signal from worker processes"
)


@dataclass(frozen=True)
class RaisedException:
    """An exception line: its type as printed (`torch.OutOfMemoryError`), the type it wraps
    (`RayTaskError(ValueError)` wraps `ValueError`), its message."""

    type: str
    inner: str | None
    message: str

    @property
    def module(self) -> str:
        """The dotted module of the type (`ray.exceptions`), empty for a builtin."""
        return self.type.rpartition(".")[0]

    @property
    def wraps_another(self) -> bool:
        """True when the death's root is another exception of the chain."""
        return says_another_is_the_cause(self.type, self.message)


def says_another_is_the_cause(type_: str, message: str) -> bool:
    """True for a wrapper's exception or log line (EngineDeadError, RayTaskError(...), "Engine
    core initialization failed...", "See stack trace above"): the root is elsewhere."""
    return bool(_WRAPPER_TYPES.search(type_) or _WRAPPER_MESSAGES.search(message))


def raised_exception(message: str) -> RaisedException | None:
    """The exception a prefix-stripped log message shows, if it is an exception line."""
    m = _EXCEPTION_LINE.match(message)
    if m is None:
        return None
    return RaisedException(m["type"], m["inner"], (m["message"] or "").strip())


def frame_file(message: str) -> str | None:
    """The file of a traceback frame line (`  File "/x/vllm/v1/executor/ray_utils.py", line 5`)."""
    m = _FRAME.match(message)
    return m["file"] if m else None


FRAMES_KEPT = 8  # innermost frames of a traceback kept for its family
_CARETS = re.compile(r"^\s*[~^]+\s*$")  # Python 3.11+'s marks under the failing expression


class TracebackReader:
    """The traceback being printed, read line by line (prefix-stripped messages): the files of
    its innermost frames and the source line Python echoed under the last one (`raise ...`,
    `if rope_scaling["type"] == ...`). A `Traceback (most recent call last):` starts anew."""

    def __init__(self) -> None:
        self._frames: deque[str] = deque(maxlen=FRAMES_KEPT)
        self._code: str | None = None

    def offer(self, message: str) -> None:
        if message.startswith("Traceback (most recent call last)"):
            self._frames.clear()
            self._code = None
            return
        if frame_file(message) is not None:
            self._frames.append(message.strip())
            self._code = None
        elif message[:1].isspace() and message.strip() and not _CARETS.match(message):
            self._code = message.strip()  # an excerpt may begin at it, without its frame

    @property
    def frames(self) -> tuple[str, ...]:
        """The frame lines (`File "...", line N, in f`), innermost first."""
        return tuple(reversed(self._frames))

    @property
    def code(self) -> str | None:
        return self._code
