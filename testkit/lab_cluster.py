"""Building controllers for the lab as it is now (node count, isolated workers)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

from bot.config import load_config
from cluster.config import ClusterConfig, NodeConfig, Secrets
from cluster.controller import Controller
from cluster.errors import FileUnreadable
from cluster.events import Event, Progress
from cluster.nodes import CommandResult, FileBytes, NodeConnection
from cluster.nodes.base import OUTPUT_TAIL
from lab.api import LabInfo

LAB_CONFIG = Path(__file__).resolve().parents[1] / "configs" / "lab.yaml"

# Phase timeouts for the lab's emulator (a quick stall detector: its silent phases last well
# under a second).
FAST = {"stall": 4, "containers": 20, "ray": 10, "weights": 30, "engine": 30, "api": 30}


def cluster_for(
    lab: LabInfo,
    *,
    env: dict[str, str] | None = None,
    serve: dict | None = None,
    timeouts: dict | None = None,
    **updates,
) -> ClusterConfig:
    """configs/lab.yaml adapted to the lab as it is now (node count, isolated workers)."""
    base = load_config(LAB_CONFIG).cluster
    template = base.nodes[0]
    nodes = []
    for info in lab.nodes:
        assert template.ssh is not None, "the lab's config reaches its nodes over SSH"
        ssh = template.ssh.model_copy(
            update={
                "host": info.mgmt_ip or info.fabric_ip,
                "jump": None if info.mgmt_ip else base.nodes[0].name,
            }
        )
        nodes.append(
            NodeConfig(
                name=info.name,
                ssh=ssh,
                fabric_ip=info.fabric_ip,
                docker_socket=info.docker_socket,
                memory_gib=template.memory_gib,
            )
        )
    container = base.container.model_copy(update={"env": {**base.container.env, **(env or {})}})
    return base.model_copy(
        update={
            "nodes": nodes,
            "container": container,
            "serve": base.serve.model_copy(update=serve or {}),
            "timeouts": base.timeouts.model_copy(update=timeouts or {}),
            **updates,
        }
    )


def controller_for(lab: LabInfo, **kwargs) -> Controller:
    return Controller(cluster_for(lab, **kwargs), Secrets({}))


async def collect(events: AsyncIterator[Event]) -> list[Event]:
    return [event async for event in events]


class FakeNode(NodeConnection):
    """A node of configs/lab.yaml that answers from tables: files by path, commands by their
    first word; `docker` is a Docker engine double."""

    def __init__(
        self, name: str, files: dict[str, str], commands: dict[str, CommandResult], docker
    ):
        super().__init__(load_config(LAB_CONFIG).cluster.node(name), docker, 0.0)
        self.files, self.commands = files, commands
        self.ran: list[Sequence[str]] = []

    async def run(
        self,
        argv: Sequence[str],
        *,
        timeout: float,
        hang_up: bool = False,
        output: Callable[[str], None] | None = None,
    ) -> CommandResult:
        self.ran.append(argv)
        result = self.commands.get(argv[0], CommandResult(127, "", f"{argv[0]}: not found"))
        if output is not None:  # as the drivers do: stdout handed on, the result keeps a tail
            output(result.stdout)
            return CommandResult(result.exit_status, result.stdout[-OUTPUT_TAIL:], result.stderr)
        return result

    async def read_file(self, path: str, *, timeout: float, limit: int = 32768) -> str:
        if path not in self.files:
            raise FileUnreadable(self.name, f"cannot read {path}", "check it")
        return self.files[path]

    async def read_bytes(self, path: str, *, timeout: float, offset: int, length: int):
        text = (await self.read_file(path, timeout=timeout)).encode()
        return FileBytes(text[offset : offset + length], len(text))

    async def api_base_url(self, port: int) -> str:
        return "http://api"

    async def stream(self, argv: Sequence[str], *, timeout: float):
        raise AssertionError("the double streams no command")
        yield ""

    async def aclose(self) -> None:
        return None


@dataclass
class BackgroundLaunch:
    """A launch running in a task: its events as they come, and the task to await."""

    events: list[Event]
    task: asyncio.Task[None]


@asynccontextmanager
async def serving_started(controller: Controller) -> AsyncIterator[BackgroundLaunch]:
    """`controller.up()` in the background, entered once `vllm serve` has started (the launch
    is live: its lease held, its containers up); cancelled on exit if still running."""
    started, events = asyncio.Event(), []

    async def run() -> None:
        async for event in controller.up():
            events.append(event)
            if isinstance(event, Progress) and "vllm serve started" in event.message:
                started.set()

    task = asyncio.create_task(run())
    try:
        await asyncio.wait_for(started.wait(), timeout=90)
        yield BackgroundLaunch(events, task)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
