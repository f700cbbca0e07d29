"""`/spark up` over what already runs, through Bolt's real client on the Slack stand-in and the real
controller on the demo's embedded cluster (emulated Docker engines, no root): the launch's own
preflight finds what runs and asks in the job's thread, so the command opens one connection per
node from the command to its end; Keep it, no answer and Cancel change nothing and leave the
serving watch running; only the requester, at operate level, answers; a container spark-bot did
not start is removed only by a yes to the question that named it."""

from __future__ import annotations

import asyncio
import contextvars
from collections import Counter
from collections.abc import AsyncGenerator, AsyncIterator
from contextlib import aclosing, asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import aiodocker
import pytest

import cluster.nodes.connect as connect
from bot.slack import SlackBot
from cluster.config import ClusterConfig, NodeConfig, Secrets
from cluster.controller import Controller
from cluster.events import Event
from cluster.serving.containers import LABEL_CLUSTER
from demo.cluster import EmbeddedCluster, embedded_cluster
from demo.machine import DEMO_IMAGE
from handlers.job_state import JobState
from handlers.messages import CANCEL_ACTION, KEEP_ACTION, REPLACE_ACTION
from handlers.settings import BotSettings
from testkit.slack_bot import (
    ALICE,
    BOB,
    CH,
    GREEN,
    attachment_color,
    attachment_text,
    block_text,
    header,
    settings,
    slack_bot,
)
from testkit.slack_standin import SlackStandIn

pytestmark = pytest.mark.timeout(120)

NEUTRAL, WARNING = "#8d8d8d", "#ecb22e"
_WATCHING: contextvars.ContextVar[bool] = contextvars.ContextVar("watching", default=False)


@dataclass
class Connections:
    """SSH connections (here: engine connections) opened, by node: the serving watch's apart."""

    command: Counter[str] = field(default_factory=Counter)
    watch: Counter[str] = field(default_factory=Counter)


class MarkedController(Controller):
    """The controller, its watch marking the connections it opens (its task's own context)."""

    def watch(self, **options: Any) -> AsyncGenerator[Event, None]:
        return self._marked(super().watch(**options))

    async def _marked(self, events: AsyncGenerator[Event, None]) -> AsyncGenerator[Event, None]:
        _WATCHING.set(True)
        async with aclosing(events):
            async for event in events:
                yield event


@pytest.fixture
def connections(monkeypatch: pytest.MonkeyPatch) -> Connections:
    counted = Connections()
    connect_one = connect._connect_one

    async def counting(node: NodeConfig, *args: Any, **kwargs: Any) -> Any:
        (counted.watch if _WATCHING.get() else counted.command)[node.name] += 1
        return await connect_one(node, *args, **kwargs)

    monkeypatch.setattr(connect, "_connect_one", counting)
    return counted


@asynccontextmanager
async def bot_on(
    slack: SlackStandIn, tmp_path, bot_settings: BotSettings | None = None
) -> AsyncIterator[tuple[SlackBot, EmbeddedCluster]]:
    async with (
        embedded_cluster(nodes=2) as cluster,
        slack_bot(
            slack,
            cluster.config,
            bot_settings or settings(tmp_path),
            controllers=lambda config: MarkedController(config, Secrets({})),
        ) as bot,
    ):
        await bot.dispatcher.jobs.reconciled.wait()  # the start-up's look at the nodes is done
        yield bot, cluster


async def leftover(config: ClusterConfig, *, ours: bool) -> str:
    """A container under the launch's name on the worker (spark-bot's for this cluster, or not):
    its ID."""
    labels = {LABEL_CLUSTER: config.name} if ours else {"owner": "someone"}
    async with aiodocker.Docker(url=f"unix://{config.nodes[1].docker_socket}") as docker:
        made = await docker.containers.create(
            {"Image": DEMO_IMAGE, "Cmd": ["true"], "Labels": labels}, name=config.container.name
        )
        return made.id


async def container_ids(config: ClusterConfig) -> dict[str, str | None]:
    """The ID of the container under the launch's name on each node (None: there is none)."""
    ids: dict[str, str | None] = {}
    for node in config.nodes:
        async with aiodocker.Docker(url=f"unix://{node.docker_socket}") as docker:
            try:
                ids[node.name] = (await docker.containers.get(config.container.name)).id
            except aiodocker.DockerError as error:
                assert error.status == 404, error
                ids[node.name] = None
    return ids


def launches(slack: SlackStandIn) -> list[dict]:
    return [m for m in slack.messages(CH) if header(m).startswith("🚀 Launch")]


async def up(slack: SlackStandIn, user: str = ALICE) -> str:
    """`/spark up` typed: the ts of its job's message, once posted."""
    before = len(launches(slack))
    await slack.send_slash_command(user, CH, "up")
    return await slack.wait_until(
        lambda: len(launches(slack)) > before and launches(slack)[before]["ts"], 20
    )


async def ended(slack: SlackStandIn, job: str, colour: str, timeout: float = 60) -> dict:
    await slack.wait_until(lambda: attachment_color(slack.message(CH, job)) == colour, timeout)
    message = slack.message(CH, job)
    assert message is not None
    return message


async def ready(slack: SlackStandIn) -> str:
    job = await up(slack)
    await ended(slack, job, GREEN)
    return job


def answers(message: dict) -> list[str]:
    """The action ids of a message's buttons."""
    return [
        e["action_id"]
        for b in message.get("blocks", [])
        if b["type"] == "actions"
        for e in b["elements"]
    ]


async def asked(slack: SlackStandIn, job: str) -> dict:
    """The question in the job's thread, once it is there (with its buttons, or already answered)."""
    return await slack.wait_until(
        lambda: next((r for r in slack.thread(CH, job) if header(r) == "Confirm"), None), 20
    )


async def answered(slack: SlackStandIn, question: dict, said: str) -> dict:
    """The question, once edited to say `said` (and without its buttons)."""

    def edited() -> dict | None:
        now = slack.message(CH, question["ts"])
        return now if now and said in attachment_text(now) and not answers(now) else None

    return await slack.wait_until(edited, 20)


async def asking_over_ours(
    slack: SlackStandIn, config: ClusterConfig
) -> tuple[dict[str, str | None], str, dict]:
    """A leftover of ours on the worker, then `/spark up`: the containers before, the job's
    message and its question."""
    await leftover(config, ours=True)
    before = await container_ids(config)
    job = await up(slack)
    return before, job, await asked(slack, job)


async def test_up_over_a_running_cluster_is_replaced_over_one_connection_per_node(
    slack, tmp_path, connections
):
    async with bot_on(slack, tmp_path) as (_bot, cluster):
        await ready(slack)
        connections.command.clear()
        job = await up(slack)
        question = await asked(slack, job)
        assert header(question) == "Confirm" and f"<@{ALICE}>" in block_text(question)
        assert f"`{cluster.config.name}` is already running (" in block_text(question)
        assert answers(question) == [REPLACE_ACTION, KEEP_ACTION]
        await slack.click_button(ALICE, CH, question["ts"], REPLACE_ACTION)
        await ended(slack, job, GREEN)
        await answered(slack, question, f"*Replace*, answered by <@{ALICE}>")
    assert connections.command == {node.name: 1 for node in cluster.config.nodes}, (
        "the launch's own connection only: no look at the nodes before it"
    )


async def test_keep_it_changes_nothing_and_the_watch_goes_on(slack, tmp_path, connections):
    async with bot_on(slack, tmp_path) as (bot, cluster):
        first = await ready(slack)
        dispatcher = bot.dispatcher
        watch = dispatcher.watch.task
        running = await container_ids(cluster.config)
        connections.command.clear()
        job = await up(slack)
        question = await asked(slack, job)
        await slack.click_button(ALICE, CH, question["ts"], KEEP_ACTION)
        kept = await ended(slack, job, NEUTRAL)
        await answered(slack, question, f"*Keep it*, answered by <@{ALICE}>: nothing was changed")
        assert attachment_text(kept) == (
            f"✋ Not replaced: <@{ALICE}> kept it; `{cluster.config.name}` was left as it was"
        )
        await asyncio.wait_for(dispatcher.idle(), 20)
        assert watch is not None and dispatcher.watch.task is watch and not watch.done()
        assert await dispatcher.store.locks() == [] and dispatcher.jobs.claim is None
        record = await dispatcher.store.job(2)
        assert record.state == JobState.UNCONFIRMED
        watched = await dispatcher.store.watch(cluster.config.name)
        assert watched is not None and watched.ts == first, "the first launch is still watched"
        assert await container_ids(cluster.config) == running, "nothing was changed"
    assert connections.command == {node.name: 1 for node in cluster.config.nodes}


async def test_no_answer_within_the_confirmations_time_ends_the_job_with_nothing_changed(
    slack, tmp_path
):
    bot_settings = settings(tmp_path)
    # (below the config's least, 10 s: this test does not wait that long)
    commands = bot_settings.commands.model_copy(update={"confirm_within": 1.0})
    bot_settings = bot_settings.model_copy(update={"commands": commands})
    async with bot_on(slack, tmp_path, bot_settings) as (bot, cluster):
        before, job, question = await asking_over_ours(slack, cluster.config)
        unanswered = await ended(slack, job, NEUTRAL)
        await answered(slack, question, "not answered: no answer in")
        record = await bot.dispatcher.store.job(1)
        assert await bot.dispatcher.store.locks() == []
        assert await container_ids(cluster.config) == before, "the cluster untouched"
    why = f"no answer in {1 / 60:g} min"
    assert (record.state, record.outcome) == (
        JobState.UNCONFIRMED,
        f"not replaced: {why}; nothing was changed",
    )
    assert attachment_text(unanswered) == f"✋ Not replaced: {why}; nothing was changed"


async def test_a_container_spark_bot_did_not_start_is_named_and_removed_only_by_that_yes(
    slack, tmp_path
):
    async with bot_on(slack, tmp_path) as (_bot, cluster):
        config = cluster.config
        worker, name = config.nodes[1].name, config.container.name
        foreign = await leftover(config, ours=False)
        job = await up(slack)
        question = await asked(slack, job)
        assert (
            f"\n<@{ALICE}> `{name}` on `{worker}` (created) was NOT started by spark-bot for "
            f"`{config.name}`. Replace removes it (`docker rm -f {name}`)" in block_text(question)
        )
        [replace] = [
            e
            for b in question["blocks"]
            if b["type"] == "actions"
            for e in b["elements"]
            if e["action_id"] == REPLACE_ACTION
        ]
        assert replace["text"]["text"] == "Remove and replace"
        assert "removed for good" in replace["confirm"]["text"]["text"]
        await slack.click_button(ALICE, CH, question["ts"], KEEP_ACTION)
        await ended(slack, job, NEUTRAL)
        assert (await container_ids(config))[worker] == foreign, "kept: still there"

        job = await up(slack)
        question = await asked(slack, job)
        await slack.click_button(ALICE, CH, question["ts"], REPLACE_ACTION)
        await ended(slack, job, GREEN)
        assert (await container_ids(config))[worker] not in {None, foreign}, (
            "removed, and the launch's own in its place"
        )


async def test_cancel_while_the_question_waits_ends_the_job_and_changes_nothing(slack, tmp_path):
    async with bot_on(slack, tmp_path) as (bot, cluster):
        before, job, question = await asking_over_ours(slack, cluster.config)
        await slack.click_button(ALICE, CH, job, CANCEL_ACTION)
        cancelled = await ended(slack, job, WARNING)
        assert attachment_text(cancelled).startswith(f"✋ Cancelled by <@{ALICE}>")
        await answered(slack, question, "not answered: the job was stopped")  # no button left
        await asyncio.wait_for(bot.dispatcher.idle(), 20)  # its end recorded
        assert (await bot.dispatcher.store.job(1)).state == JobState.CANCELLED
        assert await bot.dispatcher.store.locks() == []
        assert await container_ids(cluster.config) == before, "nothing was changed"


async def test_only_the_requester_at_operate_level_answers(slack, tmp_path):
    async with bot_on(slack, tmp_path) as (bot, cluster):
        before, job, question = await asking_over_ours(slack, cluster.config)
        await slack.click_button(BOB, CH, question["ts"], REPLACE_ACTION)
        refusal = await slack.wait_for_response()
        assert "Not allowed" in refusal.text and "operate" in str(refusal.body), refusal.body
        assert bot.dispatcher.jobs.claim is not None, "the job still waits for its answer"
        await slack.click_button(ALICE, CH, question["ts"], KEEP_ACTION)
        await ended(slack, job, NEUTRAL)
        await answered(slack, question, f"answered by <@{ALICE}>")
        assert await container_ids(cluster.config) == before
