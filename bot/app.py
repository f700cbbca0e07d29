"""Wiring: config + environment -> a dispatcher on Slack or on the console. Tokens are read here."""

from __future__ import annotations

import asyncio
import gc
import signal
import sys
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import TextIO

from bot.config import SparkBotConfig
from bot.console import Console, ConsoleChat, stdin_lines
from bot.slack import SlackBot, SlackChat, make_client
from cluster.config import resolve_secrets
from cluster.controller import Controller
from cluster.errors import ConfigError
from handlers.access import Access
from handlers.dispatch import Dispatcher
from handlers.jobs import ControllerFactory
from handlers.store import Store


def controller_factory(
    config: SparkBotConfig, environ: Mapping[str, str], who: str
) -> ControllerFactory:
    secrets = resolve_secrets(config.cluster, dict(environ))
    return lambda cluster: Controller(cluster, secrets, who=who)


def settle_heap() -> None:
    """Move what the running bot was built from (imports, Bolt, the dispatcher: ~140k objects)
    out of the garbage collector's way. They live as long as the process, yet every full
    collection scanned them: one took 100 ms of CPU (~300 ms of loop lag on a busy machine)
    while a log flood made garbage. Frozen, a collection scans only what came after."""
    gc.collect()
    gc.freeze()


def slack_bot(
    config: SparkBotConfig,
    environ: Mapping[str, str],
    *,
    http: bool | None = None,
    port: int | None = None,
) -> SlackBot:
    http = config.slack.mode == "http" if http is None else http
    needed = ["SLACK_BOT_TOKEN", "SLACK_SIGNING_SECRET" if http else "SLACK_APP_TOKEN"]
    missing = [name for name in needed if not environ.get(name)]
    if missing:
        raise ConfigError(f"set {', '.join(missing)} in the environment (see .env.example)")
    client = make_client(environ["SLACK_BOT_TOKEN"], config.slack.api_url)
    dispatcher = Dispatcher(
        config.cluster,
        config.bot,
        SlackChat(client),
        Store(config.store.path),
        controller_factory(config, environ, "the Slack bot"),
    )
    return SlackBot(
        dispatcher,
        client,
        app_token=environ.get("SLACK_APP_TOKEN"),
        signing_secret=environ.get("SLACK_SIGNING_SECRET"),
        http=http,
        host=config.slack.host,
        port=config.slack.port if port is None else port,
    )


async def run_slack(
    config: SparkBotConfig,
    environ: Mapping[str, str],
    *,
    http: bool | None = None,
    port: int | None = None,
) -> int:
    bot = slack_bot(config, environ, http=http, port=port)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    await bot.start()
    settle_heap()
    try:
        await stop.wait()
    finally:
        await bot.stop()
    return 0


async def serve_console(
    config: SparkBotConfig,
    chat: ConsoleChat,
    controllers: ControllerFactory,
    lines: AsyncIterator[str],
    *,
    assume_yes: bool,
) -> None:
    """The console's wiring, `spark-bot console`'s and the demo's: the handlers on a terminal
    chat, with the console's access, until `lines` end and their work is done."""
    dispatcher = Dispatcher(
        config.cluster,
        config.bot,
        chat,
        Store(config.store.path),
        controllers,
        access=Access.for_console(),
    )
    await dispatcher.start()
    settle_heap()
    await Console(dispatcher, chat, assume_yes=assume_yes).run(lines)


async def run_console(
    config: SparkBotConfig,
    environ: Mapping[str, str],
    *,
    assume_yes: bool = False,
    lines: AsyncIterator[str] | None = None,
    out: TextIO = sys.stdout,
    files_dir: Path | None = None,
) -> int:
    await serve_console(
        config,
        ConsoleChat(out, files_dir or config.store.path.parent / "console-files"),
        controller_factory(config, environ, "`spark-bot console`"),
        lines or stdin_lines(),
        assume_yes=assume_yes,
    )
    return 0
