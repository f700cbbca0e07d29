"""A confirmation is bound to the question actually asked: its button carries a nonce, and a click
runs the command stored with it (or, for a question a job asks in its thread, answers it), once,
for the user asked, in that channel, before it expires. Anything else (an old button, a second
click, a crafted value) runs nothing and takes no lock."""

from __future__ import annotations

import asyncio

import pytest

from handlers.command_context import Invocation
from handlers.dispatch import Action
from handlers.job_state import JobState
from handlers.messages import CONFIRM_ACTION, KEEP_ACTION, REPLACE_ACTION, Message
from handlers.store import Store
from testkit.doubles import (
    ALICE,
    BOB,
    CH,
    CLUSTER,
    AskReplace,
    Clock,
    ScriptedControllers,
    Sent,
    launch_passes,
    ready,
    running_dispatcher,
    settings,
)

pytestmark = pytest.mark.timeout(30)


def operations(controllers: ScriptedControllers) -> list[str]:
    return [
        call.operation for call in controllers.calls if call.operation not in {"status", "watch"}
    ]


async def ask(dispatcher, chat, text: str, user: str = ALICE) -> Message:
    await dispatcher.command(Invocation(user, CH, text))
    await dispatcher.idle()
    question = chat.private[-1][1]
    assert question.title == "Confirm", question
    return question


async def click(
    dispatcher, value: str, user: str = ALICE, channel: str = CH, action: str = CONFIRM_ACTION
) -> Message | None:
    reply = await dispatcher.action(Action(user, channel, action, value))
    await dispatcher.idle()
    return reply


async def test_the_button_carries_a_nonce_and_runs_the_asked_command_once(tmp_path):
    controllers = ScriptedControllers(down=[])
    async with running_dispatcher(controllers, settings(tmp_path)) as (dispatcher, chat):
        [button] = (await ask(dispatcher, chat, "down")).buttons
        assert "down" not in button.value and len(button.value) >= 32, "the value names no command"
        first = await click(dispatcher, button.value)
        second = await click(dispatcher, button.value)
        assert await dispatcher.store.locks() == []
    assert first is not None and first.title == "Confirmed: `/spark down`"
    assert second is not None and second.title == "This confirmation is no longer valid"
    assert f"already answered by <@{ALICE}>" in second.text and "Nothing was done" in second.text
    assert operations(controllers) == ["down"], "the second click ran nothing"


async def ask_in_thread(dispatcher, chat, text: str, user: str = ALICE) -> Sent:
    """`text` run as a job that asks in its thread: the question, once it is there."""
    await dispatcher.command(Invocation(user, CH, text))
    await asyncio.wait_for(chat.wait_until(lambda: bool(questions(chat))), 10)
    [question] = questions(chat)
    return question


def questions(chat) -> list[Sent]:
    return [p for p in chat.posts if any(b.action == REPLACE_ACTION for b in p.message.buttons)]


async def test_an_old_replace_button_has_expired(tmp_path):
    clock = Clock()
    bot_settings = settings(tmp_path)
    controllers = ScriptedControllers(up=[AskReplace.running(), *launch_passes(), ready()])
    async with running_dispatcher(
        controllers, bot_settings, store=Store(bot_settings.store.path, clock=clock)
    ) as (dispatcher, chat):
        question = await ask_in_thread(dispatcher, chat, "up max_model_len=8192")
        clock.advance(bot_settings.commands.confirm_within + 1)
        reply = await dispatcher.action(
            Action(ALICE, CH, REPLACE_ACTION, question.message.buttons[0].value)
        )
        assert reply is not None and reply.title == "This confirmation is no longer valid"
        assert "It expired at 09:10:00 UTC, 600 s after it was asked." in reply.text
        await dispatcher.command(Invocation(ALICE, CH, "cancel"))  # the job still waits
        await dispatcher.idle()
        assert await dispatcher.store.locks() == []
        trail = await dispatcher.store.audit_trail()
    assert controllers.stopped_early == ["up"], "the launch never went past its question"
    assert ("confirm up max_model_len=8192", "refused") in [
        (a["command"], a["outcome"].split(":")[0]) for a in trail
    ]


async def test_a_question_can_be_answered_within_its_time(tmp_path):
    clock = Clock()
    bot_settings = settings(tmp_path)
    controllers = ScriptedControllers(up=[AskReplace.running(), *launch_passes(), ready()])
    async with running_dispatcher(
        controllers, bot_settings, store=Store(bot_settings.store.path, clock=clock)
    ) as (dispatcher, chat):
        question = await ask_in_thread(dispatcher, chat, "up max_model_len=8192")
        clock.advance(bot_settings.commands.confirm_within - 1)
        reply = await click(dispatcher, question.message.buttons[0].value, action=REPLACE_ACTION)
        assert (await dispatcher.store.job(1)).state == JobState.SUCCEEDED
    assert reply is None, "answered in the thread: the question says who answered"
    assert chat.latest[question.ts].footer == f"→ *Replace*, answered by <@{ALICE}>"
    [up] = [call for call in controllers.calls if call.operation == "up"]
    assert up.config.serve.max_model_len == 8192, "exactly the command asked"


@pytest.mark.parametrize(
    "crafted", ["help", "status", "verify", "logs head 10", "up", "down", "cancel", ""]
)
async def test_a_crafted_confirm_runs_nothing_and_takes_no_lock(crafted):
    controllers = ScriptedControllers(up=[ready()], down=[], verify=[])
    async with running_dispatcher(controllers) as (dispatcher, chat):
        await dispatcher.idle()
        reply = await click(dispatcher, crafted)
        assert reply is not None and reply.title == "This confirmation is no longer valid"
        assert "does not belong to a question this bot asked" in reply.text
        assert await dispatcher.store.locks() == [] and dispatcher.jobs.claim is None
        trail = await dispatcher.store.audit_trail()
    assert operations(controllers) == [] and chat.posts == [] and chat.private == []
    assert [(a["command"], a["outcome"].split(":")[0]) for a in trail] == [
        ("confirm (unknown)", "refused")
    ]


async def test_only_the_user_asked_can_answer_and_only_where_it_was_asked():
    controllers = ScriptedControllers(down=[])
    async with running_dispatcher(controllers) as (dispatcher, chat):
        [button] = (await ask(dispatcher, chat, "down")).buttons
        by_bob = await click(dispatcher, button.value, user=BOB)
        elsewhere = await click(dispatcher, button.value, channel="C0GENERAL")
        assert operations(controllers) == []
        by_alice = await click(dispatcher, button.value)  # neither refusal used the question up
    for refusal in (by_bob, elsewhere):
        assert refusal is not None and refusal.title == "This confirmation is no longer valid"
        assert f"asked of <@{ALICE}> in <#{CH}>: only they can answer it there" in refusal.text
    assert by_alice is not None and by_alice.title == "Confirmed: `/spark down`"
    assert operations(controllers) == ["down"]


async def test_a_question_asked_about_another_cluster_is_refused(tmp_path):
    bot_settings = settings(tmp_path)
    async with running_dispatcher(ScriptedControllers(), bot_settings) as (dispatcher, chat):
        [button] = (await ask(dispatcher, chat, "down")).buttons
    other_cluster = CLUSTER.model_copy(update={"name": "other"})
    controllers = ScriptedControllers(down=[])
    async with running_dispatcher(controllers, bot_settings, cluster=other_cluster) as (
        dispatcher,
        _,
    ):
        reply = await click(dispatcher, button.value)
        assert await dispatcher.store.locks() == []
    assert reply is not None and f"asked about cluster `{CLUSTER.name}`, not `other`" in reply.text
    assert operations(controllers) == []


async def test_a_stored_question_for_a_command_that_never_asks_is_refused():
    controllers = ScriptedControllers(verify=[])
    async with running_dispatcher(controllers) as (dispatcher, _chat):
        await dispatcher.idle()
        nonce = await dispatcher.store.ask(CLUSTER.name, ALICE, CH, "verify", "Verify?", (), 600)
        reply = await click(dispatcher, nonce)
        assert await dispatcher.store.locks() == [] and dispatcher.jobs.claim is None
    assert reply is not None and "`/spark verify` is not a command that asks first" in reply.text
    assert operations(controllers) == []


async def test_replace_names_a_container_spark_bot_did_not_start_and_a_yes_is_the_consent():
    worker = CLUSTER.nodes[1].name
    controllers = ScriptedControllers(
        up=[AskReplace.running(owners={worker: None}), *launch_passes(), ready()]
    )
    async with running_dispatcher(controllers) as (dispatcher, chat):
        question = (await ask_in_thread(dispatcher, chat, "up")).message
        await click(dispatcher, question.buttons[0].value, action=REPLACE_ACTION)
        assert (await dispatcher.store.job(1)).state == JobState.SUCCEEDED
        asked, _ = await dispatcher.store.answer(question.buttons[0].value, CLUSTER.name, ALICE, CH)
    name = CLUSTER.container.name
    assert question.text.startswith(
        f"<@{ALICE}> `{name}` on `{worker}` (running) was NOT started by spark-bot for "
        f"`{CLUSTER.name}`. Replace removes it (`docker rm -f {name}`)"
    )
    assert question.buttons[0].label == "Remove and replace"
    assert asked is not None and (asked.replace_foreign, asked.used_by) == ((worker,), ALICE), (
        "the yes consents to the node the question named"
    )


async def test_a_question_in_the_thread_is_answered_once_and_then_shows_who_answered_what():
    controllers = ScriptedControllers(up=[AskReplace.running(), *launch_passes(), ready()])
    async with running_dispatcher(controllers) as (dispatcher, chat):
        question = await ask_in_thread(dispatcher, chat, "up")
        nonce = question.message.buttons[0].value
        assert [b.value for b in question.message.buttons] == [nonce, nonce]
        first = await click(dispatcher, nonce, action=REPLACE_ACTION)
        second = await click(dispatcher, nonce, action=KEEP_ACTION)
        assert (await dispatcher.store.job(1)).state == JobState.SUCCEEDED
    assert first is None
    assert second is not None and second.title == "This confirmation is no longer valid"
    assert f"already answered by <@{ALICE}>" in second.text and "Nothing was done" in second.text
    answered = chat.latest[question.ts]
    assert answered.buttons == [] and answered.footer == f"→ *Replace*, answered by <@{ALICE}>"
