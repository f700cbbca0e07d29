"""A spark-bot on the Slack stand-in, driving the lab cluster (no mock of our own modules)."""

from __future__ import annotations

import asyncio
import re
from contextlib import asynccontextmanager

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from bot.slack import SlackBot, SlackChat, make_client
from cluster.config import ClusterConfig, Secrets
from cluster.controller import Controller
from cluster.events import StatusReport
from handlers.dispatch import Dispatcher
from handlers.jobs import ControllerFactory
from handlers.settings import BotSettings
from handlers.store import Store
from testkit.doubles import ALICE, BOB, CH, settings  # noqa: F401 - the bot tests' users, channel, settings
from testkit.lab_cluster import collect
from testkit.slack_standin import IM, SlackStandIn

RED, GREEN = "#e01e5a", "#2eb67d"


@asynccontextmanager
async def slack_bot(
    slack: SlackStandIn,
    cluster: ClusterConfig,
    bot_settings: BotSettings,
    *,
    http: bool = False,
    controllers: ControllerFactory | None = None,
):
    """The bot on the stand-in; on the real controller unless `controllers` (the handler doubles')."""
    client = make_client(slack.bot_token, slack.api_url)
    dispatcher = Dispatcher(
        cluster,
        bot_settings,
        SlackChat(client),
        Store(bot_settings.store.path),
        controllers or (lambda config: Controller(config, Secrets({}))),
    )
    bot = SlackBot(
        dispatcher,
        client,
        app_token=slack.app_token,
        signing_secret=slack.signing_secret,
        http=http,
        host="127.0.0.1",
        port=0,
    )
    await bot.start()
    try:
        yield bot
        await asyncio.wait_for(
            dispatcher.idle(), 60
        )  # every job ends on its own before the bot stops
    finally:
        await bot.stop()


async def down(cluster: ClusterConfig) -> None:
    await collect(Controller(cluster, Secrets({})).down())


async def containers_present(cluster: ClusterConfig) -> list[str]:
    [report] = await collect(Controller(cluster, Secrets({})).status())
    assert isinstance(report, StatusReport), report
    return [c.node for c in report.containers if c.present]


def header(call_or_message) -> str:
    blocks = (
        call_or_message.params["blocks"]
        if hasattr(call_or_message, "params")
        else call_or_message["blocks"]
    )
    return blocks[0]["text"]["text"]


def checkpoint_header(call_or_message) -> str:
    """A checkpoint reply's header without the node that passed it: "✔ {title}"."""
    return re.sub(r" \([\w.-]+\)$", "", header(call_or_message))


def block_text(call_or_message) -> str:
    blocks = (
        call_or_message.params["blocks"]
        if hasattr(call_or_message, "params")
        else call_or_message["blocks"]
    )
    return (
        "\n".join(b["text"]["text"] for b in blocks if b.get("type") in {"section", "header"})
        + "\n"
        + "\n".join(
            e.get("text", "") for b in blocks if b.get("type") == "context" for e in b["elements"]
        )
    )


def private_answers(slack: SlackStandIn, user: str) -> list[dict]:
    """What `user` was answered privately, in order, however it went: through the command's or
    the click's response_url, chat.postEphemeral, or a message in their DM with the bot."""
    answers = slack.ephemerals(user)
    direct = [
        c.id
        for c in slack.conversations.values()
        if c.kind == IM and c.members == {slack.bot_user_id, user}
    ]
    for dm in direct:
        answers += [dict(m, source="direct message") for m in slack.messages(dm)]
    return answers


async def private_answer(
    slack: SlackStandIn, user: str, title: str | None = None, *, after: int = 0, timeout=20.0
) -> dict:
    """The first private answer to `user` beyond the first `after` whose header is `title` (any
    when None), once it has come: a dict with its `text` and `blocks` (`header()` reads it)."""

    def find() -> dict | None:
        answers = private_answers(slack, user)[after:]
        return next((a for a in answers if title is None or header(a) == title), None)

    return await slack.wait_until(find, timeout)


def attachment_color(message) -> str | None:
    attachments = message.get("attachments") or []
    return attachments[0]["color"] if attachments else None


def attachment_text(message) -> str:
    attachments = message.get("attachments") or []
    return attachments[0].get("text", "") if attachments else ""


Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


async def scrape(bot) -> Samples:
    """The bot's /metrics over HTTP, read by prometheus_client's own parser."""
    async with (
        aiohttp.ClientSession() as session,
        session.get(f"http://127.0.0.1:{bot.port}/metrics") as response,
    ):
        assert response.status == 200
        assert response.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        text = await response.text()
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)
