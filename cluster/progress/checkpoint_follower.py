"""Reach log-proven checkpoints: read the monitor's stream, report each checkpoint as its line
appears, and turn a fatal line, a container death, a stall or a phase timeout into `Failed`."""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncGenerator, Awaitable, Callable
from dataclasses import dataclass, field

from cluster.config import ClusterConfig
from cluster.diagnosis.engine import Diagnosis, LogDiagnoser, diagnose, diagnosis_of, unrecognised
from cluster.diagnosis.failures import (
    API_DOWN,
    API_DOWN_NODE_LOST,
    CONTAINER_OOM_KILLED,
    FOLLOW_LOST,
    KERNEL_OOM_KILL,
    PHASE_TIMEOUT,
    SERVING_HUNG,
    STOPPED_ON_REQUEST,
    for_cluster,
)
from cluster.events import CheckpointPassed, Event, Failed, Progress
from cluster.logs.backlog import Shed
from cluster.logs.container_stream import (
    ClusterMonitor,
    ContainerExited,
    FollowLost,
    FollowResumed,
    HealthLost,
    LogLine,
    MonitorItem,
    StopRequested,
)
from cluster.logs.literals import Screen
from cluster.logs.logtext import rank_of, ray_repeats, strip_prefixes
from cluster.progress.checkpoints import BY_ID, CHECKPOINTS, Checkpoint, Spelling, spellings_for
from cluster.progress.reporter import Reporter
from cluster.resources.memory import KernelOomKill, MemoryLow
from cluster.serving.liveness import ServingHung

log = logging.getLogger(__name__)


def must_see(config: ClusterConfig) -> Callable[[str], bool]:
    """Whether a log line must reach the reader even when lines are shed: a line of a
    checkpoint (in any spelling) or of a known failure."""
    table, _ = for_cluster(config)
    patterns = [
        s.pattern for c in CHECKPOINTS if c.logged for s in spellings_for(c, config.knowledge)
    ]
    patterns += [signature.pattern for signature in table]
    screen = Screen(patterns)

    def matters(text: str) -> bool:
        return screen.search(strip_prefixes(text)) is not None

    return matters


@dataclass
class Expectation:
    """A checkpoint proven by lines of one spelling from `count` distinct ranks in the logs of
    `nodes` (None: any). A rank is the node and the process prefix that printed the line
    (`rank_of`): one process printing a line twice (the model and its draft, with speculative
    decoding) is one rank; Ray's `[repeated Nx across cluster]` stands for N more."""

    checkpoint: Checkpoint
    spellings: tuple[Spelling, ...]
    count: int = 1
    nodes: frozenset[str] | None = None
    node: str | None = None
    # per spelling index: (node, rank) -> the first line that rank printed
    seen: dict[int, dict[tuple[str, str | None], LogLine]] = field(default_factory=dict)
    repeats: dict[int, int] = field(default_factory=dict)  # Ray's repeats, per spelling

    def offer(self, line: LogLine) -> None:
        """Record `line` if it is one of this checkpoint's lines (its first matching spelling)."""
        if self.done or (self.nodes is not None and line.node not in self.nodes):
            return
        message = strip_prefixes(line.text)
        for index, spelling in enumerate(self.spellings):
            if spelling.pattern.search(message):
                self.seen.setdefault(index, {}).setdefault((line.node, rank_of(line.text)), line)
                self.repeats[index] = self.repeats.get(index, 0) + ray_repeats(line.text)
                return

    @property
    def tally(self) -> dict[int, int]:
        """Distinct ranks per spelling, Ray's repeats included."""
        return {i: len(ranks) + self.repeats.get(i, 0) for i, ranks in self.seen.items()}

    @property
    def lines(self) -> list[LogLine]:
        """The lines of the spelling seen most (the evidence; one a rank), definitive wordings
        first."""
        tally = self.tally
        ranked = sorted(
            self.seen.items(),
            key=lambda item: (not self.spellings[item[0]].provisional, tally[item[0]]),
        )
        return list(ranked[-1][1].values()) if ranked else []

    def evidence(self) -> str:
        """Its lines; a per-rank checkpoint's each with the node and rank it is from."""
        if not self.checkpoint.per_rank:
            return "\n".join(line.text for line in self.lines)
        return "\n".join(f"{line.text}  [{rank_label(line)}]" for line in self.lines)

    @property
    def done(self) -> bool:
        """Proven by its own lines: `count` ranks of one definitive wording."""
        return any(
            seen >= self.count and not self.spellings[index].provisional
            for index, seen in self.tally.items()
        )

    @property
    def provisionally_done(self) -> bool:
        """`count` ranks of a wording printed before the stage ends: done once a later stage
        proves it."""
        return any(seen >= self.count for seen in self.tally.values())


def rank_label(line: LogLine) -> str:
    rank = rank_of(line.text)
    return f"{line.node}, {rank}" if rank else line.node


# A later checkpoint's line proves the earlier ones happened; their own lines, when they come
# at all, may trail it by moments (another node's log stream): wait this long for them.
PROOF_GRACE_S = 1.0


@dataclass
class _Proof:
    """A later checkpoint done before earlier ones: the earlier lines get until `deadline`."""

    by: Expectation
    context: list[str]
    evidence: str
    deadline: float = field(default_factory=lambda: time.monotonic() + PROOF_GRACE_S)


# Lines of every node's log attached to a failure that concerns the whole server (a hang).
EVERY_NODE_LINES = 12

# A fatal symptom ("EngineCore failed to start.") is often printed before the traceback that
# holds its cause; wait this long for the cause before reporting the symptom.
SYMPTOM_GRACE_S = 2.0


class LogFollower:
    """Per-node diagnosers over one monitor; `expect` yields checkpoint events or one `Failed`."""

    def __init__(self, config: ClusterConfig, monitor: ClusterMonitor, reporter: Reporter):
        self.config = config
        self.monitor = monitor
        self.reporter = reporter
        self._diagnosers: dict[str, LogDiagnoser] = {}
        self._symptom: tuple[str, float] | None = None  # node, deadline for its cause
        self._reported_findings: set[str] = set()
        self._stop: tuple[str, str] | None = None  # node, what stopped it, once a stop is asked
        self._lost: dict[str, str] = {}  # node -> why it is not followed, while it is reconnected
        self._table, self._words = for_cluster(config)
        self._learnt: dict[str, str] = {}  # words every diagnoser gets (`learn`)
        # called with every log line read, after the expectations: figures worth keeping
        self.observers: list[Callable[[LogLine], None]] = []

    async def _next(self, timeout: float | None) -> MonitorItem | None:
        """The next item; None when a pending symptom's grace ran out first."""
        if self._symptom is not None:
            grace = max(0.0, self._symptom[1] - time.monotonic())
            if timeout is None or grace < timeout:
                try:
                    return await self.monitor.next(timeout=grace)
                except TimeoutError:
                    return None
        return await self.monitor.next(timeout=timeout)

    def _symptom_failure(self, checkpoint: Checkpoint) -> Failed | None:
        """The pending symptom's failure, told by what followed it (its root); None when the
        diagnoser holds nothing fatal."""
        assert self._symptom is not None
        node = self._symptom[0]
        diagnosis = self._diagnoser(node).diagnosis
        if diagnosis is None or not diagnosis.fatal:
            self._symptom = None
            return None
        return self.failure_from(diagnosis, checkpoint, node)

    def failure_from(
        self, diagnosis: Diagnosis, checkpoint: Checkpoint, node: str | None
    ) -> Failed:
        return self.reporter.failed(
            checkpoint,
            f"{checkpoint.title}: {diagnosis.title}" + (f" on {node}" if node else ""),
            cause=diagnosis.cause,
            fix=diagnosis.fix,
            node=node,
            evidence=diagnosis.evidence,
            context=diagnosis.context,
            signature=diagnosis.signature_id,
            log_tail=self.monitor.tail(node) if node else (),
        )

    def _diagnoser(self, node: str) -> LogDiagnoser:
        if node not in self._diagnosers:
            self._diagnosers[node] = LogDiagnoser(table=self._table, words=self._words)
            self._diagnosers[node].learn(self._learnt)
            if self._stop is not None:
                self._diagnosers[node].request_stop(self._stop[1])
        return self._diagnosers[node]

    def learn(self, words: dict[str, str]) -> None:
        """Words for every node's failure texts from what the controller found (LogDiagnoser)."""
        self._learnt.update(words)
        for diagnoser in self._diagnosers.values():
            diagnoser.learn(words)

    async def expect(
        self,
        expectations: list[Expectation],
        *,
        prove: Callable[[], Awaitable[str | None]] | None = None,
    ) -> AsyncGenerator[Event, None]:
        """Yield each expectation's CheckpointPassed in order as its lines arrive.

        Lines may prove a later checkpoint before an earlier one is reported; reports keep the
        plan's order. A later checkpoint's line proves the earlier ones: an earlier checkpoint
        still without its line PROOF_GRACE_S later is reported as not seen (a warning). When
        the log goes quiet (a stall or the phase timeout), `prove` may still prove every
        checkpoint left (it returns what proves them, e.g. the API's answer, or None). Stops
        after the last one, or after yielding a single Failed.
        """
        timeouts = self.config.timeouts
        pending = list(expectations)
        phase = pending[0].checkpoint.phase if pending else ""
        phase_deadline = time.monotonic() + getattr(timeouts, phase, timeouts.stall)
        proof: _Proof | None = None
        while pending:
            current = pending[0].checkpoint
            now = time.monotonic()
            if proof is not None and now >= proof.deadline:
                while not pending[0].done and pending[0] is not proof.by:
                    yield self.not_seen(pending.pop(0), proof.evidence, proof.context)
                proof = None
            else:
                idle_limit = min(timeouts.stall, max(0.0, phase_deadline - now))
                wait = idle_limit if proof is None else min(idle_limit, proof.deadline - now)
                try:
                    item = await self._next(timeout=wait)
                except TimeoutError:
                    if proof is not None:
                        continue
                    evidence = await prove() if prove is not None else None
                    if evidence is None:
                        yield self._timeout_failure(current, phase_deadline)
                        return
                    context = self.monitor.tail(self.config.head.name)
                    for expectation in pending:
                        yield (
                            self._passed(expectation)
                            if expectation.done
                            else self.not_seen(expectation, evidence, context)
                        )
                    return
                failure = (
                    self._symptom_failure(current) if item is None else self._failure(item, current)
                )
                if failure is not None:
                    yield failure
                    return
                if isinstance(item, LogLine):
                    for expectation in pending:
                        expectation.offer(item)
                    for observe in self.observers:
                        observe(item)
                elif isinstance(item, Shed):
                    yield Progress(
                        elapsed_s=self.reporter.elapsed(),
                        phase=current.phase,
                        message=f"{item.count} log lines skipped: they came faster than they "
                        "were read (checkpoint and failure lines are kept)",
                    )
            while pending and (pending[0].done or pending[0].provisionally_done):
                later = next((e for e in pending[1:] if e.done), None)
                if not pending[0].done and later is None:
                    break  # a provisional line waits for the next stage to prove it
                done = pending.pop(0)
                yield self._passed(done, proven_by=None if done.done else later)
                if proof is not None and done is proof.by:
                    proof = None
            if proof is None and pending:
                later = next((e for e in reversed(pending[1:]) if e.done), None)
                if later is not None:
                    last = later.lines[-1]
                    proof = _Proof(later, self.monitor.tail(last.node), last.text)
            if pending and pending[0].checkpoint.phase != phase:
                phase = pending[0].checkpoint.phase
                phase_deadline = time.monotonic() + getattr(timeouts, phase, timeouts.stall)

    def not_seen(
        self, expectation: Expectation, proof: str, context: list[str]
    ) -> CheckpointPassed:
        """`expectation`'s checkpoint, proven by a later stage (`proof`) without its own line:
        passed, with a warning and the lines around where its line was expected (no warning
        when its provisional line was there)."""
        if expectation.provisionally_done:
            return self._passed(expectation)
        checkpoint = expectation.checkpoint
        got = max(expectation.tally.values(), default=0)
        seen = (
            "not seen in the log"
            if got == 0
            else (f"seen for {got} of {expectation.count} ranks in the log")
        )
        warning = (
            f"{checkpoint.title}: its line was {seen} (this vLLM may word it differently); "
            f"a later stage proves it: {proof}"
        )
        evidence = "\n".join([expectation.evidence(), f"proven by: {proof}"]).lstrip("\n")
        return self.reporter.passed(
            checkpoint, evidence, node=expectation.node, log_tail=context, warning=warning
        )

    async def failures(
        self,
        checkpoint: Checkpoint,
        *,
        still_serving: Callable[[FollowLost], Awaitable[str | None]] | None = None,
    ) -> AsyncGenerator[Failed | Progress, None]:
        """For a running cluster: yield the first failure, however long it takes to come, or a
        Progress saying it was stopped on request (a `down`, `docker stop`): no failure.

        A node whose streams broke (its engine or SSH went away) is a failure unless
        `still_serving(item)` says the server still answers (and takes care of following the
        node again) by saying what was lost of the node (its Docker engine, or SSH to it; None:
        the server does not answer): then a Progress `monitoring_lost`, later
        `monitoring_resumed` when a
        FollowResumed arrives; the API going down meanwhile names that node as the likely cause.
        """
        while True:
            item = await self._next(timeout=None)
            if isinstance(item, MemoryLow):
                yield Progress(
                    elapsed_s=self.reporter.elapsed(),
                    phase="memory_low",
                    node=item.node,
                    message=item.message,
                )
                continue
            if isinstance(item, FollowResumed):
                self._lost.pop(item.node, None)
                yield Progress(
                    elapsed_s=self.reporter.elapsed(),
                    phase="monitoring_resumed",
                    node=item.node,
                    message=f"monitoring resumed on {item.node}: its container's log and events "
                    f"are followed again (after {item.lost_s:.0f} s without)",
                )
                continue
            if (
                isinstance(item, FollowLost)
                and item.failure is FOLLOW_LOST
                and self._stop is None
                and still_serving is not None
            ):
                if item.node in self._lost:
                    continue  # its other stream, broken by the same cause
                lost = await still_serving(item)
                if lost is not None:
                    self._lost[item.node] = item.reason
                    yield Progress(
                        elapsed_s=self.reporter.elapsed(),
                        phase="monitoring_lost",
                        node=item.node,
                        message=f"monitoring lost on {item.node}: {lost} ({item.reason}); the "
                        "server is not lost, the API still serves: probing it and reconnecting "
                        "to the node",
                    )
                    continue
            if isinstance(item, ContainerExited | FollowLost | HealthLost) and self._stop is None:
                shutdown = self._diagnoser(item.node).stopped_on_request
                if shutdown is not None:  # its own log says it was asked to stop
                    self._stop = (item.node, f"{item.node} logged a requested shutdown: {shutdown}")
            if isinstance(item, StopRequested) or (
                self._stop is not None
                and isinstance(item, ContainerExited | FollowLost | HealthLost)
            ):
                node, what = self._stopping(item)
                yield Progress(
                    elapsed_s=self.reporter.elapsed(),
                    phase="stopped",
                    node=node,
                    message=f"stopped on request: {what}",
                )
                return
            failure = (
                self._symptom_failure(checkpoint)
                if item is None
                else self._failure(item, checkpoint)
            )
            if failure is not None:
                yield failure
                return

    def _stopping(self, item: MonitorItem) -> tuple[str, str]:
        """A stop was asked for: every node's log is teardown from here on. The stop: its node,
        what stopped it."""
        if self._stop is not None:
            return self._stop
        if isinstance(item, StopRequested):
            how = {15: "SIGTERM", 2: "SIGINT"}.get(item.signal, f"signal {item.signal}")
            self._stop = (
                item.node,
                f"the container on {item.node} was sent {how} (`down`, `docker stop`, or its Docker engine stopping)",
            )
            for node in {item.node, *self._diagnosers}:
                self._diagnoser(node).request_stop(self._stop[1])
            return self._stop
        raise AssertionError(f"{item!r} came without a stop to stand for")

    def _failure(self, item: MonitorItem, checkpoint: Checkpoint) -> Failed | None:
        if isinstance(item, Shed):
            log.warning("%d log lines shed: they came faster than they were read", item.count)
            return None
        if isinstance(item, FollowResumed | MemoryLow):
            return None
        if isinstance(item, ServingHung):
            return self.reporter.known(
                checkpoint,
                SERVING_HUNG,
                {"detail": item.detail},
                node=item.node,
                evidence=item.evidence,
                log_tail=self.monitor.every_tail(EVERY_NODE_LINES),
            )
        if isinstance(item, KernelOomKill):
            return self.reporter.known(
                checkpoint,
                KERNEL_OOM_KILL,
                {"kills": str(item.kills), "node": item.node, "memory": item.reading.describe()},
                node=item.node,
                evidence=f"/proc/vmstat oom_kill rose by {item.kills} on {item.node}; "
                f"{item.reading.describe()}",
                log_tail=self.monitor.tail(item.node),
            )
        if isinstance(item, HealthLost) and self._lost:
            node, lost = next(iter(self._lost.items()))
            return self.reporter.known(
                BY_ID["health"],
                API_DOWN_NODE_LOST,
                {"detail": item.detail, "node": node, "lost": lost},
                node=node,
                evidence=item.detail,
                log_tail=self.monitor.tail(item.node),
            )
        if isinstance(item, HealthLost):
            return self.reporter.known(
                BY_ID["health"],
                API_DOWN,
                {"detail": item.detail},
                node=item.node,
                evidence=item.detail,
                log_tail=self.monitor.tail(item.node),
            )
        if isinstance(item, StopRequested):
            _, how = self._stopping(item)
            return self.reporter.known(
                checkpoint,
                STOPPED_ON_REQUEST,
                {"checkpoint": checkpoint.title, "how": how},
                node=item.node,
                evidence=how,
                log_tail=self.monitor.tail(item.node),
            )
        if isinstance(item, LogLine):
            diagnosis = self._diagnoser(item.node).feed(item.text)
            if diagnosis is None:
                return None
            if diagnosis.role == "symptom":
                if self._symptom is None:
                    self._symptom = (item.node, time.monotonic() + SYMPTOM_GRACE_S)
                return None
            return self.failure_from(diagnosis, checkpoint, item.node)
        if isinstance(item, ContainerExited):
            return self._exit_failure(checkpoint, item)
        return self.reporter.known(
            checkpoint,
            item.failure,
            {"reason": item.reason, "checkpoint": checkpoint.title},
            node=item.node,
            evidence=item.reason,
            log_tail=self.monitor.tail(item.node),
        )

    def _new_findings(self) -> list[Diagnosis]:
        """Non-fatal findings (e.g. NCCL over sockets) not yet attached to a checkpoint."""
        found = [
            finding
            for diagnoser in self._diagnosers.values()
            for finding in diagnoser.findings
            if finding.signature_id not in self._reported_findings
        ]
        self._reported_findings.update(finding.signature_id for finding in found)
        return found

    def _passed(
        self, expectation: Expectation, proven_by: Expectation | None = None
    ) -> CheckpointPassed:
        """Its own lines are the evidence; a provisional line's checkpoint is passed when the
        later stage `proven_by` is done, and dated by that stage's line."""
        lines = expectation.lines
        last = lines[-1]
        dated = proven_by.lines[-1] if proven_by is not None else last
        node = last.node
        evidence = expectation.evidence()
        findings = self._new_findings()
        warning = (
            "; ".join(f"{f.title} ({f.evidence.strip()[-120:]}): {f.fix}" for f in findings) or None
        )
        return self.reporter.passed(
            expectation.checkpoint,
            evidence,
            node=expectation.node or (node if expectation.count == 1 else None),
            log_tail=self.monitor.tail(node),
            warning=warning,
            logged_at=dated.logged_at,
        )

    def _timeout_failure(self, checkpoint: Checkpoint, phase_deadline: float) -> Failed:
        node = self._quietest_node()
        if time.monotonic() >= phase_deadline:
            limit = getattr(self.config.timeouts, checkpoint.phase, None)
            diagnosis = diagnosis_of(
                PHASE_TIMEOUT,
                (self.monitor.tail(node, 1) or [""])[-1] if node else "",
                0,
                [],
                {"phase": checkpoint.phase, "checkpoint": checkpoint.title, "limit": f"{limit:g}"},
            )
        else:
            diagnosis = (
                self._diagnoser(node).diagnose_stall(checkpoint.phase, self.config.timeouts.stall)
                if node
                else unrecognised([], where=checkpoint.phase)
            )
        return self.failure_from(diagnosis, checkpoint, node)

    def _exit_failure(self, checkpoint: Checkpoint, item: ContainerExited) -> Failed:
        lines = self.monitor.tail(item.node, 500)
        if item.oom_killed:
            found = diagnose(lines, self._table, self._words, self._learnt)
            if found is None or found.role != "cause":
                return self.reporter.known(
                    checkpoint,
                    CONTAINER_OOM_KILLED,
                    {"node": item.node, "checkpoint": checkpoint.title},
                    node=item.node,
                    evidence=f"Docker: the container on {item.node} was OOM-killed "
                    f"(exit code {item.exit_code})",
                    log_tail=self.monitor.tail(item.node),
                )
        diagnosis = diagnose(lines, self._table, self._words, self._learnt) or unrecognised(
            lines, where=f"{checkpoint.phase} on {item.node}"
        )
        failed = self.failure_from(diagnosis, checkpoint, item.node)
        how = "was OOM-killed" if item.oom_killed else f"exited with code {item.exit_code}"
        return failed.model_copy(
            update={
                "summary": f"the container on {item.node} {how} during {checkpoint.title}: {diagnosis.title}"
            }
        )

    def _quietest_node(self) -> str | None:
        # The head carries vLLM's log; prefer it when several nodes are silent.
        head = self.config.head.name
        return (
            head
            if head in self._diagnosers or self.monitor.tail(head)
            else next(iter(self._diagnosers), None)
        )
