"""The engine that finds known failures in a log, with the table of `cluster.failures`.

`diagnose(lines)` for a whole log, `LogDiagnoser` for a stream, `unrecognised` for a death no
signature explains. A diagnosis prefers the FIRST fatal cause in the log over any later
symptom (an OOM followed by a traceback and EngineDeadError is an OOM). No I/O.
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Iterable, Mapping

from pydantic import BaseModel, ConfigDict, Field

from cluster.events import Failed
from cluster.failures import (
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
from cluster.literals import Screen
from cluster.logtext import clean_line, is_nccl_line, strip_prefixes

CONTEXT_LINES = 5  # cleaned lines kept before the evidence in a Diagnosis
STALL_WINDOW = 5  # last non-empty lines examined by diagnose_stall
UNRECOGNISED_TAIL = 20  # last lines attached to an unrecognised failure
# Lines after a symptom searched for the root of the traceback it heads (vLLM 0.32 on CPU under
# Ray: 74 lines from "EngineCore failed to start." to the worker's RuntimeError).
ROOT_AFTER_SYMPTOM_LINES = 200


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


# The first error of a log no signature explains: a Python exception line (`SomethingError:
# message`, dotted names included), else a line logged at ERROR level (vLLM's, Ray's, glog's).
_EXCEPTION_LINE = re.compile(
    r"^(?:[A-Za-z_]\w*\.)*[A-Z]\w*(?:Error|Exception|Exit|Interrupt)(?::\s|$)"
)
_TRACEBACK_NOISE = re.compile(
    r"^(?:Traceback \(most recent call last\)|File \"|\^+$|During handling|The above exception)"
)
_ERROR_LEVEL = re.compile(r"(?:^|[\s)\]])(?:ERROR|CRITICAL|FATAL)\b|^\[E\d{4} ")

_FIELD = re.compile(r"\{(\w+)\}")
_SHUTDOWN = Screen([marker for marker, _ in SHUTDOWN_MARKERS])
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
        # Line number of the first symptom while no error explains it: the traceback it heads
        # may hold its root.
        self._unexplained_symptom_at: int | None = None
        self._findings: dict[str, Diagnosis] = {}
        self._stop: str | None = None

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
        """The current answer: first fatal cause, else first fatal symptom, else first finding."""
        if self._first_cause is not None:
            return self._first_cause
        if self._first_symptom is not None:
            return self._first_symptom
        return next(iter(self._findings.values()), None)

    @property
    def failed(self) -> bool:
        """True once a fatal line has been seen."""
        return self._first_cause is not None or self._first_symptom is not None

    @property
    def stopped_on_request(self) -> str | None:
        """What showed a requested stop (a shutdown line, or the stop itself), if one came
        before any failure: everything after it is teardown."""
        return self._stop

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
        if self._stop is None and not self.failed and _SHUTDOWN.search(message) is not None:
            self._stop = cleaned
        if self._stop is not None:
            self._recent.append((self._line_number, cleaned, message))
            return None
        # A traceback's source line (indented, right after `File "...", line N`) echoes code
        # such as `raise RuntimeError(f"NCCL error: ...")`: it shows no failure by itself.
        is_source = (
            message[:1].isspace()
            and bool(self._recent)
            and _FRAME.match(self._recent[-1][2]) is not None
        )
        found = (
            None
            if is_source
            else match_line(message, (m for _, _, m in self._recent), self._table, self._screen)
        )
        result: Diagnosis | None = None
        if (
            found is None
            and not is_source
            and self._unexplained_symptom_at is not None
            and self._line_number - self._unexplained_symptom_at <= ROOT_AFTER_SYMPTOM_LINES
            and self._first_cause is None
            and _EXCEPTION_LINE.match(message)
        ):
            self._explain_symptom(cleaned, message)
        if found is not None:
            sig, m = found
            context = [c for _, c, _ in list(self._recent)[-CONTEXT_LINES:]]
            if sig.fatal:
                if sig.role == "cause" and self._first_cause is None:
                    self._first_cause = diagnosis_of(
                        sig, cleaned, self._line_number, context, {**self._words, **m.groupdict()}
                    )
                elif sig.role == "symptom" and self._first_symptom is None:
                    symptom = diagnosis_of(
                        sig, cleaned, self._line_number, context, {**self._words, **m.groupdict()}
                    )
                    earlier = first_error(c for _, c, _ in self._recent)
                    if earlier is not None:  # no known cause: name the first error before it
                        symptom = symptom.model_copy(
                            update={
                                "cause": f"{symptom.cause} Likely cause "
                                f"(unrecognised), the first error before it: `{strip_prefixes(earlier[1]).strip()[:300]}`"
                            }
                        )
                    self._first_symptom = symptom
                    if earlier is None:
                        self._unexplained_symptom_at = self._line_number
                result = self.diagnosis
            elif sig.id not in self._findings:
                self._findings[sig.id] = diagnosis_of(
                    sig, cleaned, self._line_number, context, {**self._words, **m.groupdict()}
                )
        self._recent.append((self._line_number, cleaned, message))
        return result

    def _explain_symptom(self, cleaned: str, message: str) -> None:
        """The first exception after a symptom that had no error before it: vLLM logs
        "EngineCore failed to start." and then the traceback, whose first exception line is the
        root (chained ones follow it, and clean-up errors such as Ray's ActorHandleNotFoundError
        come after). It becomes the evidence, with the lines before it."""
        assert self._first_symptom is not None
        self._unexplained_symptom_at = None
        symptom = self._first_symptom
        self._first_symptom = symptom.model_copy(
            update={
                "cause": f"{symptom.cause} Likely cause (unrecognised), the first error of the "
                f"traceback after it: `{message.strip()[:300]}`",
                "evidence": cleaned,
                "line_number": self._line_number,
                "context": [c for _, c, _ in list(self._recent)[-CONTEXT_LINES:]],
            }
        )

    def diagnose_stall(self, phase: str, idle_seconds: float) -> Diagnosis:
        """Diagnosis for "no output for `idle_seconds` in `phase`": an NCCL initialisation hang
        when the last lines are NCCL's (the last non-empty line and most of the last
        STALL_WINDOW are), else a generic stall with the last line as evidence."""
        values = {**self._words, "phase": phase, "idle": _human_seconds(idle_seconds)}
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
) -> Diagnosis | None:
    """Diagnose a whole log: the first fatal cause, else the first fatal symptom, else the
    first non-fatal finding, else None."""
    d = LogDiagnoser(table=table, words=words)
    for line in lines:
        d.feed(line)
    return d.diagnosis


def first_error(lines: Iterable[str]) -> tuple[int, str] | None:
    """(line number, cleaned line) of the likely cause of a failure no signature explains: the
    first exception line, else the first ERROR-level line."""
    error_level: tuple[int, str] | None = None
    for n, raw in enumerate(lines, start=1):
        cleaned = clean_line(raw)
        message = strip_prefixes(cleaned)
        if message[:1].isspace():  # a traceback's frame or source line
            continue
        if _EXCEPTION_LINE.match(message):
            return n, cleaned
        if (
            error_level is None
            and _ERROR_LEVEL.search(cleaned)
            and message
            and not _TRACEBACK_NOISE.match(message)
        ):
            error_level = n, cleaned
    return error_level


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
    found = first_error(lines)
    n, evidence = found if found else recent[-1]
    first = (
        f"`{strip_prefixes(evidence).strip()[:300]}` (line {n})"
        if found
        else "none found; the last line is attached"
    )
    return diagnosis_of(
        UNRECOGNISED,
        evidence,
        n,
        [c for _, c in list(recent)[:-1]],
        {"where": where, "first_error": first},
    )
