"""A store that cannot write never stops or undoes cluster work: the job goes on with its state in
memory, its requester is told once, its message is finished and its lock released; the store
catches up at its next write that succeeds."""

from __future__ import annotations

import pytest

from handlers.command_context import Invocation
from handlers.dispatch import Dispatcher
from handlers.job_state import JobState
from testkit.doubles import (
    ALICE,
    CH,
    CLUSTER,
    FailingStore,
    Hold,
    RecordingChat,
    ScriptedControllers,
    failed,
    launch_passes,
    passed,
    ready,
    running_dispatcher,
    settings,
)

pytestmark = pytest.mark.timeout(20)

TOLD = "⚠ The bot could not record job #1"


def told(chat: RecordingChat) -> list[str]:
    return [
        message.text for user, message in chat.private if user == ALICE and message.title == TOLD
    ]


async def run_until(dispatcher: Dispatcher, hold: Hold, store: FailingStore) -> None:
    """`/spark up`, with every write failing from where the script holds."""
    assert await dispatcher.command(Invocation(ALICE, CH, "up")) is None
    await hold.reached.wait()
    store.failing = True
    hold.release.set()


@pytest.mark.parametrize("error", ["database or disk is full", "database is locked"])
async def test_a_store_failing_at_ready_keeps_the_cluster_and_finishes_the_job(tmp_path, error):
    hold = Hold()
    controllers = ScriptedControllers(up=[*launch_passes(), hold, ready()], verify=[])
    store = FailingStore(tmp_path / "spark-bot.db", error)
    async with running_dispatcher(controllers, settings(tmp_path), store=store) as (
        dispatcher,
        chat,
    ):
        await run_until(dispatcher, hold, store)
        await dispatcher.idle()

        assert controllers.stopped_early == [], "the launch was not cut short: its containers stay"
        assert "down" not in [call.operation for call in controllers.calls]
        job_message = chat.parent()
        assert job_message.footer.startswith(f"✔ Ready: `{CLUSTER.serve.api_model_name}`"), (
            job_message.footer
        )
        assert (job_message.tone, job_message.buttons) == ("success", [])
        assert dispatcher.jobs.claim is None, "the lock is released in memory"
        assert dispatcher.watch.task is not None, "the running cluster is watched"
        [text] = told(chat)
        assert f"{error}" in text and "The cluster work goes on" in text
        assert store.refused > 0

        # the store works again: the next job is not refused, and what was missed is recorded
        store.failing = False
        await dispatcher.command(Invocation(ALICE, CH, "verify"))
        await dispatcher.idle()
        assert (await store.job(2)).state == JobState.SUCCEEDED
        assert (await store.job(1)).state == JobState.SUCCEEDED
        assert await store.locks() == []
    assert len(told(chat)) == 1, "told once"


async def test_a_job_failing_while_the_store_fails_ends_its_message_and_frees_the_lock(tmp_path):
    hold = Hold()
    controllers = ScriptedControllers(up=[passed("ssh"), hold, failed("weights")])
    store = FailingStore(tmp_path / "spark-bot.db", "disk I/O error")
    async with running_dispatcher(controllers, settings(tmp_path), store=store) as (
        dispatcher,
        chat,
    ):
        await run_until(dispatcher, hold, store)
        await dispatcher.idle()

        job_message = chat.parent()
        assert job_message.footer.startswith("✘ Weights loaded on every rank"), job_message.footer
        assert (job_message.tone, job_message.buttons) == ("failure", [])
        assert chat.thread()[-1].message.title == "✘ Weights loaded on every rank failed"
        assert dispatcher.jobs.claim is None
        assert len(told(chat)) == 1


async def test_a_cancel_reaches_a_job_while_the_store_fails(tmp_path):
    hold, stop_here = Hold(), Hold()
    controllers = ScriptedControllers(
        up=[passed("ssh"), hold, passed("docker"), stop_here, ready()]
    )
    store = FailingStore(tmp_path / "spark-bot.db", "disk I/O error")
    async with running_dispatcher(controllers, settings(tmp_path), store=store) as (
        dispatcher,
        chat,
    ):
        await run_until(dispatcher, hold, store)
        await stop_here.reached.wait()
        reply = await dispatcher.command(Invocation(ALICE, CH, "cancel"))
        assert reply is not None and reply.title == "Cancelling job #1"
        await dispatcher.idle()

        job_message = chat.parent()
        assert job_message.footer.startswith(f"✋ Cancelled by <@{ALICE}>"), job_message.footer
        assert (job_message.tone, job_message.buttons) == ("warning", [])
        assert dispatcher.jobs.claim is None
        assert len(told(chat)) == 1
