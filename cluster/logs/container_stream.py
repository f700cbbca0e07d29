"""Follow our containers on every node as one stream: log lines and container deaths.

Event-driven: each node's container log is followed through the Docker API (`follow=True`)
and its engine's event stream is subscribed for `die` and `oom`; both feed one queue that the
operations read. No timer polls the containers.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from cluster.aio import Turns
from cluster.config import Secrets
from cluster.diagnosis.failures import CONTAINER_REMOVED, FOLLOW_LOST, KnownFailure
from cluster.errors import ContainerMissing, NodeError
from cluster.logs.backlog import KEEP, MATTERS, PLAIN, Backlog, Shed
from cluster.logs.logtext import LineSplitter, clean_line
from cluster.logs.timestamps import parse_docker_timestamp
from cluster.nodes import NodeConnection
from cluster.resources.memory import KernelOomKill, MemoryLow
from cluster.serving.liveness import ServingHung


@dataclass(frozen=True)
class LogLine:
    node: str
    text: str
    logged_at: datetime | None = None  # when the engine received the line (Docker's timestamp)


@dataclass(frozen=True)
class ContainerExited:
    node: str
    exit_code: int | None
    oom_killed: bool


@dataclass(frozen=True)
class FollowLost:
    """The node's log or event stream broke: the container was removed, or the node went away."""

    node: str
    reason: str
    failure: KnownFailure = FOLLOW_LOST


@dataclass(frozen=True)
class FollowResumed:
    """The node's streams are followed again after a FollowLost (its engine or SSH came back)."""

    node: str
    lost_s: float  # how long the node was not followed


@dataclass(frozen=True)
class StopRequested:
    """Someone asked the container to stop (`docker stop`, a `down`): SIGTERM or SIGINT. What
    follows on every node is teardown, not a failure."""

    node: str
    signal: int


@dataclass(frozen=True)
class HealthLost:
    """The API stopped answering /health (probed at an interval: an endpoint has no stream)."""

    node: str
    detail: str


# Signals of a requested, graceful stop; `docker kill` (SIGKILL) is a death like any other.
GRACEFUL_SIGNALS = frozenset({2, 15})

MonitorItem = (
    LogLine
    | ContainerExited
    | FollowLost
    | FollowResumed
    | StopRequested
    | HealthLost
    | ServingHung
    | MemoryLow
    | KernelOomKill
    | Shed
)

# A line as it waits in the backlog: a plain tuple of strings and a timestamp, which the garbage
# collector stops tracking (a dataclass it tracks for ever), so a full backlog of a flood's lines
# adds nothing to the collections that stall the loop. A LogLine once read.
_Queued = tuple[str, str, datetime | None]

QUEUED_LINES = 20_000  # lines waiting for the reader (a launch busy posting to chat)
# Docker orders a container's events (a stop's `kill` before its `die`), not the log stream
# against the event stream: what the log stream's end says waits this long for the event
# stream to tell the container's end (its `die`, or the stream's own end).
EVENTS_SETTLE_S = 5.0


class ClusterMonitor:
    """Owns one follower task per node; `aclose` cancels them all."""

    def __init__(
        self,
        container_name: str,
        secrets: Secrets,
        tail_lines: int,
        *,
        matters: Callable[[str], bool] = lambda text: False,
        queued_lines: int = QUEUED_LINES,
    ):
        """`matters(text)`: a line the reader must see even when lines are shed."""
        self.container_name = container_name
        self._secrets = secrets
        self._tails: dict[str, deque[str]] = {}
        self._tail_lines = tail_lines
        self._matters = matters
        self._queue: Backlog[MonitorItem | _Queued] = Backlog(queued_lines, rank=self._rank)
        self._tasks: list[asyncio.Task[None]] = []
        self._followed: dict[str, list[asyncio.Task[None]]] = {}
        self._last_logged: dict[str, datetime] = {}

    def tail(self, node: str, lines: int | None = None) -> list[str]:
        buffer = list(self._tails.get(node, ()))
        return [self._secrets.redact(text) for text in buffer[-(lines or self._tail_lines) :]]

    def every_tail(self, lines: int) -> list[str]:
        """The last `lines` lines of every followed node, each node's under its name."""
        out: list[str] = []
        for node in self._tails:
            out.append(f"── {node} ──")
            out.extend(self.tail(node, lines) or ["(no output)"])
        return out

    def follow(self, node: NodeConnection, *, backlog: int | str = "all") -> None:
        """Start following `node`'s container: its log from `backlog` lines back, and its death."""
        if node.name in self._followed:
            return
        self._tails[node.name] = deque(maxlen=max(self._tail_lines, 200))
        self._start(node, backlog)

    async def refollow(self, node: NodeConnection) -> None:
        """Follow `node` again over a new connection after its streams broke: its log from the
        last line already read (none is published twice), and its death."""
        for task in self._followed.pop(node.name, []):
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        self._start(node, "all", since=self._last_logged.get(node.name))

    def _start(
        self, node: NodeConnection, backlog: int | str, since: datetime | None = None
    ) -> None:
        end_told = asyncio.Event()  # the event stream told the container's end, or ended
        tasks = [
            asyncio.create_task(self._follow_log(node, backlog, end_told, since)),
            asyncio.create_task(self._watch_events(node, end_told)),
        ]
        self._followed[node.name] = tasks
        self._tasks.extend(tasks)

    def run(self, source: Coroutine[Any, Any, None]) -> None:
        """Run another source of items beside the followers (a health probe, which `publish`es
        into the same stream); stopped with them."""
        self._tasks.append(asyncio.create_task(source))

    def publish(self, item: MonitorItem) -> None:
        self._queue.put(item)

    def publish_output(self, node: str, text: str) -> None:
        """A line `node` printed outside any container (the operator's launcher, cleaned and
        redacted by its reader): read, diagnosed and kept in the node's tail as its log is."""
        self._tails.setdefault(node, deque(maxlen=max(self._tail_lines, 200))).append(text)
        self._queue.put(LogLine(node, text))

    async def next(self, timeout: float | None) -> MonitorItem:
        """The next item; TimeoutError when nothing arrives for `timeout` seconds."""
        async with asyncio.timeout(timeout):
            item = await self._queue.get()
        if isinstance(item, tuple):  # a line read from a log: redacted now (see _publish_line)
            node, text, logged_at = item
            return LogLine(node, self._secrets.redact(text), logged_at)
        if isinstance(item, LogLine):  # published by another source
            return LogLine(item.node, self._secrets.redact(item.text), item.logged_at)
        return item

    @property
    def queued(self) -> int:
        return len(self._queue)

    def _rank(self, item: MonitorItem | _Queued) -> int:
        if isinstance(item, tuple):
            return MATTERS if self._matters(item[1]) else PLAIN
        if not isinstance(item, LogLine):
            return KEEP
        return MATTERS if self._matters(item.text) else PLAIN

    async def _follow_log(
        self,
        node: NodeConnection,
        backlog: int | str,
        end_told: asyncio.Event,
        since: datetime | None = None,
    ) -> None:
        name = self.container_name
        lines = LineSplitter()
        turns = Turns()
        try:
            stream = node.docker.follow_log(name, backlog=backlog, timestamps=True, since=since)
            async with contextlib.aclosing(stream):
                async for chunk in stream:
                    for raw in lines.feed(chunk):
                        self._publish_line(node.name, raw, since)
                    await turns.give()
            if (last := lines.end()) is not None:
                self._publish_line(node.name, last)
            # The stream ends when the container stops: say how it ended, in case the
            # event stream (subscribed after the start) missed the `die`.
            await _settled(end_told)
            state = (await node.docker.inspect_container(name))["State"]
            if not state.get("Running"):
                self._queue.put(
                    ContainerExited(node.name, state.get("ExitCode"), bool(state.get("OOMKilled")))
                )
        except ContainerMissing:
            self._queue.put(
                FollowLost(
                    node.name,
                    f"container {name} no longer exists on {node.name}",
                    CONTAINER_REMOVED,
                )
            )
        except NodeError as exc:
            await _settled(end_told)  # a stop's `kill` may be on its way (the engine stopping)
            self._queue.put(FollowLost(node.name, f"log stream broke: {exc.problem}"))

    def _publish_line(self, node: str, raw: str, since: datetime | None = None) -> None:
        stamp, _, line = raw.partition(" ")
        logged_at = parse_docker_timestamp(stamp)
        if logged_at is not None:
            if since is not None and logged_at <= since:
                return  # read before the stream broke (Docker's `since` is inclusive)
            self._last_logged[node] = logged_at
        # Redacted when read (`next`, `tail`): most lines of a flood are shed or scroll out of
        # the tail unread, and redacting every line cost more than diagnosing it.
        text = clean_line(line if logged_at else raw)
        self._tails[node].append(text)
        self._queue.put((node, text, logged_at))

    async def _watch_events(self, node: NodeConnection, end_told: asyncio.Event) -> None:
        oom = False
        try:
            events = node.docker.events(self.container_name, ["die", "oom", "kill"])
            async with contextlib.aclosing(events):
                async for event in events:
                    attributes = event.get("Actor", {}).get("Attributes", {})
                    if event.get("Action") == "oom":
                        oom = True
                    elif event.get("Action") == "kill":
                        signal = int(attributes.get("signal") or 0)
                        if signal in GRACEFUL_SIGNALS:
                            self._queue.put(StopRequested(node.name, signal))
                    elif event.get("Action") == "die":
                        code = attributes.get("exitCode")
                        self._queue.put(
                            ContainerExited(node.name, int(code) if code is not None else None, oom)
                        )
                        end_told.set()
            self._queue.put(FollowLost(node.name, "Docker event stream ended"))
        except NodeError as exc:
            self._queue.put(FollowLost(node.name, f"Docker event stream broke: {exc.problem}"))
        finally:
            end_told.set()  # ended, broke or cancelled: nothing more will be told

    async def aclose(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks.clear()


async def _settled(end_told: asyncio.Event) -> None:
    """Until the event stream has told the container's end (or ended), at most EVENTS_SETTLE_S."""
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(end_told.wait(), EVENTS_SETTLE_S)
