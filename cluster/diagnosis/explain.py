"""A whole log's verdict and the reasons for it: which rows and families matched which lines, why
the chosen one won, and every checkpoint the log proves (each with its line and rank).

What `spark-bot diagnose` prints (`--explain`, `--json`), and what the corpus of real logs is
scored with: an operator who teaches a row sees which line it matched, and checks a log's
checkpoints without importing the package's internals. No I/O.

Healthy is proven by the end: a log that goes on to `Application startup complete.` is no
failure unless a fatal line (a fatal row) is in it; an ERROR line or an exception no row knows
before the end did not stop the start-up, and a line vLLM logs at ERROR and goes on from is a
`survived` row. The stream (cluster.progress.checkpoint_follower) answers the same: it fails a
launch at a fatal line as it arrives, and at nothing else before the end.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from cluster.config import Knowledge
from cluster.diagnosis.engine import (
    Diagnosis,
    LogDiagnoser,
    cut_traceback,
    first_error,
    unrecognised,
    with_frame,
)
from cluster.diagnosis.failures import SIGNATURES, FailureSignature
from cluster.diagnosis.families import family_of_text
from cluster.diagnosis.tracebacks import raised_exception
from cluster.logs.logtext import clean_line, rank_of, ray_repeats, strip_prefixes
from cluster.progress.checkpoints import CHECKPOINTS, Checkpoint, Spelling, spellings_for

# "incomplete": no failure shown, but no end of start-up either: not proven healthy.
# A request the API server answered with success (uvicorn's access log, uvicorn/logging.py
# AccessFormatter: `<client> - "<method> <path> HTTP/<v>" <status> <phrase>`): the server was
# serving at that line, so an exception logged before it did not stop it. vLLM's request handlers
# catch and log per-request errors (serving_chat.py: `logger.exception("Error in preprocessing
# prompt inputs")`, then `create_error_response`, a 400), and the server goes on. Only requests
# the engine answers prove it: inference, or /health and /ping, which answer 503 once the engine
# is dead (vLLM 0.32 entrypoints/serve/instrumentator/health.py: `check_health()` raises
# EngineDeadError when errored); /metrics, /v1/models, /version and /tokenize answer 200 from the
# API process alone, with the engine dead or hung.
_ANSWERED = re.compile(
    r'"(?:POST /\S*(?:completions|embeddings|responses|pooling|score|rerank|classify'
    r"|transcriptions|translations|generate|invocations)|(?:GET|POST) /(?:health|ping))"
    r'(?:\?\S*)? HTTP/[\d.]+" 2\d\d\b'
)
_QUIET = re.compile(r"(?:^|[\s)\]])(?:DEBUG|INFO)\b")

Verdict = Literal["failed", "healthy", "stopped", "incomplete"]

# Logged checkpoints every healthy start-up shows (NCCL's only with NCCL_DEBUG=INFO; vLLM before
# 0.6.5 prints no `init engine` line).
EVERY_START_UP = ("weights", "kv_cache", "engine", "api_server")
# Lines that look like a checkpoint's, whatever the release's wording: one no spelling matches
# is a checkpoint line the table does not know (a new release's drift).
_LOOKS_LIKE_A_CHECKPOINT = re.compile(
    r"weights took|loading took|model took|KV cache size: \d|\bblocks: \d|init engine|"
    r"startup complete",
    re.IGNORECASE,
)


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True)


class MatchedLine(_Model):
    line_number: int
    row: str
    family: str
    role: str
    fatal: bool
    line: str
    source_line: bool = Field(False, description="a traceback's source line, not a message")


class CheckpointProof(_Model):
    checkpoint: str
    title: str
    line_number: int
    line: str
    rank: str | None = Field(description="who printed it (its prefix), None: not said")
    spelling: str = Field(description="where the wording comes from")


class Explanation(_Model):
    verdict: Verdict
    diagnosis: Diagnosis | None
    why: str
    matches: list[MatchedLine]
    ready_line: int | None = Field(description="the `Application startup complete.` line")
    checkpoints: list[CheckpointProof]
    checkpoints_missing: list[str] = Field(
        description="checkpoints every start-up logs that this log does not prove"
    )
    unknown_checkpoint_lines: list[int] = Field(
        default_factory=list,
        description="lines that look like a checkpoint's but match no spelling (drift)",
    )


def proofs(
    lines: Sequence[str], knowledge: Knowledge | None = None
) -> tuple[list[CheckpointProof], list[str], list[int]]:
    """Every line that proves a logged checkpoint (per-rank checkpoints: one line per distinct
    rank), the EVERY_START_UP checkpoints without one, and the lines that look like a
    checkpoint's but match no spelling."""
    logged: list[tuple[Checkpoint, list[Spelling]]] = [
        (c, list(spellings_for(c, knowledge or Knowledge()))) for c in CHECKPOINTS if c.logged
    ]
    found: list[CheckpointProof] = []
    ranks: dict[str, set[str | None]] = {}
    unknown: list[int] = []
    for n, raw in enumerate(lines, start=1):
        cleaned = clean_line(raw)
        message = strip_prefixes(cleaned)
        if _LOOKS_LIKE_A_CHECKPOINT.search(message) and not any(
            s.pattern.search(message) for _, spellings in logged for s in spellings
        ):
            unknown.append(n)
        for checkpoint, spellings in logged:
            spelling = next((s for s in spellings if s.pattern.search(message)), None)
            if spelling is None:
                continue
            rank = rank_of(cleaned)
            seen = ranks.setdefault(checkpoint.id, set())
            if rank in seen or (seen and not checkpoint.per_rank):
                continue
            seen.add(rank)
            repeats = ray_repeats(cleaned)
            found.append(
                CheckpointProof(
                    checkpoint=checkpoint.id,
                    title=checkpoint.title,
                    line_number=n,
                    line=cleaned,
                    rank=f"{rank} (+{repeats} more, Ray's repeats)" if repeats and rank else rank,
                    spelling=spelling.source,
                )
            )
    missing = [c for c in EVERY_START_UP if c not in ranks]
    return found, missing, unknown


def last_answer(lines: Sequence[str], since: int) -> int:
    """The number of the last line after line `since` that shows a request answered with
    success (`since` when none does)."""
    return next((n for n in range(len(lines), since, -1) if _ANSWERED.search(lines[n - 1])), since)


def raised_after(lines: Sequence[str], ready: int) -> Diagnosis | None:
    """An exception raised after the end of start-up (the line `ready`) that the server did not
    survive (no request answered with success after it), as an unrecognised failure; None when
    none was (or only ERROR lines came)."""
    ready = last_answer(lines, ready)
    after = lines[ready:]
    found = first_error(after)
    if found is None or raised_exception(strip_prefixes(found[1])) is None:
        return None
    late = unrecognised(after, "serving, after the start-up completed")
    return late.model_copy(update={"line_number": (late.line_number or 0) + ready})


def hang_before(diagnoser: LogDiagnoser) -> Diagnosis | None:
    """A finding that the engine was not answering (vLLM's shared-memory broadcast wait) before
    the log's logged shutdown: an operator ending a hang, not a clean stop."""
    stop = diagnoser.stop_line
    if stop is None:
        return None
    return next(
        (
            f
            for f in diagnoser.findings
            if f.family == "engine_hang" and (f.line_number or 0) < stop
        ),
        None,
    )


def ends_hung(diagnoser: LogDiagnoser, ready: int) -> Diagnosis | None:
    """The engine-hang finding (vLLM's shared-memory broadcast wait, logged while a reader
    waits 60 s for its workers) when the log ends in it after the start-up completed: the end
    shows a hung engine, not a healthy one."""
    last = diagnoser.last_match
    if last is None or last.family != "engine_hang" or last.fatal or last.line_number <= ready:
        return None
    if last.line_number != diagnoser.last_line:
        return None
    return next((f for f in diagnoser.findings if f.signature_id == last.row), None)


def family_hint(lines: Sequence[str]) -> Diagnosis | None:
    """For a log that shows no failure and no end: the first line (not logged at INFO or
    below) whose text a family's exception class knows, as an unrecognised, non-fatal hint."""
    for n, raw in enumerate(lines, start=1):
        cleaned = clean_line(raw)
        if not cleaned.strip() or _QUIET.search(cleaned):
            continue
        family = family_of_text(strip_prefixes(cleaned))
        if family != "other":
            hint = unrecognised([raw], "this log")
            return hint.model_copy(
                update={"line_number": n, "family": family, "fatal": False, "context": []}
            )
    return None


def explain(
    lines: Iterable[str],
    table: tuple[FailureSignature, ...] = SIGNATURES,
    knowledge: Knowledge | None = None,
) -> Explanation:
    """The verdict on a whole log, with its reasons."""
    lines = list(lines)
    diagnoser = LogDiagnoser(table=table)
    for line in lines:
        diagnoser.feed(line)
    found, why = diagnoser.diagnosis, diagnoser.reason
    ready = diagnoser.ready_line
    verdict: Verdict
    if found is not None and found.fatal:
        verdict = "failed"
        if ready is not None and (found.line_number or 0) > ready:
            why += f"; it came after the start-up completed (line {ready})"
        elif ready is not None:
            why += (
                f"; the start-up went on to complete (line {ready}), but a fatal line fails the "
                "launch as it arrives (a line vLLM goes on from is a survived row)"
            )
    elif (
        diagnoser.stop_line is not None
        and (late := raised_after(lines[: diagnoser.stop_line - 1], ready or 0)) is not None
    ):
        verdict = "failed"
        found = late
        why = (
            f"an exception no row knows was raised (line {late.line_number}) before the "
            f"shutdown (line {diagnoser.stop_line}): the shutdown followed the failure"
        )
    elif (hung := hang_before(diagnoser)) is not None:
        verdict = "failed"
        found = hung.model_copy(update={"fatal": True})
        why = (
            f"the engine's workers had stopped answering (line {hung.line_number}) and the log "
            f"ends in a requested shutdown (line {diagnoser.stop_line}): the stop ended a hang"
        )
    elif diagnoser.stopped_on_request is not None:
        verdict = "stopped"
        why = f"the log ends in a requested shutdown, from: {diagnoser.stopped_on_request}"
    elif ready is not None and (late := raised_after(lines, ready)) is not None:
        verdict = "failed"
        found = late
        why = (
            f"the start-up completed (line {ready}), then an exception no row knows was raised "
            f"(line {late.line_number}): the server failed at serving, its family by the "
            "exception's type, module and message"
        )
    elif ready is not None and (hung := ends_hung(diagnoser, ready)) is not None:
        verdict = "failed"
        found = hung.model_copy(update={"fatal": True})
        why = (
            f"the start-up completed (line {ready}), but the log ends with vLLM waiting on its "
            f"workers (line {hung.line_number}): the serving engine hung"
        )
    elif ready is not None:
        verdict = "healthy"
        why = f"the start-up completed (line {ready}) and no fatal line follows it; " + why
    elif first_error(lines) is not None:
        verdict = "failed"
        found = unrecognised(lines, "this log")
        why = (
            "no row matched a fatal line and the start-up never completed; the first raised "
            "exception that wraps no other (else the first ERROR line) is the likely cause, "
            f"put in the family {found.family} by its type, module and message"
        )
    elif (frame := cut_traceback(lines)) is not None:
        verdict = "failed"
        n, cleaned = frame
        found = with_frame(unrecognised(lines, "this log"), strip_prefixes(cleaned).strip())
        found = found.model_copy(update={"evidence": cleaned, "line_number": n})
        why = (
            "the log ends in a traceback cut before its exception line and the start-up never "
            f"completed; its innermost frame (line {n}) is quoted, of the family {found.family}"
        )
    else:
        verdict = "incomplete"
        why = (
            "no fatal row and no error line, but the log does not reach the end of start-up "
            "(`Application startup complete.`): not proven healthy; " + why
        )
        if found is None and (hint := family_hint(lines)) is not None:
            found = hint
            why += f"; line {hint.line_number} is of the family {hint.family} by its text"
    checkpoints, missing, unknown = proofs(lines, knowledge)
    return Explanation(
        verdict=verdict,
        diagnosis=found,
        why=why,
        matches=[
            MatchedLine(
                line_number=m.line_number,
                row=m.row,
                family=m.family,
                role=m.role,
                fatal=m.fatal,
                line=m.line,
                source_line=m.source_line,
            )
            for m in diagnoser.matches
        ],
        ready_line=ready,
        checkpoints=checkpoints,
        checkpoints_missing=missing,
        unknown_checkpoint_lines=unknown,
    )


def _verdict_text(explained: Explanation) -> str:
    """The verdict: what failed, its line, cause, fix, row and family."""
    found = explained.diagnosis
    if explained.verdict == "stopped":
        return f"No failure: {explained.why}"
    unproven = (
        "\n  (not proven healthy either: the log does not reach `Application startup complete.`)"
        if explained.verdict == "incomplete"
        else ""
    )
    if explained.verdict != "failed" or found is None:
        ended = (
            f": the start-up completed (line {explained.ready_line}) and no fatal line follows"
            if explained.verdict == "healthy"
            else ""
        )
        if found is None:
            return (
                f"No failure found{ended}."
                if ended
                else "No failure found in this log (no known failure signature, no error line)."
                + unproven
            )
        heading = f"No failure found{ended}, but worth reading: {found.title}"
    else:
        heading = found.title
    return (
        f"{heading}\n  evidence (line {found.line_number}): {found.evidence}\n"
        f"  cause: {found.cause}\n  fix:   {found.fix}\n  row:   {found.signature_id}\n"
        f"  family: {found.family}" + (f"\n  search: {found.search}" if found.search else "")
    )


def _details_text(explained: Explanation) -> str:
    """The rows and families that matched which lines, why the chosen one won, and every
    checkpoint the log proves."""
    out = [f"\nwhy: {explained.why}", "rows matched:"]
    out += [
        f"  line {m.line_number}: {m.row} ({m.family}, {m.role}, "
        f"{'fatal' if m.fatal else 'finding'}{', a source line' if m.source_line else ''}): "
        f"{m.line.strip()[:160]}"
        for m in explained.matches
    ] or ["  (none)"]
    out.append("checkpoints proven:")
    out += [
        f"  {p.checkpoint} (line {p.line_number}, {p.rank or 'rank not shown'}): "
        f"{p.line.strip()[:160]}"
        for p in explained.checkpoints
    ] or ["  (none)"]
    if explained.checkpoints_missing:
        out.append("not proven by this log: " + ", ".join(explained.checkpoints_missing))
    return "\n".join(out)


def as_text(explained: Explanation, *, details: bool = False) -> str:
    """An explanation as text, the one shape every terminal prints a diagnosis in (`spark-bot
    diagnose`, and with `details` its `--explain`)."""
    text = _verdict_text(explained)
    return f"{text}\n{_details_text(explained)}" if details else text
