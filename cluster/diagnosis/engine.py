"""The engine that finds known failures in a log, with the table of `cluster.diagnosis.failures`.

`diagnose(lines)` for a whole log, `LogDiagnoser` for a stream, `unrecognised` for a death no
signature explains. A diagnosis prefers the FIRST fatal cause in the log over any later
symptom (an OOM followed by a traceback and EngineDeadError is an OOM). No I/O.
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from cluster.diagnosis.failures import (
    GROUP_FORMED,
    NCCL_INIT_HANG,
    RANK0_INIT,
    RANKS_NOT_JOINED,
    SHUTDOWN_MARKERS,
    SIGNATURES,
    STALLED,
    UNRECOGNISED,
    FailureSignature,
    KnownFailure,
    Role,
    cluster_words,
)
from cluster.diagnosis.families import (
    FAMILIES,
    family_of_exception,
    family_of_frame,
    family_of_text,
)
from cluster.diagnosis.family_ids import FamilyId
from cluster.diagnosis.platform import PlatformSeen
from cluster.diagnosis.tracebacks import (
    RaisedException,
    TracebackReader,
    frame_file,
    raised_exception,
    says_another_is_the_cause,
)
from cluster.events import Failed
from cluster.logs.literals import Screen
from cluster.logs.logtext import clean_line, is_nccl_line, rank_of, strip_prefixes
from cluster.progress.checkpoints import API_SERVER_SPELLINGS, SERVING_SPELLINGS

CONTEXT_LINES = 5  # cleaned lines kept before the evidence in a Diagnosis
STALL_WINDOW = 5  # last non-empty lines examined by diagnose_stall
UNRECOGNISED_TAIL = 20  # last lines attached to an unrecognised failure
ROOT_AFTER_LINES = 400  # lines after a fatal symptom searched for its traceback's root
MAX_MATCHES = 100  # row matches kept for `diagnose --explain`


@dataclass(frozen=True)
class RowMatch:
    """A line a row of the table matched."""

    line_number: int
    row: str
    family: FamilyId
    role: Role
    fatal: bool
    line: str
    source_line: bool = False  # a traceback's source line, not a logged message


class Diagnosis(BaseModel):
    """What failed, the log line that shows it, the probable cause and the fix."""

    model_config = ConfigDict(frozen=True)

    signature_id: str
    title: str
    cause: str
    fix: str
    evidence: str = Field(description="the cleaned line, prefixes kept (shows rank/node)")
    line_number: int | None = Field(description="1-based line number in the fed log")
    role: Role
    fatal: bool = True
    context: list[str] = Field(default_factory=list, description="cleaned lines before")
    family: FamilyId = Field(
        "other", description="the kind of root cause (cluster.diagnosis.families)"
    )
    search: str | None = Field(
        None, description="the exact text to search for (an unknown root's type and message)"
    )


# The first error of a log no signature explains: a Python exception line (cluster.diagnosis.tracebacks),
# else a line logged at ERROR level (vLLM's, Ray's, glog's).
_TRACEBACK_NOISE = re.compile(
    r"^(?:Traceback \(most recent call last\)|File \"|\^+$|During handling|The above exception)"
)
# An exception vLLM logs at WARNING or below was caught and survived (an optional import).
_LOW_LEVEL = re.compile(r"(?:^|[\s)\]])(?:DEBUG|INFO|WARNING|WARN) \d\d-\d\d ")
_ERROR_LEVEL = re.compile(
    r"(?:^|[\s)\]])(?:ERROR|CRITICAL|FATAL)\b|^\[E\d{4} |\bfatal\s*:|\bNCCL WARN\b"
    # the error body vLLM's API answers a refused request with, as a client printed it:
    # `{"object":"error","message":…}` (older releases' protocol.py ErrorResponse) or
    # `{"error":{"message":…}}` (0.32.0 entrypoints/serve/engine/protocol.py ErrorInfo)
    r'|(?:"object"\s*:\s*"error"\s*,|"error"\s*:\s*\{)\s*"message"\s*:'
)

_FIELD = re.compile(r"\{(\w+)\}")
# CPython's unraisable hook (Python/errors.c): an exception in __del__, a callback or at exit,
# printed with its traceback and ignored
_UNRAISABLE = "Exception ignored in"
_SHUTDOWN = Screen([marker for marker, _ in SHUTDOWN_MARKERS])
_STARTUP_COMPLETE = Screen([s.pattern for s in API_SERVER_SPELLINGS + SERVING_SPELLINGS])
_FRAME = re.compile(r'^\s*File "[^"]*", line \d+')


def diagnosis_of(
    known: KnownFailure,
    evidence: str,
    line_number: int | None,
    context: Iterable[str],
    values: Mapping[str, str | None] | None = None,
) -> Diagnosis:
    """`known` as the diagnosis of `evidence` (line `line_number`), its texts filled from the
    cluster's general words and `values`."""
    title, cause, fix = known.render({**cluster_words(), **(values or {})})
    return Diagnosis(
        signature_id=known.id,
        title=title,
        cause=cause,
        fix=fix,
        evidence=evidence,
        line_number=line_number,
        role=known.role,
        fatal=known.fatal,
        context=list(context),
        family=known.family,
    )


_BUILT_IN = Screen([sig.pattern for sig in SIGNATURES])


def screen_of(table: tuple[FailureSignature, ...]) -> Screen:
    """The screen of `table`'s patterns (the built-in table's is made once)."""
    return _BUILT_IN if table is SIGNATURES else Screen([sig.pattern for sig in table])


def match_line(
    message: str,
    previous: Iterable[str] = (),
    table: tuple[FailureSignature, ...] = SIGNATURES,
    screen: Screen | None = None,
) -> tuple[FailureSignature, re.Match[str]] | None:
    """The first signature (table order) matching a prefix-stripped message, with its match.
    `previous` are the prefix-stripped messages before it (newest last), for `after` rows.
    `screen`: `screen_of(table)`, made once by a caller that matches many lines."""
    prev: list[str] | None = None
    for index in (screen or screen_of(table)).candidates(message):
        sig = table[index]
        m = sig.pattern.search(message)
        if not m:
            continue
        if sig.after is not None:
            if prev is None:
                prev = list(previous)
            if not sig.after.search(message) and not any(
                sig.after.search(p) for p in prev[-sig.window :]
            ):
                continue
        return sig, m
    return None


def _human_seconds(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


class LogDiagnoser:
    """Incremental diagnosis of a log stream, line by line, in bounded memory.

    `feed` returns a Diagnosis when a fatal line arrives (the same answer `diagnose` would give
    for everything fed so far: the first fatal cause, else the first fatal symptom), else None.
    Only the last `keep_lines` non-empty lines, the first fatal cause, the first fatal symptom
    and the first finding per signature are kept, however long the log."""

    def __init__(
        self,
        keep_lines: int = 200,
        table: tuple[FailureSignature, ...] = SIGNATURES,
        words: dict[str, str] | None = None,
    ) -> None:
        self._table = table
        self._screen = screen_of(table)
        self._words = words or cluster_words()
        self._keep = max(keep_lines, UNRECOGNISED_TAIL + 1, max(s.window for s in table))
        # (line_number, cleaned line, prefix-stripped message) of recent non-empty lines
        self._recent: deque[tuple[int, str, str]] = deque(maxlen=self._keep)
        self._line_number = 0
        self._first_cause: Diagnosis | None = None
        self._first_symptom: Diagnosis | None = None
        self._findings: dict[str, Diagnosis] = {}
        self._root: RootError | None = None  # the first symptom's root, once one is seen
        self._after: RootFinder | None = None  # reads on after the first symptom for its root
        self._survived = SurvivedRecords(table)
        self._survived_rows = tuple(sig for sig in table if sig.survived)
        self._source_cause: Diagnosis | None = None  # a cause row on a traceback's source line
        self._source_process: str | None = None  # the process whose traceback showed it
        self._last_frame: str | None = None  # the last traceback frame after the first symptom
        self._stop_line: int | None = None
        self._matches: list[RowMatch] = []
        self.last_match: RowMatch | None = None  # the last line a row matched, however many
        self._ready: int | None = None
        self._platform = PlatformSeen()
        self._learnt: dict[str, str] = {}  # what the controller found out of the log (`learn`)
        self._stop: str | None = None

    @property
    def last_line(self) -> int | None:
        """The number of the last non-empty line fed."""
        return self._recent[-1][0] if self._recent else None

    @property
    def line_count(self) -> int:
        """Lines fed so far (including empty ones)."""
        return self._line_number

    @property
    def findings(self) -> list[Diagnosis]:
        """Non-fatal matches seen (first occurrence of each signature), in log order."""
        return list(self._findings.values())

    @property
    def diagnosis(self) -> Diagnosis | None:
        """The current answer: the first fatal cause; else the first fatal symptom told by the
        root exception of its chain; else a cause a traceback's source line shows (an excerpt
        cut before its exception line); else the symptom (with the first error before it); else
        the first finding."""
        return self._chosen()[0]

    @property
    def reason(self) -> str:
        """Why the current answer was chosen (for `diagnose --explain`)."""
        return self._chosen()[1]

    def _chosen(self) -> tuple[Diagnosis | None, str]:
        symptom, root, source = self._first_symptom, self._root, self._source_cause
        if self._first_cause is not None:
            return self._first_cause, (
                f"row {self._first_cause.signature_id} is a cause, the first fatal one in the "
                "log: a cause wins over every symptom, wherever they are"
            )
        if symptom is not None and root is not None and root.kind == "exception":
            return with_root(symptom, root), (
                f"row {symptom.signature_id} is a symptom (it says that the engine died, not "
                f"why); no cause row matched, so its root is the first raised exception that "
                f"wraps no other (line {root.line_number}), put in a family by its type, "
                "module, message and raising file"
            )
        if source is not None:
            return source, (
                f"row {source.signature_id} matched a traceback's source line (the excerpt has "
                "no exception line for it), and no cause row matched a logged line"
            )
        if (
            symptom is not None
            and (root is None or root.kind != "exception")
            and self._last_frame is not None
        ):
            framed = with_frame(symptom, self._last_frame)
            if framed is not symptom:
                return framed, (
                    f"row {symptom.signature_id} is a symptom; its traceback has no exception "
                    f"line, and its innermost frame (`{self._last_frame[:120]}`) tells the family"
                )
        if symptom is not None:
            return with_root(symptom, root), (
                f"row {symptom.signature_id} is a symptom and no raised exception explains it"
                + (
                    f"; the first ERROR line before it (line {root.line_number}) is quoted"
                    if root
                    else ""
                )
            )
        finding = next(iter(self._findings.values()), None)
        return finding, (
            f"nothing fatal; row {finding.signature_id} is a finding worth reading"
            if finding
            else "no row matched"
        )

    @property
    def matches(self) -> list[RowMatch]:
        """Every line a row matched (the first MAX_MATCHES), in log order."""
        return list(self._matches)

    @property
    def stop_line(self) -> int | None:
        """The log's shutdown line, when the log logged one (None for a stop it was told of)."""
        return self._stop_line

    @property
    def ready_line(self) -> int | None:
        """The line that proves the start-up complete (`Application startup complete.`)."""
        return self._ready

    @property
    def failed(self) -> bool:
        """True once a fatal line has been seen."""
        return (
            self._first_cause is not None
            or self._first_symptom is not None
            or self._source_cause is not None
        )

    @property
    def stopped_on_request(self) -> str | None:
        """What showed a requested stop (a shutdown line, or the stop itself), if one came
        before any failure: everything after it is teardown."""
        return self._stop

    def learn(self, words: dict[str, str]) -> None:
        """Words for the failure texts from what was found outside the log (e.g. the ranks'
        NCCL libraries differ): they win over what the log shows."""
        self._learnt.update(words)

    def request_stop(self, evidence: str) -> None:
        """The server was asked to stop (e.g. Docker's SIGTERM): what follows is teardown."""
        if self._stop is None and not self.failed:
            self._stop = evidence

    def tail(self, n: int = UNRECOGNISED_TAIL) -> list[str]:
        """The last `n` non-empty cleaned lines (at most `keep_lines`)."""
        if n <= 0:
            return []
        return [cleaned for _, cleaned, _ in list(self._recent)[-n:]]

    def feed(self, line: str) -> Diagnosis | None:
        self._line_number += 1
        cleaned = clean_line(line)
        if not cleaned.strip():
            return None
        message = strip_prefixes(cleaned)
        self._platform.offer(message)
        if self._stop is None and not self.failed and _SHUTDOWN.search(message) is not None:
            self._stop, self._stop_line = cleaned, self._line_number
        if self._stop is not None:
            self._recent.append((self._line_number, cleaned, message))
            return None
        if self._survived.covers(cleaned, message):
            self._survived_line(cleaned, message)
            return None
        if self._ready is None and _STARTUP_COMPLETE.search(message):
            self._started(cleaned)
        # A traceback's source line (indented, right after `File "...", line N`) echoes code
        # such as `raise RuntimeError(f"NCCL error: ...")`: it shows no failure by itself, only
        # when the excerpt has no logged line for it (`_source_cause`).
        is_source = (
            message[:1].isspace()
            and bool(self._recent)
            and _FRAME.match(self._recent[-1][2]) is not None
        )
        found = match_line(
            message.strip() if is_source else message,
            (m for _, _, m in self._recent),
            self._table,
            self._screen,
        )
        result: Diagnosis | None = None
        if found is not None:
            sig, m = found
            self.last_match = RowMatch(
                self._line_number, sig.id, sig.family, sig.role, sig.fatal, cleaned, is_source
            )
            if len(self._matches) < MAX_MATCHES:
                self._matches.append(self.last_match)
            context = [c for _, c, _ in list(self._recent)[-CONTEXT_LINES:]]
            made = diagnosis_of(
                sig,
                cleaned,
                self._line_number,
                context,
                {**self._words, **self._platform.words(), **self._learnt, **m.groupdict()},
            )
            if is_source:
                if sig.fatal and sig.role == "cause" and self._source_cause is None:
                    self._source_cause, self._source_process = made, rank_of(cleaned)
            elif sig.fatal:
                if sig.role == "cause" and self._first_cause is None:
                    self._first_cause = made
                elif sig.role == "symptom" and self._first_symptom is None:
                    self._first_symptom = made
                    self._after = RootFinder(self._table)
                    for entry in self._recent:
                        self._after.offer(entry)
                    self._root = self._after.root
                result = self.diagnosis
            elif sig.id not in self._findings:
                self._findings[sig.id] = made
        elif (
            self._source_cause is not None
            and not is_source
            and raised_exception(message) is not None
            and rank_of(cleaned) == self._source_process
        ):
            # the same process's traceback ends in another exception: that `raise` never ran
            self._source_cause = None
        if self._first_symptom is not None and frame_file(message) is not None:
            self._last_frame = message.strip()  # where a traceback cut before its exception was
        entry = (self._line_number, cleaned, message)
        if (
            self._after is not None
            and self._first_symptom is not None
            and self._line_number > (self._first_symptom.line_number or 0)
            and self._line_number - (self._first_symptom.line_number or 0) <= ROOT_AFTER_LINES
        ):
            # the traceback after the symptom ("EngineCore failed to start." comes first); a
            # root found before the symptom stays (the finder keeps its first exception)
            candidate = found is None and not is_source
            after = self._after.offer(entry, candidate)
            if after is not None and (self._root is None or self._root.kind != "exception"):
                self._root = after
        self._recent.append(entry)
        return result

    def _survived_line(self, cleaned: str, message: str) -> None:
        """A line of a record vLLM logs at ERROR and goes on from: its row's match is shown
        (`--explain`), nothing in it fails the log or is a root."""
        found = match_line(message, (), self._survived_rows)
        if found is not None and len(self._matches) < MAX_MATCHES:
            sig = found[0]
            self._matches.append(
                RowMatch(self._line_number, sig.id, sig.family, sig.role, False, cleaned)
            )
        self._recent.append((self._line_number, cleaned, message))

    def _started(self, cleaned: str) -> None:
        """The start-up completed: what fails the log from now on fails the serving server. A
        fatal line before it stays the answer (the stream reported it as it arrived: the
        verdicts agree); what vLLM logs at ERROR and goes on from is a `survived` row, and an
        error no row knows before the end fails nothing."""
        self._ready = self._line_number

    def diagnose_stall(self, phase: str, idle_seconds: float) -> Diagnosis:
        """Diagnosis for "no output for `idle_seconds` in `phase`": an NCCL initialisation hang
        when the last lines are NCCL's (the last non-empty line and most of the last
        STALL_WINDOW are), else a generic stall with the last line as evidence."""
        values = {
            **self._words,
            **self._platform.words(),
            **self._learnt,
            "phase": phase,
            "idle": _human_seconds(idle_seconds),
        }
        recent = list(self._recent)
        window = recent[-STALL_WINDOW:]
        nccl = [is_nccl_line(msg) for _, _, msg in window]
        if window and nccl[-1] and sum(nccl) * 2 > len(window):
            n, cleaned, _ = window[-1]
            before = [c for _, c, _ in recent[:-1][-CONTEXT_LINES:]]
            d = diagnosis_of(NCCL_INIT_HANG, cleaned, n, before, values)
            return d.model_copy(
                update={"title": f"{d.title} (no output for {values['idle']} in {phase})"}
            )
        for index in range(len(recent) - 1, -1, -1):
            n, cleaned, message = recent[index]
            if GROUP_FORMED.search(message):
                break
            waiting = RANK0_INIT.search(message)
            if waiting:
                before = [c for _, c, _ in recent[:index][-CONTEXT_LINES:]]
                return diagnosis_of(
                    RANKS_NOT_JOINED, cleaned, n, before, {**values, **waiting.groupdict()}
                )
        if recent:
            last, cleaned, _ = recent[-1]
            before = [c for _, c, _ in recent[:-1][-CONTEXT_LINES:]]
            return diagnosis_of(STALLED, cleaned, last, before, values)
        return diagnosis_of(STALLED, "(no output at all)", None, [], values)


def explained_by(failed: Failed, diagnosis: Diagnosis, *, with_lines: bool = False) -> Failed:
    """`failed` with the cause, fix and row of `diagnosis`, the log line that says why (its
    summary stays what was seen); `with_lines`: the diagnosis's evidence and context too."""
    update: dict[str, object] = {
        "cause": diagnosis.cause,
        "fix": diagnosis.fix,
        "signature": diagnosis.signature_id,
    }
    if with_lines:
        update |= {"evidence": diagnosis.evidence, "context": diagnosis.context}
    return failed.model_copy(update=update)


def diagnose(
    lines: Iterable[str],
    table: tuple[FailureSignature, ...] = SIGNATURES,
    words: dict[str, str] | None = None,
    learnt: dict[str, str] | None = None,
) -> Diagnosis | None:
    """Diagnose a whole log: the first fatal cause, else the first fatal symptom, else the
    first non-fatal finding, else None. `learnt`: as LogDiagnoser.learn."""
    d = LogDiagnoser(table=table, words=words)
    d.learn(learnt or {})
    for line in lines:
        d.feed(line)
    return d.diagnosis


@dataclass(frozen=True)
class RootError:
    """The likely root of a death: the first raised exception that wraps no other (`kind`
    "exception"), else the first line logged at ERROR level ("error_level"), else the first
    wrapper ("wrapper": it names no root, but says what died); its line, the traceback's
    innermost frames and source line, and the lines before it."""

    line_number: int
    cleaned: str
    kind: Literal["exception", "error_level", "wrapper"]
    exception: RaisedException | None = None
    frames: tuple[str, ...] = ()  # the traceback's `File "...", line N, in f`, innermost first
    code: str | None = None  # the source line Python echoed under the raising frame
    context: tuple[str, ...] = ()

    @property
    def frame(self) -> str | None:
        """The frame that raised it."""
        return self.frames[0] if self.frames else None

    @property
    def quoted(self) -> str:
        return strip_prefixes(self.cleaned).strip()[:300]


def _prefix(cleaned: str, message: str) -> str:
    """What wraps `message` in `cleaned` (process, level, time, file)."""
    at = cleaned.find(message) if message else -1
    return cleaned[:at] if at > 0 else ""


class SurvivedRecords:
    """Whether a line belongs to the record of a line vLLM logs at ERROR and goes on from (a
    `survived` row): its line and the lines after it with the same prefix, since vLLM's
    NewLineFormatter (logging_utils/formatter.py, 0.6 to 0.32) puts the record's prefix on
    every line of it, its traceback's too."""

    def __init__(self, table: tuple[FailureSignature, ...] = SIGNATURES) -> None:
        self._rows = tuple(sig for sig in table if sig.survived)
        self._prefix: str | None = None

    def covers(self, cleaned: str, message: str) -> bool:
        """Whether this line (the next of the log) is part of a survived record."""
        if any(sig.pattern.search(message) for sig in self._rows):
            self._prefix = _prefix(cleaned, message)
            return True
        if self._prefix and _prefix(cleaned, message) == self._prefix:
            return True
        self._prefix = None
        return False


class RootFinder:
    """The root error of lines offered in log order ((line number, cleaned line,
    prefix-stripped message)): the first raised exception that wraps no other and that no
    survived record holds, else the first ERROR line, else the first wrapper."""

    def __init__(self, table: tuple[FailureSignature, ...] = SIGNATURES) -> None:
        self._seen: deque[tuple[int, str, str]] = deque(maxlen=CONTEXT_LINES)
        self._traceback = TracebackReader()
        self._survived = SurvivedRecords(table)
        self._error_level: RootError | None = None
        self._wrapper: RootError | None = None
        self._ignoring = False  # inside an exception CPython reported as ignored
        self.exception: RootError | None = None

    @property
    def root(self) -> RootError | None:
        return self.exception or self._error_level or self._wrapper

    def offer(self, entry: tuple[int, str, str], candidate: bool = True) -> RootError | None:
        """Read one more line; the root exception once it is found (then always it).
        `candidate` False: a line read for the traceback and context only (a row's)."""
        n, cleaned, message = entry
        if self.exception is not None:
            return self.exception
        if self._survived.covers(cleaned, message):
            return None
        self._traceback.offer(message)
        if message[:1].isspace() or not message or not candidate:
            self._seen.append(entry)
            return None
        context = tuple(c for _, c, _ in self._seen)
        raised = raised_exception(message)
        if message.startswith(_UNRAISABLE):
            self._ignoring = True  # CPython goes on: its traceback's exception is no root
            return None
        if self._ignoring and not message.startswith("Traceback"):
            self._ignoring = False
            if raised is not None:
                return None
        low = _LOW_LEVEL.search(cleaned) is not None
        if raised is not None and not raised.wraps_another and not low:
            tb = self._traceback
            self.exception = RootError(n, cleaned, "exception", raised, tb.frames, tb.code, context)
            return self.exception
        if raised is not None and self._wrapper is None and not low:
            self._wrapper = RootError(n, cleaned, "wrapper", raised, context=context)
        if (
            self._error_level is None
            and raised is None
            and _ERROR_LEVEL.search(cleaned)
            and not _TRACEBACK_NOISE.match(message)
            and not says_another_is_the_cause("", message)
        ):
            self._error_level = RootError(n, cleaned, "error_level", context=context)
        self._seen.append(entry)
        return None


def root_error(entries: Iterable[tuple[int, str, str]]) -> RootError | None:
    """The root error among `entries` ((line number, cleaned line, prefix-stripped message), in
    log order)."""
    finder = RootFinder()
    for entry in entries:
        if finder.offer(entry) is not None:
            break
    return finder.root


def family_of_root(root: RootError) -> FamilyId:
    if root.exception is not None:
        return family_of_exception(root.exception, root.frames, root.code)
    return family_of_text(root.quoted)


_VOLATILE = re.compile(r"0x[0-9a-fA-F]+|(?:/[\w.+-]+){2,}/|\b\d{5,}\b")


def search_text(root: RootError) -> str:
    """What to paste into an issue tracker's search: the root line without its addresses,
    paths and ids."""
    return _VOLATILE.sub("", root.quoted).strip()[:160]


def told_by_root(failure: Diagnosis, root: RootError | None, *, what: str) -> Diagnosis:
    """A failure no row explains (a symptom, or the unrecognised row) told by its root: the
    root's line is the evidence, quoted as the likely cause, with its family's cause and fix
    and the exact text to search for. `what`: where the root is, for the operator."""
    if root is None:
        return failure
    family_id = family_of_root(root)
    if family_id == "other" and failure.family != "other":
        family_id = failure.family
    family = FAMILIES[family_id]
    first = "the root exception" if root.kind == "exception" else "the first error"
    search = search_text(root)
    known = f"; {family.cause}" if family_id != "other" else ""
    return failure.model_copy(
        update={
            "cause": f"{failure.cause} Likely cause ({family.title}; no row knows it), "
            f"{first} {what}: `{root.quoted}`{known}.",
            "fix": f"{family.fix}; search for the exact text `{search}`"
            if family_id != "other"
            else f"{failure.fix} Search for the exact text `{search}`.",
            "evidence": root.cleaned,
            "line_number": root.line_number,
            "context": list(root.context),
            "family": family_id,
            "search": search,
        }
    )


def with_frame(symptom: Diagnosis, frame: str) -> Diagnosis:
    """A symptom whose traceback ends before its exception line, told by its innermost frame's
    family (the symptom itself when the frame tells none)."""
    family_id = family_of_frame(frame)
    if family_id == "other":
        return symptom
    family = FAMILIES[family_id]
    return symptom.model_copy(
        update={
            "cause": f"{symptom.cause} Likely cause ({family.title}; no row knows it): its "
            f"traceback ends in `{frame[:200]}`: {family.cause}.",
            "fix": family.fix,
            "family": family_id,
        }
    )


def with_root(symptom: Diagnosis, root: RootError | None) -> Diagnosis:
    """A symptom (the engine died) told by its root (a wrapper tells nothing more)."""
    if root is None or root.kind == "wrapper":
        return symptom
    where = "in its traceback" if root.line_number > (symptom.line_number or 0) else "before it"
    return told_by_root(symptom, root, what=where)


def first_error(lines: Iterable[str]) -> tuple[int, str] | None:
    """(line number, cleaned line) of the likely cause of a failure no signature explains: the
    first raised exception that wraps no other, else the first ERROR-level line."""
    entries = (
        (n, cleaned, strip_prefixes(cleaned))
        for n, raw in enumerate(lines, start=1)
        if (cleaned := clean_line(raw)).strip()
    )
    found = root_error(entries)
    return (found.line_number, found.cleaned) if found is not None else None


def cut_traceback(lines: Iterable[str]) -> tuple[int, str] | None:
    """(line number, cleaned line) of the innermost frame of a traceback the log ends in
    before its exception line (an excerpt, or a process killed while printing it)."""
    last: tuple[int, str] | None = None
    for n, raw in enumerate(lines, start=1):
        cleaned = clean_line(raw)
        message = strip_prefixes(cleaned)
        if not message.strip():
            continue
        if frame_file(message) is not None:
            last = (n, cleaned)
        elif not message[:1].isspace() and not message.startswith("Traceback"):
            last = None  # the traceback ended (in an exception line, or other output)
    return last


def unrecognised(lines: Iterable[str], where: str, tail: int = UNRECOGNISED_TAIL) -> Diagnosis:
    """Diagnosis for a death no signature explains: says where it happened and quotes the first
    error line as the likely cause (the evidence); the last `tail` non-empty cleaned lines are
    attached as context."""
    lines = list(lines)
    recent: deque[tuple[int, str]] = deque(maxlen=tail + 1)
    for n, raw in enumerate(lines, start=1):
        cleaned = clean_line(raw)
        if cleaned.strip():
            recent.append((n, cleaned))
    if not recent:
        return diagnosis_of(
            UNRECOGNISED,
            "(no output)",
            None,
            [],
            {"where": where, "first_error": "none (no output)"},
        )
    root = root_error(
        (n, cleaned, strip_prefixes(cleaned))
        for n, raw in enumerate(lines, start=1)
        if (cleaned := clean_line(raw)).strip()
    )
    n, evidence = (root.line_number, root.cleaned) if root else recent[-1]
    first = f"`{root.quoted}` (line {n})" if root else "none found; the last line is attached"
    found = diagnosis_of(
        UNRECOGNISED,
        evidence,
        n,
        [c for _, c in list(recent)[:-1]],
        {"where": where, "first_error": first},
    )
    if root is None:
        return found
    family = FAMILIES[family_of_root(root)]
    search = search_text(root)
    if family.id == "other":
        return found.model_copy(update={"search": search})
    return found.model_copy(
        update={
            "cause": f"{found.cause} That is an error of its family: {family.title} "
            f"({family.cause}).",
            "fix": f"{family.fix}; search for the exact text `{search}`. {found.fix}",
            "family": family.id,
            "search": search,
        }
    )
