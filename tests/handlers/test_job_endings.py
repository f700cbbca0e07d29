"""Every way a job ends, on in-memory doubles: the lock is released, the job's record says how it
ended, and its message's footer and colour follow from that state."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import pytest

from cluster.events import Progress
from cluster.operations.preflight import REPLACING
from handlers.command_context import Invocation
from handlers.dispatch import Action, Dispatcher
from handlers.job_state import JobState
from handlers.messages import CONFIRM_ACTION, KEEP_ACTION, REPLACE_ACTION, Message, Tone
from handlers.store import Store
from testkit.doubles import (
    ALICE,
    BOB,
    CH,
    CLUSTER,
    AskReplace,
    Hold,
    RecordingChat,
    ScriptedControllers,
    Step,
    failed,
    launch_passes,
    passed,
    ready,
    running_dispatcher,
    settings,
)
from tests.handlers.test_dispatch import db_rows

pytestmark = pytest.mark.timeout(10)


async def cancel(dispatcher: Dispatcher) -> None:
    reply = await dispatcher.command(Invocation(ALICE, CH, "cancel"))
    assert reply is not None and reply.title == "Cancelling job #1"


async def shut_down(dispatcher: Dispatcher) -> None:
    await dispatcher.jobs.stop()


@dataclass(frozen=True)
class Ending:
    script: Callable[
        [Hold], list[Step]
    ]  # what `up` plays; the Hold is where the job is stopped, if it is
    stop: Callable[[Dispatcher], Awaitable[None]] | None  # None: the job ends by itself
    state: JobState
    outcome: str
    footer: str  # how the job message's last footer begins
    colour: Tone
    last_reply: str  # the title of the last reply in the job's thread


ENDINGS = {
    "success": Ending(
        lambda hold: [*launch_passes(), ready()],
        None,
        JobState.SUCCEEDED,
        "succeeded",
        f"✔ Ready: `{CLUSTER.serve.api_model_name}`, sample at 401.0 tok/s in ",
        "success",
        "✅ Ready",
    ),
    "failure": Ending(
        lambda hold: [passed("ssh"), failed("weights")],
        None,
        JobState.FAILED,
        "failed: Weights loaded on every rank: NCCL failed to initialise",
        f"✘ Weights loaded on every rank on {CLUSTER.head.name} failed: NCCL failed to initialise",
        "failure",
        "✘ Weights loaded on every rank failed",
    ),
    "cancel": Ending(
        lambda hold: [passed("ssh"), hold, ready()],
        cancel,
        JobState.CANCELLED,
        f"cancelled by {ALICE}",
        f"✋ Cancelled by <@{ALICE}> after ",
        "warning",
        "✋ Cancelled",
    ),
    "shutdown": Ending(
        lambda hold: [passed("ssh"), hold, ready()],
        shut_down,
        JobState.SHUTDOWN,
        "cancelled: the bot is shutting down",
        "✋ Cancelled: the bot shut down; the controller removed what it started",
        "warning",
        "✋ Cancelled",
    ),
    "crash": Ending(
        lambda hold: [passed("ssh"), RuntimeError("disk on fire")],
        None,
        JobState.CRASHED,
        "error: disk on fire",
        "✘ Error: disk on fire",
        "failure",
        "✘ The job stopped on an error",
    ),
}


@pytest.mark.parametrize("ending", ENDINGS.values(), ids=ENDINGS.keys())
async def test_how_a_job_ends_is_recorded_and_shown(ending: Ending):
    hold = Hold()
    controllers = ScriptedControllers(up=ending.script(hold))
    async with running_dispatcher(controllers) as (dispatcher, chat):
        assert await dispatcher.command(Invocation(ALICE, CH, "up")) is None
        if ending.stop is not None:
            await hold.reached.wait()
            await ending.stop(dispatcher)
        await dispatcher.idle()

        assert await dispatcher.store.locks() == [], "the lock is released"
        record = await dispatcher.store.job(1)
        assert (record.state, record.outcome) == (ending.state, ending.outcome)
        [audit] = [a for a in await dispatcher.store.audit_trail() if a["command"] == "up"]
        assert audit["outcome"] == ending.outcome
    assert "up" in controllers.cleaned_up, "the controller's own cleanup ran"
    job_message = chat.parent()
    assert job_message.footer.startswith(ending.footer), job_message.footer
    assert job_message.tone == ending.colour
    assert job_message.buttons == [], "no Cancel button once it has ended"
    assert chat.thread()[-1].message.title == ending.last_reply


async def test_a_job_the_bot_died_during_is_closed_as_interrupted_at_the_next_start(tmp_path):
    bot_settings = settings(tmp_path)
    store = Store(bot_settings.store.path)
    await store.open()
    record = await store.create_job(CLUSTER.name, "up", ALICE, CH)
    assert await store.acquire(CLUSTER.name, record.id, "the previous run", 30) is None
    posted_before = "1700000000.000100"
    parent = Message(title="🚀 Launch", tone="running")
    await store.set_parent(record.id, posted_before, None, parent.model_dump_json())
    await store.close()

    async with running_dispatcher(ScriptedControllers(), bot_settings) as (dispatcher, chat):
        await dispatcher.idle()  # the reconciliation runs in a task
        assert await dispatcher.store.locks() == []
        assert (await dispatcher.store.job(record.id)).state == JobState.INTERRUPTED
    assert chat.latest[posted_before].footer.startswith("⚠ Interrupted")
    assert chat.latest[posted_before].tone == "warning"
    [note] = [p.message for p in chat.posts if p.thread == posted_before]
    assert note.title == "⚠ The bot restarted during this job"


async def test_a_second_job_is_refused_while_one_runs_and_told_who_holds_the_lock():
    hold = Hold()
    async with running_dispatcher(ScriptedControllers(up=[hold])) as (dispatcher, chat):
        await dispatcher.command(Invocation(ALICE, CH, "up"))
        await hold.reached.wait()
        await dispatcher.command(Invocation(ALICE, CH, "down"))
        await dispatcher.command(Invocation(BOB, CH, "verify"))
        await chat.wait_until(
            lambda: len(chat.private) == 2
        )  # not idle(): the first job still runs
        assert [(await dispatcher.store.job(n)).state for n in (2, 3)] == [
            JobState.REFUSED,
            JobState.REFUSED,
        ]
        hold.release.set()
        await dispatcher.idle()
    for _, refusal in chat.private:
        assert refusal.title == "Busy: one job at a time on this cluster"
        assert (
            f"Job #1 `/spark up` by <@{ALICE}> since" in refusal.text
            and "the job's thread" in refusal.text
        )


async def test_down_asks_first_and_runs_once_confirmed():
    controllers = ScriptedControllers(down=[])
    async with running_dispatcher(controllers) as (dispatcher, chat):
        await dispatcher.command(Invocation(ALICE, CH, "down"))
        await dispatcher.idle()
        [(_, question)] = chat.private
        assert (
            await dispatcher.store.job(1)
        ).state == JobState.UNCONFIRMED and "down" not in controllers.cleaned_up
        [button] = question.buttons
        reply = await dispatcher.action(Action(ALICE, CH, CONFIRM_ACTION, button.value))
        await dispatcher.idle()
        assert reply is not None and reply.title == "Confirmed: `/spark down`"
        assert (await dispatcher.store.job(2)).state == JobState.SUCCEEDED
    assert chat.parent().footer.startswith("✔ Removed 0 container(s)")


async def asked_in_thread(dispatcher: Dispatcher, chat: RecordingChat) -> Message:
    """`up`'s question in its thread, once it is there."""

    def asked() -> list[Message]:
        return [p.message for p in chat.posts if p.thread and p.message.buttons]

    await dispatcher.command(Invocation(ALICE, CH, "up"))
    await asyncio.wait_for(chat.wait_until(lambda: bool(asked())), 10)
    [question] = asked()
    return question


async def test_up_asks_in_its_thread_before_replacing_a_running_cluster_and_replaces_once_confirmed():
    controllers = ScriptedControllers(up=[passed("ssh"), AskReplace.running(), ready()])
    async with running_dispatcher(controllers) as (dispatcher, chat):
        question = await asked_in_thread(dispatcher, chat)
        assert "is already running" in question.text and question.mention == ALICE
        assert [(b.label, b.action) for b in question.buttons] == [
            ("Replace", REPLACE_ACTION),
            ("Keep it", KEEP_ACTION),
        ]
        await dispatcher.action(Action(ALICE, CH, REPLACE_ACTION, question.buttons[0].value))
        await dispatcher.idle()
        assert (await dispatcher.store.job(1)).state == JobState.SUCCEEDED
    assert controllers.cleaned_up.count("status") == 1, "only the start-up's look at the nodes"
    assert chat.parent().footer.startswith("✔ Ready")


async def test_up_whose_question_keeps_what_runs_ends_unconfirmed_and_changes_nothing():
    controllers = ScriptedControllers(up=[passed("ssh"), AskReplace.running(), ready()])
    async with running_dispatcher(controllers) as (dispatcher, chat):
        question = await asked_in_thread(dispatcher, chat)
        await dispatcher.action(Action(ALICE, CH, KEEP_ACTION, question.buttons[0].value))
        await dispatcher.idle()
        assert await dispatcher.store.locks() == [], "the lock is released"
        record = await dispatcher.store.job(1)
        outcome = f"not replaced: kept by {ALICE}; the cluster was left as it was"
        assert (record.state, record.outcome) == (JobState.UNCONFIRMED, outcome)
        [audit] = [a for a in await dispatcher.store.audit_trail() if a["command"] == "up"]
        assert audit["outcome"] == outcome
    job_message = chat.parent()
    assert job_message.footer == (
        f"✋ Not replaced: <@{ALICE}> kept it; `{CLUSTER.name}` was left as it was"
    )
    assert job_message.tone == "neutral" and job_message.buttons == []
    assert not [p for p in chat.posts if p.message.tone == "failure"], "no failure said"


async def test_a_yes_stops_the_watch_only_when_the_launch_removes_what_runs():
    """The question comes before the launch's other checks: a check failing after a yes leaves
    what runs running, and its watch with it; the watch stops at the word said right before the
    removal, while the launch waits for it."""
    removing = Progress(elapsed_s=1, phase=REPLACING, message="every check passed: removing")
    controllers = ScriptedControllers(up=[*launch_passes(), ready()], watch=[Hold()])
    async with running_dispatcher(controllers) as (dispatcher, chat):
        await dispatcher.command(Invocation(ALICE, CH, "up"))
        await dispatcher.idle()
        assert dispatcher.watch.watching, "the first launch serves, watched"

        async def replace(script: list[Step]) -> None:
            def asked() -> list[Message]:
                return [p.message for p in chat.posts if p.thread and p.message.buttons]

            before = len(asked())  # an answered question's first post keeps its buttons
            controllers.scripts["up"] = script
            await dispatcher.command(Invocation(ALICE, CH, "up"))
            await asyncio.wait_for(chat.wait_until(lambda: len(asked()) > before), 5)
            question = asked()[-1]
            await dispatcher.action(Action(ALICE, CH, REPLACE_ACTION, question.buttons[0].value))
            await dispatcher.idle()

        await replace([passed("ssh"), AskReplace.running(), failed("model")])
        assert (await dispatcher.store.job(2)).state == JobState.FAILED
        assert dispatcher.watch.watching, "what runs was not touched: still watched"
        assert "watch" not in controllers.cleaned_up

        await replace([AskReplace.running(), removing, *launch_passes(), ready()])
        assert (await dispatcher.store.job(3)).state == JobState.SUCCEEDED
        assert controllers.cleaned_up.count("watch") == 1, "the first launch's watch stopped"


async def test_a_job_that_cannot_start_frees_the_lock_and_tells_the_asker_what_to_try():
    async with running_dispatcher(ScriptedControllers(verify=[])) as (dispatcher, chat):

        async def locked(cluster: str) -> str | None:
            raise sqlite3.OperationalError("database is locked")

        dispatcher.store.launched_recipe = locked  # what `verify` reads before it runs
        await dispatcher.command(Invocation(ALICE, CH, "verify"))
        await dispatcher.idle()
        assert await dispatcher.store.locks() == []
        assert (await dispatcher.store.job(1)).state == JobState.FAILED
    [(_, problem)] = chat.private
    assert problem.title == "✘ `/spark verify` did not start" and problem.tone == "failure"
    assert "the cluster is free" in problem.text and "database is locked" in problem.text
    assert "*Try:*" in problem.text
    assert chat.posts == [], "nothing started, nothing posted in the channel"


async def test_a_cancel_reaches_a_job_still_preparing():
    reading = Hold()
    controllers = ScriptedControllers(verify=[])
    async with running_dispatcher(controllers) as (dispatcher, chat):
        await dispatcher.idle()  # the start-up reconciliation has asked the nodes

        async def held(cluster: str) -> str | None:
            reading.reached.set()
            await reading.release.wait()
            return None

        dispatcher.store.launched_recipe = held  # `verify` reads the launched setup first
        await dispatcher.command(Invocation(ALICE, CH, "verify"))
        await reading.reached.wait()
        await cancel(dispatcher)
        await dispatcher.idle()

        assert await dispatcher.store.locks() == [] and dispatcher.jobs.claim is None
        record = await dispatcher.store.job(1)
        assert (record.state, record.outcome) == (
            JobState.CANCELLED,
            f"cancelled by {ALICE} before it started",
        )
    assert "verify" not in [call.operation for call in controllers.calls], "nothing was started"
    assert chat.posts == []
    assert [message.title for user, message in chat.private if user == ALICE] == [
        "✋ `/spark verify` cancelled before it started"
    ]


async def test_monitoring_lost_and_resumed_are_told_in_the_thread_and_the_watch_goes_on():
    worker = CLUSTER.nodes[1].name
    news = [
        Progress(
            elapsed_s=1,
            phase="monitoring_lost",
            node=worker,
            message=f"monitoring lost on {worker} (Docker event stream ended), but the API still serves",
        ),
        Progress(
            elapsed_s=5,
            phase="monitoring_resumed",
            node=worker,
            message=f"monitoring resumed on {worker}",
        ),
    ]
    hold = Hold()
    controllers = ScriptedControllers(
        up=[*launch_passes(), ready()], watch=[*news, hold, failed("health")]
    )
    async with running_dispatcher(controllers) as (dispatcher, chat):
        await dispatcher.command(Invocation(ALICE, CH, "up"))
        await hold.reached.wait()
        await chat.wait_until(lambda: chat.thread()[-1].message.title == "👀 Monitoring resumed")
        lost, _resumed = [p.message for p in chat.thread()[-2:]]
        assert lost.title == "⚠ Monitoring lost, the API still serves" and lost.tone == "warning"
        assert worker in lost.text
        assert dispatcher.watch.task is not None, "no failure: still watching"
        hold.release.set()
        await chat.wait_until(lambda: chat.thread()[-1].message.title.startswith("✘"))


async def test_a_success_is_recorded_before_its_message_turns_green(tmp_path):
    """A bot killed right after the green update must find the job succeeded, not interrupted."""
    seen: list[tuple] = []

    class Chat(RecordingChat):
        async def update(self, posted, message):
            if message.tone == "success":
                seen.extend(
                    db_rows(tmp_path, "SELECT state FROM jobs UNION ALL SELECT 'lock' FROM locks")
                )
            await super().update(posted, message)

    async with running_dispatcher(
        ScriptedControllers(up=[*launch_passes(), ready()]), settings(tmp_path), chat=Chat()
    ) as (dispatcher, chat):
        await dispatcher.command(Invocation(ALICE, CH, "up"))
        await dispatcher.idle()
        assert chat.parent().tone == "success"
    assert seen == [("succeeded",)], "ended and the lock released when the message turned green"


async def test_status_says_watching_only_while_a_watch_follows_the_cluster():
    hold = Hold()
    controllers = ScriptedControllers(
        up=[*launch_passes(), ready()], watch=[hold, failed("health")]
    )

    async def status_text(dispatcher, chat) -> str:
        await dispatcher.command(Invocation(ALICE, CH, "status"))
        await chat.wait_until(
            lambda: chat.private and chat.private[-1][1].title.startswith("Status")
        )
        return chat.private.pop()[1].text

    async with running_dispatcher(controllers) as (dispatcher, chat):
        await dispatcher.command(Invocation(ALICE, CH, "up"))
        await hold.reached.wait()
        assert "Watching: yes" in await status_text(dispatcher, chat)
        hold.release.set()
        await chat.wait_until(lambda: chat.thread()[-1].message.title.startswith("✘"))
        assert dispatcher.watch.task is not None
        await asyncio.wait_for(dispatcher.watch.task, 10)  # its audit written, it ends
        assert "Watching" not in await status_text(dispatcher, chat), "the watch ended"
