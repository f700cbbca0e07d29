"""`spark-bot demo`: the console adapter (the same handlers as Slack) on an embedded cluster.

Commands come from `--run` (each in turn) or standard input (typed at a prompt, or piped). The
exit status is the last command's: 1 when it posted a failure, else 0.
"""

from __future__ import annotations

import asyncio
import signal
import sys
from collections.abc import AsyncGenerator, AsyncIterator, Collection, Sequence
from pathlib import Path
from typing import TextIO

from bot.app import serve_console
from bot.config import SparkBotConfig
from bot.console import ConsoleChat, stdin_lines
from cluster.config import Secrets
from cluster.controller import Controller
from cluster.events import Event
from cluster.operations.preflight import ConfirmReplace
from demo.cluster import PROFILE, SAMPLE_TOKENS, TIME_SCALE, EmbeddedCluster, embedded_cluster
from handlers.chat import Posted
from handlers.messages import Message
from handlers.settings import StoreConfig
from lab.emulator.profiles import PROFILES


class DemoChat(ConsoleChat):
    """The console's chat, remembering whether the current command posted a failure."""

    failed = False

    async def post(
        self, channel: str, message: Message, *, thread: str | None = None, broadcast: bool = False
    ) -> Posted:
        self.failed |= message.tone == "failure"
        return await super().post(channel, message, thread=thread, broadcast=broadcast)

    async def update(self, posted: Posted, message: Message) -> None:
        self.failed |= message.tone == "failure"
        await super().update(posted, message)

    async def reply_private(
        self, channel: str, user: str, message: Message, *, reply_to: str | None = None
    ) -> None:
        self.failed |= message.tone == "failure"
        await super().reply_private(channel, user, message, reply_to=reply_to)


class DemoController(Controller):
    """The controller, its launch ending in a shorter sample completion."""

    def up(
        self,
        *,
        replace: bool = False,
        replace_foreign: Collection[str] = (),
        sample_max_tokens: int = SAMPLE_TOKENS,
        take_over: bool = False,
        confirm_replace: ConfirmReplace | None = None,
    ) -> AsyncGenerator[Event, None]:
        return super().up(
            replace=replace,
            replace_foreign=replace_foreign,
            sample_max_tokens=sample_max_tokens,
            take_over=take_over,
            confirm_replace=confirm_replace,
        )


def banner(cluster: EmbeddedCluster, fault: str | None) -> str:
    config = cluster.config
    profile = PROFILES[PROFILE]
    nodes = ", ".join(f"{n.name} ({n.fabric_ip}, engine {n.docker_socket})" for n in config.nodes)
    lines = [
        f"spark-bot demo: {len(config.nodes)} emulated Sparks on this machine: {nodes}",
        f"  emulated vLLM {config.serve.model} as {config.serve.api_model_name}, "
        f"TP={config.serve.tensor_parallel_size} over Ray, API on port {config.serve.port}",
        f"  every figure is emulated: the profile {PROFILE} paces tokens as a DGX Spark pair "
        f"does (~{profile['decode_tok_s']:g} tok/s single stream, TTFT {profile['ttft_s']:g} s); "
        f"startup runs at {float(TIME_SCALE):.1%} of its real length",
    ]
    if fault:
        lines.append(f"  injected fault: {fault} (the emulator's SPARK_EMU_FAULT)")
    return "\n".join(lines)


async def _listed(commands: Sequence[str], out: TextIO) -> AsyncIterator[str]:
    for text in commands:
        print(f"\n> {text}", file=out, flush=True)
        yield text


async def _stdin(out: TextIO, interactive: bool) -> AsyncIterator[str]:
    """Standard input's lines: after a prompt when typed, echoed when piped."""
    lines = stdin_lines()
    try:
        while True:
            if interactive:
                print("spark> ", end="", file=out, flush=True)
            try:
                text = await anext(lines)
            except StopAsyncIteration:
                return
            if not interactive:
                print(f"\n> {text}", file=out, flush=True)
            yield text
    finally:
        await lines.aclose()


async def _tracking(lines: AsyncIterator[str], chat: DemoChat) -> AsyncIterator[str]:
    """Each new command line starts a new exit status (the console reads one only when the
    previous command's work is done)."""
    async for line in lines:
        if line.strip() and line.strip().lower() not in {"y", "yes", "n", "no"}:
            chat.failed = False
        yield line


async def run_demo(
    commands: Sequence[str],
    *,
    fault: str | None = None,
    out: TextIO = sys.stdout,
    workdir: Path | None = None,
) -> int:
    interactive = not commands and sys.stdin.isatty()
    async with embedded_cluster(nodes=2, fault=fault, workdir=workdir) as cluster:
        print(banner(cluster, fault), file=out, flush=True)
        config = SparkBotConfig(
            cluster=cluster.config, store=StoreConfig(path=cluster.workdir / "spark-bot.db")
        )
        chat = DemoChat(out, cluster.workdir / "files")
        lines = _listed(commands, out) if commands else _stdin(out, interactive)
        await serve_console(
            config,
            chat,
            lambda cluster: DemoController(cluster, Secrets({})),
            _tracking(lines, chat),
            assume_yes=not interactive,
        )
        return 1 if chat.failed else 0


def main(commands: Sequence[str], fault: str | None) -> int:
    """Run the demo; SIGTERM and Ctrl-C both cancel it, so the embedded cluster is cleaned up."""

    async def guarded() -> int:
        task = asyncio.current_task()
        assert task is not None
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, task.cancel)
        return await run_demo(commands, fault=fault)

    try:
        return asyncio.run(guarded())
    except (KeyboardInterrupt, asyncio.CancelledError):
        print("\nspark-bot demo: stopped; the embedded cluster is cleaned up.", file=sys.stderr)
        return 130
