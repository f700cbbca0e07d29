"""The fix a failure offers, through Bolt's real client on the Slack stand-in (the handler
doubles' controllers, no lab): the button under the failure runs `/spark sync-image` (an image
that differs) or `/spark sync-model` (a missing or partial model) for the requester only, with a
confirm dialog; the lab's end-to-end runs are tests/bot/in_lab/test_slack_sync.py."""

from __future__ import annotations

import pytest

from testkit.doubles import CLUSTER, ScriptedControllers, passed
from testkit.slack_bot import ALICE, BOB, CH, GREEN, attachment_color, header, settings, slack_bot
from tests.handlers.remedies import REMEDIES, Remedy

pytestmark = pytest.mark.timeout(30)


@pytest.mark.parametrize("remedy", REMEDIES, ids=lambda remedy: remedy.command)
async def test_the_failures_button_runs_the_command_for_the_requester_only(
    remedy: Remedy, slack, tmp_path
):
    controllers = ScriptedControllers(
        up=[passed("ssh"), passed("docker"), remedy.failure()],
        **{remedy.operation: remedy.passes()},
    )
    async with slack_bot(slack, CLUSTER, settings(tmp_path), controllers=controllers):
        await slack.send_slash_command(ALICE, CH, "up")
        offer = await slack.wait_for(
            lambda c: (
                c.method == "chat.postMessage" and header(c) == f"Fix it: /spark {remedy.command}"
            ),
            10,
        )
        [actions] = [b for b in offer.params["blocks"] if b["type"] == "actions"]
        [button] = actions["elements"]
        assert button["text"]["text"] == remedy.label and button["style"] == "danger"
        assert button["confirm"]["confirm"]["text"] == remedy.label
        assert remedy.command not in button["value"], "the button carries a nonce, not a command"

        await slack.click_button(BOB, CH, offer.result["ts"], "spark_confirm")
        refusal = await slack.wait_for_response()
        assert "no longer valid" in refusal.text and f"It was asked of <@{ALICE}>" in str(
            refusal.body
        )
        await slack.click_button(ALICE, CH, offer.result["ts"], "spark_confirm")
        synced = await slack.wait_for(
            lambda c: c.method == "chat.postMessage" and header(c).startswith(f"📦 {remedy.label}"),
            10,
        )
        await slack.wait_until(
            lambda: attachment_color(slack.message(CH, synced.result["ts"])) == GREEN, 10
        )
    assert [c.operation for c in controllers.calls if c.operation != "status"] == [
        "up",
        remedy.operation,
    ]
