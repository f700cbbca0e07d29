"""The fix a failure offers, through Bolt's real client on the Slack stand-in (the handler
doubles' controllers, no lab): the button under the failure runs `/spark sync-image` for the
requester, with a confirm dialog (and `/spark sync-model` for a missing or partial model); the
lab's end-to-end run is tests/bot/test_slack_image_sync.py."""

from __future__ import annotations

import pytest

from tests.bot.helpers import ALICE, BOB, CH, GREEN, attachment_color, header, settings, slack_bot
from tests.handlers.doubles import CLUSTER, ScriptedControllers, passed
from tests.handlers.test_sync_image import image_differs, sync_passes
from tests.handlers.test_sync_model import model_incomplete
from tests.handlers.test_sync_model import sync_passes as sync_model_passes

pytestmark = pytest.mark.timeout(30)


async def test_the_failures_button_runs_sync_image_for_the_requester_only(slack, tmp_path):
    controllers = ScriptedControllers(
        up=[passed("ssh"), passed("docker"), image_differs()], sync_image=sync_passes()
    )
    async with slack_bot(slack, CLUSTER, settings(tmp_path), controllers=controllers):
        await slack.send_slash_command(ALICE, CH, "up")
        offer = await slack.wait_for(
            lambda c: c.method == "chat.postMessage" and header(c) == "Fix it: /spark sync-image",
            10,
        )
        [actions] = [b for b in offer.params["blocks"] if b["type"] == "actions"]
        [button] = actions["elements"]
        assert button["text"]["text"] == "Sync image" and button["style"] == "danger"
        assert button["confirm"]["confirm"]["text"] == "Sync image"
        assert "sync-image" not in button["value"], "the button carries a nonce, not a command"

        await slack.click_button(BOB, CH, offer.result["ts"], "spark_confirm")
        refusal = await slack.wait_for_response()
        assert "no longer valid" in refusal.text and f"It was asked of <@{ALICE}>" in str(
            refusal.body
        )
        await slack.click_button(ALICE, CH, offer.result["ts"], "spark_confirm")
        synced = await slack.wait_for(
            lambda c: c.method == "chat.postMessage" and header(c).startswith("📦 Sync image"),
            10,
        )
        await slack.wait_until(
            lambda: attachment_color(slack.message(CH, synced.result["ts"])) == GREEN, 10
        )
    assert [c.operation for c in controllers.calls if c.operation != "status"] == [
        "up",
        "sync_image",
    ]


async def test_the_partial_models_button_runs_sync_model_for_the_requester(slack, tmp_path):
    controllers = ScriptedControllers(
        up=[passed("ssh"), passed("docker"), model_incomplete()], sync_model=sync_model_passes()
    )
    async with slack_bot(slack, CLUSTER, settings(tmp_path), controllers=controllers):
        await slack.send_slash_command(ALICE, CH, "up")
        offer = await slack.wait_for(
            lambda c: c.method == "chat.postMessage" and header(c) == "Fix it: /spark sync-model",
            10,
        )
        [actions] = [b for b in offer.params["blocks"] if b["type"] == "actions"]
        [button] = actions["elements"]
        assert button["text"]["text"] == "Sync model" and button["confirm"] is not None
        assert "sync-model" not in button["value"], "the button carries a nonce, not a command"
        await slack.click_button(ALICE, CH, offer.result["ts"], "spark_confirm")
        synced = await slack.wait_for(
            lambda c: c.method == "chat.postMessage" and header(c).startswith("📦 Sync model"),
            10,
        )
        await slack.wait_until(
            lambda: attachment_color(slack.message(CH, synced.result["ts"])) == GREEN, 10
        )
    assert [c.operation for c in controllers.calls if c.operation != "status"] == [
        "up",
        "sync_model",
    ]
