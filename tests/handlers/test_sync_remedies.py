"""`/spark sync-image` and `/spark sync-model`, and the button the failure each fixes offers
(tests/handlers/remedies.py): asked first like any change to the cluster, the offer's button the
requester's once, the copy's progress on the job's message, the check's result at its end."""

from __future__ import annotations

import pytest

from handlers.command_context import Invocation
from handlers.dispatch import Action
from handlers.messages import CONFIRM_ACTION
from testkit.doubles import (
    ALICE,
    BOB,
    CH,
    Hold,
    ScriptedControllers,
    failed,
    passed,
    running_dispatcher,
    settings,
)
from tests.handlers.remedies import REMEDIES, Remedy

pytestmark = pytest.mark.timeout(30)
each_remedy = pytest.mark.parametrize("remedy", REMEDIES, ids=lambda remedy: remedy.command)


def operations(controllers: ScriptedControllers) -> list[str]:
    return [c.operation for c in controllers.calls if c.operation not in {"status", "watch"}]


async def click(dispatcher, value: str, user: str = ALICE):
    reply = await dispatcher.action(Action(user, CH, CONFIRM_ACTION, value))
    await dispatcher.idle()
    return reply


@each_remedy
async def test_the_command_asks_first_then_runs_with_its_progress_on_the_message(
    remedy: Remedy, tmp_path
):
    hold = Hold()
    controllers = ScriptedControllers(**{remedy.operation: remedy.passes(hold)})
    async with running_dispatcher(controllers, settings(tmp_path)) as (dispatcher, chat):
        await dispatcher.command(Invocation(ALICE, CH, remedy.command))
        await dispatcher.idle()
        question = chat.private[-1][1]
        assert question.title == "Confirm" and operations(controllers) == []
        assert remedy.question_says in question.text
        [button] = question.buttons
        await dispatcher.action(Action(ALICE, CH, CONFIRM_ACTION, button.value))
        await hold.reached.wait()
        await chat.wait_until(lambda: remedy.progress_says in (chat.parent().footer or ""))
        hold.release.set()
        await dispatcher.idle()
        parent = chat.parent()
    assert operations(controllers) == [remedy.operation]
    assert parent.title == remedy.job_title
    assert [item.state for item in parent.checklist] == ["done"] * len(remedy.checkpoints)
    assert parent.footer.startswith(remedy.done_footer)


@each_remedy
async def test_the_failure_offers_the_command_to_the_requester_once(remedy: Remedy, tmp_path):
    controllers = ScriptedControllers(up=[passed("ssh"), passed("docker"), remedy.failure()])
    controllers.scripts[remedy.operation] = remedy.passes()
    async with running_dispatcher(controllers, settings(tmp_path)) as (dispatcher, chat):
        await dispatcher.command(Invocation(ALICE, CH, "up"))
        await dispatcher.idle()
        thread = [sent.message for sent in chat.thread()]
        failure, offer = thread[-2], thread[-1]
        assert failure.title == remedy.failure_title
        for said in remedy.failure_says:
            assert said in failure.text
        assert offer.title == f"Fix it: /spark {remedy.command}"
        assert f"<@{ALICE}>" in offer.text and "the button is yours for 600 s" in offer.text
        [button] = offer.buttons
        assert button.label == remedy.label and button.confirm is not None
        refused = await click(dispatcher, button.value, user=BOB)
        assert refused.title == "This confirmation is no longer valid"
        assert operations(controllers) == ["up"]
        confirmed = await click(dispatcher, button.value)
        again = await click(dispatcher, button.value)
        assert await dispatcher.store.locks() == []
    assert confirmed.title == f"Confirmed: `/spark {remedy.command}`"
    assert again.title == "This confirmation is no longer valid"
    assert operations(controllers) == ["up", remedy.operation]
    assert chat.parent(1).footer.startswith(remedy.done_footer.removesuffix(" in"))


async def test_a_failure_no_command_fixes_offers_nothing(tmp_path):
    controllers = ScriptedControllers(up=[passed("ssh"), failed("weights")])
    async with running_dispatcher(controllers, settings(tmp_path)) as (dispatcher, chat):
        await dispatcher.command(Invocation(ALICE, CH, "up"))
        await dispatcher.idle()
    assert not [sent for sent in chat.thread() if sent.message.buttons]
