"""What the operator-facing benchmarks share: a cluster to run on (the lab, or the embedded one
for a smoke run without root), the real bot on the Slack stand-in with the controller's events
recorded as they reach the bot, Docker's timestamps of log lines, percentiles and tables.

Every time here is wall-clock (`time.time()`): Docker stamps its log lines with the same
machine's clock, and the stand-in records `wall_time` for every call it receives.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Collection, Sequence
from contextlib import aclosing, asynccontextmanager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import aiodocker

from benchmarks.command_load import StandInThread
from bot.app import settle_heap
from cluster.config import ClusterConfig, NodeConfig, Secrets
from cluster.controller import Controller
from cluster.events import Event
from cluster.logs.timestamps import parse_docker_timestamp
from cluster.operations.preflight import ConfirmReplace
from handlers.settings import BotSettings
from testkit.doubles import ALICE, CH, settings
from testkit.lab_cluster import collect
from testkit.slack_bot import header, slack_bot
from testkit.slack_standin import Call

WHERE = ("lab", "embedded", "lab-real")


def serve_for(nodes: int, backend: str) -> dict[str, Any]:
    """TP 2 on two nodes (the Spark pair); on more, one rank per node by pipeline parallelism."""
    if nodes == 2:
        return {"backend": backend, "tensor_parallel_size": 2, "pipeline_parallel_size": 1}
    return {"backend": backend, "tensor_parallel_size": 1, "pipeline_parallel_size": nodes}


@asynccontextmanager
async def cluster_on(
    where: str,
    nodes: int = 2,
    *,
    backend: str = "ray",
    env: dict[str, str] | None = None,
    timeouts: dict[str, float] | None = None,
    watch: dict[str, float] | None = None,
) -> AsyncIterator[ClusterConfig]:
    """A cluster of `nodes` with nothing of ours running, as a config; emptied again on exit.
    "lab": the lab of emulated Sparks (root; held exclusively meanwhile); "embedded": the demo's
    emulated Docker engines on this machine (no root, no SSH: the `local` driver); "lab-real":
    the lab's 2 nodes with the real vLLM and Ray (configs/lab-real*.yaml; root)."""
    if where == "lab":
        from lab.api import exclusive_use, lab_up
        from testkit.lab_cluster import cluster_for

        with exclusive_use():
            lab = await asyncio.to_thread(lab_up, nodes=nodes)
            config = cluster_for(lab, env=env, serve=serve_for(nodes, backend), timeouts=timeouts)
            config = config.model_copy(update={"watch": config.watch.model_copy(update=watch)})
            async with emptied(config):
                yield config
    elif where == "lab-real":
        from lab.api import exclusive_use, lab_up
        from testkit.real_cluster import MP, RAY, real_cluster

        if nodes != 2:
            raise ValueError("the lab's real engine runs on 2 nodes (configs/lab-real*.yaml)")
        with exclusive_use():
            await asyncio.to_thread(lab_up, nodes=2, engine="real")
            config = real_cluster(RAY if backend == "ray" else MP, env=env, timeouts=timeouts)
            config = config.model_copy(update={"watch": config.watch.model_copy(update=watch)})
            async with emptied(config):
                yield config
    elif where == "embedded":
        from demo.cluster import embedded_cluster

        async with embedded_cluster(nodes=nodes) as embedded:
            base = embedded.config
            config = base.model_copy(
                update={
                    "container": base.container.model_copy(
                        update={"env": {**base.container.env, **(env or {})}}
                    ),
                    "serve": base.serve.model_copy(update=serve_for(nodes, backend)),
                    "timeouts": base.timeouts.model_copy(update=timeouts or {}),
                    "watch": base.watch.model_copy(update=watch or {}),
                }
            )
            async with emptied(config):
                yield config
    else:
        raise ValueError(f"where must be one of {WHERE}, not {where!r}")


def api_address(config: ClusterConfig) -> str:
    """The head's API as a user on this machine reaches it: the lab's nodes by their management
    address, the embedded cluster's on this machine's loopback."""
    head = config.head
    host = head.ssh.host if head.driver == "ssh" and head.ssh is not None else "127.0.0.1"
    return f"http://{host}:{config.serve.port}"


@asynccontextmanager
async def emptied(config: ClusterConfig) -> AsyncIterator[None]:
    await down(config)
    try:
        yield
    finally:
        await down(config)


async def down(config: ClusterConfig) -> None:
    await collect(Controller(config, Secrets({})).down())


# --- the controller's events as the bot received them ------------------------------------------


@dataclass
class Recorded:
    at: float  # wall time the bot received the event
    event: Event


@dataclass
class EventLog:
    """Every event of `up` and `watch`, stamped as it reaches the bot's job."""

    items: list[Recorded] = field(default_factory=list)
    changed: asyncio.Event = field(default_factory=asyncio.Event)

    def controller(self, config: ClusterConfig) -> Controller:
        return RecordingController(config, Secrets({}), self)

    def add(self, event: Event) -> None:
        self.items.append(Recorded(time.time(), event))
        self.changed.set()

    def of(self, kind: type[Event], since: int = 0) -> list[Recorded]:
        return [r for r in self.items[since:] if isinstance(r.event, kind)]

    async def wait_for(
        self, found: Callable[[Event], bool], within: float, since: int = 0
    ) -> Recorded:
        async with asyncio.timeout(within):
            while True:
                for item in self.items[since:]:
                    if found(item.event):
                        return item
                self.changed.clear()
                await self.changed.wait()


class RecordingController(Controller):
    def __init__(self, config: ClusterConfig, secrets: Secrets, log: EventLog):
        super().__init__(config, secrets)
        self.log = log

    async def _recorded(self, events: AsyncGenerator[Event, None]) -> AsyncGenerator[Event, None]:
        async with aclosing(events):
            async for event in events:
                self.log.add(event)
                yield event

    def up(
        self,
        *,
        replace: bool = False,
        replace_foreign: Collection[str] = (),
        sample_max_tokens: int = 128,
        take_over: bool = False,
        confirm_replace: ConfirmReplace | None = None,
    ) -> AsyncGenerator[Event, None]:
        return self._recorded(
            super().up(
                replace=replace,
                replace_foreign=replace_foreign,
                sample_max_tokens=sample_max_tokens,
                take_over=take_over,
                confirm_replace=confirm_replace,
            )
        )

    def watch(self, *, health_interval: float = 30.0) -> AsyncGenerator[Event, None]:
        return self._recorded(super().watch(health_interval=health_interval))


# --- the bot on the stand-in ---------------------------------------------------------------------


def bot_settings(store_dir: Path, **jobs: Any) -> BotSettings:
    """The tests' access rules with the shipped job defaults (parent edits at most every 1.5 s,
    a health probe every 30 s) unless `jobs` says otherwise."""
    return settings(store_dir, **{"update_interval": 1.5, "watch_health_interval": 30, **jobs})


class SlackSide(StandInThread):
    """The Slack stand-in on its own thread and loop, with Alice allowed to operate."""

    def __enter__(self) -> SlackSide:
        super().__enter__()
        self.slack.add_user(ALICE)
        return self

    async def up(self) -> tuple[int, str]:
        """`/spark up` as Alice; the stand-in's mark before it and the job's parent message's ts."""
        slack = self.slack
        mark = slack.last_seq()
        await self.call(slack.send_slash_command(ALICE, CH, "up"))
        parent = await self.call(
            slack.wait_for(
                lambda c: c.method == "chat.postMessage" and c.ok and "thread_ts" not in c.params,
                30,
                after=mark,
            )
        )
        assert parent.result is not None
        return mark, str(parent.result["ts"])

    async def reply(self, parent_ts: str, found: Callable[[str], bool], within: float) -> Call:
        """The first thread reply (accepted by Slack) whose header satisfies `found`."""
        return await self.call(
            self.slack.wait_for(
                lambda c: (
                    c.method == "chat.postMessage"
                    and c.ok
                    and c.params.get("thread_ts") == parent_ts
                    and found(header(c))
                ),
                within,
            )
        )

    def replies(self, parent_ts: str) -> list[Call]:
        return [
            c
            for c in self.slack.calls("chat.postMessage")
            if c.ok and c.params.get("thread_ts") == parent_ts
        ]

    def edits(self, parent_ts: str) -> list[Call]:
        return [c for c in self.slack.calls("chat.update") if c.params.get("ts") == parent_ts]


@asynccontextmanager
async def bot_on(
    side: SlackSide, config: ClusterConfig, bot: BotSettings, log: EventLog
) -> AsyncIterator[None]:
    async with slack_bot(side.slack, config, bot, controllers=log.controller):
        await side.call(side.slack.wait_for_connection())
        settle_heap()  # as `spark-bot run` does once the bot is up
        yield


# --- Docker's own record -------------------------------------------------------------------------


async def stamped_lines(node: NodeConfig, container: str) -> list[tuple[datetime, str]]:
    """A container's whole log as Docker stamped it (the node's engine socket is on this
    machine both in the lab and in the embedded cluster)."""
    async with aiodocker.Docker(url=f"unix://{node.docker_socket}") as docker:
        raw = await docker.containers.container(container).log(
            stdout=True, stderr=True, timestamps=True
        )
    lines = []
    for line in "".join(raw).splitlines():
        stamp, _, text = line.partition(" ")
        when = parse_docker_timestamp(stamp)
        if when is not None:
            lines.append((when, text))
    return lines


async def first_stamp(node: NodeConfig, container: str, needle: str) -> datetime | None:
    return next(
        (when for when, text in await stamped_lines(node, container) if needle in text), None
    )


async def kill_container(node: NodeConfig, container: str) -> None:
    async with aiodocker.Docker(url=f"unix://{node.docker_socket}") as docker:
        await docker.containers.container(container).kill()


async def run_in(node: NodeConfig, container: str, argv: list[str]) -> str:
    """Run argv in the container and return its output."""
    async with aiodocker.Docker(url=f"unix://{node.docker_socket}") as docker:
        execution = await docker.containers.container(container).exec(argv)
        async with execution.start(detach=False) as stream:
            chunks = []
            while (message := await stream.read_out()) is not None:
                chunks.append(message.data.decode(errors="replace"))
        return "".join(chunks)


# --- figures ------------------------------------------------------------------------------------


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0-100), inclusive method; the value itself for one sample."""
    ordered = sorted(values)
    if len(ordered) == 1:
        return ordered[0]
    return statistics.quantiles(ordered, n=100, method="inclusive")[round(q) - 1]


def spread(values: Sequence[float]) -> dict[str, float]:
    return {
        "n": len(values),
        "p50": statistics.median(values),
        "p95": percentile(values, 95),
        "max": max(values),
    }


def table(headings: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A plain-text table, columns as wide as their widest cell."""
    cells = [[str(h) for h in headings]] + [[_cell(v) for v in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headings))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) for row in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _cell(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.1f}" if abs(value) >= 100 else f"{value:.3g}"
    return str(value)


def ms(seconds: float) -> float:
    return round(seconds * 1000, 1)


def emit_json(path: Path | None, name: str, payload: Any) -> None:
    """Append the benchmark's figures to `path` as one JSON line (for run_all and the doc)."""
    if path is not None:
        with path.open("a") as out:
            out.write(json.dumps({"benchmark": name, "at": time.time(), **payload}) + "\n")
