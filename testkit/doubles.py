"""In-memory doubles for handler tests: a chat that records what it is sent, and controllers that
play a script of events, wait where told, or raise (errbot's TestBackend, httpx's MockTransport).
No sockets, no Slack stand-in, no cluster: a handler test runs in milliseconds. Test what a
command means here; the stand-in (testkit/slack_standin) is for the Slack adapter itself.

    controllers = ScriptedControllers(up=[passed("ssh"), hold := Hold(), ready()])
    async with running_dispatcher(controllers) as (dispatcher, chat):
        await dispatcher.command(Invocation(ALICE, CH, "up"))
        await hold.reached.wait()  # the job is running, blocked inside the controller
"""

from __future__ import annotations

import asyncio
import itertools
import math
import sqlite3
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from bot.config import load_config
from cluster.config import ClusterConfig
from cluster.events import (
    CheckpointPassed,
    CompletionSample,
    ContainerState,
    Event,
    Failed,
    Ready,
    StatusReport,
)
from cluster.operations.preflight import NOT_OURS, Leftover
from cluster.progress.checkpoints import launch_plan
from handlers.chat import Posted
from handlers.dispatch import Dispatcher
from handlers.errors import ChatUnavailable, RateLimited
from handlers.jobs import ControllerFactory
from handlers.messages import Attachment, Message
from handlers.outbox import Timing
from handlers.settings import BotSettings
from handlers.store import Store
from testkit.lab_cluster import LAB_CONFIG

CLUSTER = load_config(LAB_CONFIG).cluster
CH = "C0SPARKOPS"
ALICE, BOB = "U0ALICE", "U0BOB"


def settings(
    tmp_path: Path | None = None, *, operators: tuple[str, ...] = (ALICE,), **jobs
) -> BotSettings:
    """Alice (or `operators`) operates in CH, anyone reads there and in C0GENERAL; the store in
    tmp_path or in memory."""
    return BotSettings.model_validate(
        {
            "access": {
                "read": {"users": ["*"], "channels": [CH, "C0GENERAL"]},
                "operate": {"users": list(operators), "channels": [CH]},
            },
            "commands": {"overrides": {"max_model_len": {"min": 1024, "max": 32768}}},
            "jobs": {"update_interval": 0, "watch_health_interval": 1, **jobs},
            "store": {"path": str(tmp_path / "spark-bot.db") if tmp_path else ":memory:"},
        }
    )


# -- the chat ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Sent:
    channel: str
    ts: str
    message: Message
    thread: str | None = None
    broadcast: bool = False


class RecordingChat:
    """The Chat port in memory: every post and private reply as sent, each message's latest version."""

    def __init__(self) -> None:
        self.posts: list[Sent] = []
        self.private: list[tuple[str, Message]] = []  # (user, message)
        self.private_uploads: list[tuple[str, Attachment]] = []  # (user, file)
        self.uploads: list[tuple[str, Attachment]] = []  # (thread, attachment)
        self.latest: dict[str, Message] = {}  # ts -> the message as it reads now
        self._ts = itertools.count(1)
        self._changed = asyncio.Condition()

    async def post(
        self, channel: str, message: Message, *, thread: str | None = None, broadcast: bool = False
    ) -> Posted:
        ts = str(next(self._ts))
        self.posts.append(Sent(channel, ts, message, thread, broadcast))
        self.latest[ts] = message
        await self._notify()
        return Posted(channel, ts)

    async def update(self, posted: Posted, message: Message) -> None:
        self.latest[posted.ts] = message
        await self._notify()

    async def upload(self, channel: str, thread: str, attachment: Attachment, comment: str) -> None:
        self.uploads.append((thread, attachment))

    async def reply_private(
        self, channel: str, user: str, message: Message, *, reply_to: str | None = None
    ) -> None:
        self.private.append((user, message))
        await self._notify()

    async def upload_private(self, user: str, attachment: Attachment, comment: str) -> None:
        self.private_uploads.append((user, attachment))
        await self._notify()

    async def permalink(self, posted: Posted) -> str | None:
        return f"https://chat.example/{posted.channel}/p{posted.ts}"

    def without_waiting(self) -> RecordingChat:
        return self

    async def _notify(self) -> None:
        async with self._changed:
            self._changed.notify_all()

    async def wait_until(self, condition: Callable[[], bool]) -> None:
        """Until `condition()` holds, checked after each message sent (for what tasks send)."""
        async with self._changed:
            await self._changed.wait_for(condition)

    def parent(self, index: int = 0) -> Message:
        """A message posted in the channel (not in a thread), as it reads now."""
        return self.latest[[p.ts for p in self.posts if p.thread is None][index]]

    def thread(self, parent_index: int = 0) -> list[Sent]:
        ts = [p.ts for p in self.posts if p.thread is None][parent_index]
        return [p for p in self.posts if p.thread == ts]


class RefusingChat(RecordingChat):
    """A RecordingChat whose channel calls (post, update, upload) can be held or refused the way
    Slack refuses them under its rate limits: `refuse("update", 30)` answers the next 30 updates
    with RateLimited(retry_after); while `gate` is clear every channel call waits. Private
    replies always get through."""

    def __init__(
        self, retry_after: float = 1.0, clock: Callable[[], float] = time.monotonic
    ) -> None:
        super().__init__()
        self.retry_after = retry_after
        self.refusals: dict[str, float] = {}  # method -> refusals left
        self.refused: Counter[str] = Counter()
        self.gate = asyncio.Event()
        self.gate.set()
        self.clock = clock
        self.down_until = -math.inf  # channel calls fail as in an outage until the clock says this
        self.posts_before_hold = math.inf  # posts let through before the gate closes by itself
        self.held = asyncio.Event()  # a call has come to the closed gate

    def refuse(self, method: str, times: float = math.inf) -> None:
        self.refusals[method] = times

    def hold_after_posts(self, posts: int) -> None:
        """Let `posts` posts through (a job's parent), then hold every channel call at the gate."""
        self.posts_before_hold = posts

    async def _admit(self, method: str) -> None:
        if method == "post" and self.posts_before_hold <= 0:
            self.gate.clear()  # once: opening it again lets everything through
            self.posts_before_hold = math.inf
        if not self.gate.is_set():
            self.held.set()
        await self.gate.wait()
        if method == "post":
            self.posts_before_hold -= 1
        if self.clock() < self.down_until:
            self.refused[method] += 1
            raise ChatUnavailable(f"chat.{method}: Slack answered service_unavailable")
        if self.refusals.get(method, 0) > 0:
            self.refusals[method] -= 1
            self.refused[method] += 1
            raise RateLimited(f"chat.{method}", self.retry_after)

    async def post(
        self, channel: str, message: Message, *, thread: str | None = None, broadcast: bool = False
    ) -> Posted:
        await self._admit("post")
        return await super().post(channel, message, thread=thread, broadcast=broadcast)

    async def update(self, posted: Posted, message: Message) -> None:
        await self._admit("update")
        await super().update(posted, message)

    async def upload(self, channel: str, thread: str, attachment: Attachment, comment: str) -> None:
        await self._admit("upload")
        await super().upload(channel, thread, attachment, comment)


class VirtualTime:
    """The outboxes' time, moved only by their waits: a wait returns at once with the clock moved
    on, so a test of Retry-After or of a timeout of minutes takes no real time."""

    def __init__(self) -> None:
        self.at = 0.0
        self.waits: list[float] = []

    def now(self) -> float:
        return self.at

    async def sleep(self, seconds: float) -> None:
        self.waits.append(seconds)
        self.at += max(0.0, seconds)
        await asyncio.sleep(0)

    def timing(self) -> Timing:
        return Timing(now=self.now, sleep=self.sleep)


# -- the controller ---------------------------------------------------------------------------


@dataclass
class Hold:
    """A step where the operation waits: `reached` is set when it gets there; it goes on once
    `release` is set, or ends when cancelled."""

    reached: asyncio.Event = field(default_factory=asyncio.Event)
    release: asyncio.Event = field(default_factory=asyncio.Event)


@dataclass(frozen=True)
class AskReplace:
    """A launch's preflight finding leftovers (`Leftover`s): it asks the operation's
    `confirm_replace`, and a no ends the launch with the no_stale_container failure."""

    leftovers: tuple[Leftover, ...]

    @classmethod
    def running(cls, *, owners: dict[str, str | None] | None = None) -> AskReplace:
        """Our container running on every node; `owners` as in `status_report()`."""
        owners = owners or {}
        return cls(
            tuple(
                Leftover(
                    n.name,
                    "running" if owners.get(n.name, CLUSTER.name) else f"running{NOT_OURS}",
                    ours=owners.get(n.name, CLUSTER.name) is not None,
                )
                for n in CLUSTER.nodes
            )
        )


Step = Event | Hold | AskReplace | BaseException


@dataclass(frozen=True)
class Call:
    operation: str
    config: ClusterConfig
    options: dict[str, Any]


class ScriptedControllers:
    """A ControllerFactory: each controller's operations play the script given for them.

    An operation without a script yields nothing; `status` reports no container and `watch`
    holds until stopped, unless scripted otherwise. `calls` lists every operation started,
    `cleaned_up` every one whose generator was closed (the controller's own cleanup ran),
    `stopped_early` those closed before the end of their script (where the real controller
    removes what it started)."""

    def __init__(self, **scripts: list[Step]):
        self.scripts: dict[str, list[Step]] = {
            "status": [status_report()],
            "watch": [Hold()],
            **scripts,
        }
        self.calls: list[Call] = []
        self.cleaned_up: list[str] = []
        self.stopped_early: list[str] = []

    def __call__(self, config: ClusterConfig) -> ScriptedController:
        return ScriptedController(self, config)

    async def play(
        self, operation: str, config: ClusterConfig, options: dict[str, Any]
    ) -> AsyncIterator[Event]:
        self.calls.append(Call(operation, config, options))
        played = False
        try:
            for step in self.scripts.get(operation, []):
                if isinstance(step, Hold):
                    step.reached.set()
                    await step.release.wait()
                elif isinstance(step, AskReplace):
                    if not await options["confirm_replace"](step.leftovers):
                        yield failed("no_stale_container")
                        break
                elif isinstance(step, BaseException):
                    raise step
                else:
                    yield step
            played = True
        finally:
            self.cleaned_up.append(operation)
            if not played:
                self.stopped_early.append(operation)


class ScriptedController:
    """What handlers use of cluster.controller.Controller, played from a script."""

    def __init__(self, scripts: ScriptedControllers, config: ClusterConfig):
        self.scripts = scripts
        self.config = config

    def up(self, **options: Any) -> AsyncIterator[Event]:
        return self.scripts.play("up", self.config, options)

    def verify(self) -> AsyncIterator[Event]:
        return self.scripts.play("verify", self.config, {})

    def bench(self, **options: Any) -> AsyncIterator[Event]:
        return self.scripts.play("bench", self.config, options)

    def down(self) -> AsyncIterator[Event]:
        return self.scripts.play("down", self.config, {})

    def sync_image(self, **options: Any) -> AsyncIterator[Event]:
        return self.scripts.play("sync_image", self.config, options)

    def sync_model(self, **options: Any) -> AsyncIterator[Event]:
        return self.scripts.play("sync_model", self.config, options)

    def status(self) -> AsyncIterator[Event]:
        return self.scripts.play("status", self.config, {})

    def logs(self, node: str | None = None, lines: int = 50) -> AsyncIterator[Event]:
        return self.scripts.play("logs", self.config, {"node": node, "lines": lines})

    def watch(self, **options: Any) -> AsyncIterator[Event]:
        return self.scripts.play("watch", self.config, options)

    async def diagnostics(self, output: Path, **options: Any) -> AsyncIterator[Event]:
        """Plays the "diag" script; a bundle of a few bytes is written to `output` first."""
        await asyncio.to_thread(output.write_bytes, b"a bundle")
        async for event in self.scripts.play("diag", self.config, options):
            yield event.model_copy(update={"path": str(output)})


# -- events -----------------------------------------------------------------------------------


def passed(checkpoint: str) -> CheckpointPassed:
    title = next(c.title for c in launch_plan(CLUSTER) if c.id == checkpoint)
    return CheckpointPassed(
        elapsed_s=0.1, checkpoint=checkpoint, title=title, evidence=f"{checkpoint} proven"
    )


def launch_passes() -> list[CheckpointPassed]:
    return [passed(c.id) for c in launch_plan(CLUSTER)]


def ready() -> Ready:
    sample = CompletionSample(
        text="Hello.",
        prompt_tokens=9,
        completion_tokens=105,
        finish_reason="stop",
        ttft_s=0.053,
        e2e_s=0.31,
        decode_tps=401.0,
    )
    return Ready(
        elapsed_s=2.4,
        model=CLUSTER.serve.api_model_name,
        api_url="http://127.0.0.1:8000",
        sample=sample,
    )


def failed(checkpoint: str = "weights") -> Failed:
    title = next(c.title for c in launch_plan(CLUSTER) if c.id == checkpoint)
    return Failed(
        elapsed_s=1.5,
        checkpoint=checkpoint,
        title=title,
        node=CLUSTER.head.name,
        summary="NCCL failed to initialise",
        evidence="NCCL error: unhandled system error",
        cause="no IPC_LOCK",
        fix="add --cap-add=IPC_LOCK",
    )


def status_report(
    *, running: bool = False, owners: dict[str, str | None] | None = None
) -> StatusReport:
    """Our containers on every node, running or absent; `owners`: who started the one on a node
    (default: spark-bot, for this cluster; None: not spark-bot)."""
    owners = owners or {}
    containers = [
        ContainerState(
            node=n.name,
            container=CLUSTER.container.name,
            present=running,
            running=running,
            status="running" if running else "absent",
            owner=owners.get(n.name, CLUSTER.name),
        )
        for n in CLUSTER.nodes
    ]
    return StatusReport(elapsed_s=0.0, containers=containers, api_healthy=running or None)


# -- the store --------------------------------------------------------------------------------


class Clock:
    """The store's time for leases and heartbeats, moved only by the test."""

    def __init__(self) -> None:
        self.at = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.at

    def advance(self, seconds: float) -> None:
        self.at += timedelta(seconds=seconds)


class FailingStore(Store):
    """A Store whose writes fail, while `failing` is set, as SQLite's do on a full disk (or with
    `error`: "database is locked", "disk I/O error"); `refused` counts the writes that failed."""

    def __init__(self, path: Path | str, error: str = "database or disk is full"):
        super().__init__(path)
        self.error = error
        self.failing = False
        self.refused = 0

    async def _run(self, fn, *args) -> Any:
        return await super()._run(lambda db, *a: fn(_FailingConnection(db, self), *a), *args)


class _FailingConnection:
    WRITES = ("INSERT", "UPDATE", "DELETE", "REPLACE", "BEGIN")

    def __init__(self, db: sqlite3.Connection, store: FailingStore):
        self._db, self._store = db, store

    def execute(self, sql: str, parameters: Any = ()) -> sqlite3.Cursor:
        if self._store.failing and sql.lstrip().upper().startswith(self.WRITES):
            self._store.refused += 1
            raise sqlite3.OperationalError(self._store.error)
        return self._db.execute(sql, parameters)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._db, name)


# -- the bot ----------------------------------------------------------------------------------


@asynccontextmanager
async def running_dispatcher(
    controllers: ControllerFactory,
    bot_settings: BotSettings | None = None,
    *,
    cluster: ClusterConfig = CLUSTER,
    store: Store | None = None,
    chat: RecordingChat | None = None,
    time: VirtualTime | None = None,
) -> AsyncIterator[tuple[Dispatcher, RecordingChat]]:
    """A started dispatcher on a RecordingChat (or `chat`), its messages delivered on `time` if
    given; `controllers`: usually ScriptedControllers. Stopped after."""
    bot_settings = bot_settings or settings()
    chat = chat or RecordingChat()
    dispatcher = Dispatcher(
        cluster, bot_settings, chat, store or Store(bot_settings.store.path), controllers
    )
    if time is not None:
        dispatcher.jobs.deliveries.timing = time.timing()
    await dispatcher.start()
    try:
        yield dispatcher, chat
    finally:
        await dispatcher.stop()
