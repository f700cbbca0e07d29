"""`/spark sync-image` and the button a failure it fixes offers: asked first like any change to
the cluster, the offer's button the requester's once, progress shown on the job's message."""

from __future__ import annotations

import pytest

from cluster.checkpoints import BY_ID, SYNC_IMAGE
from cluster.events import Progress, Transfer
from cluster.failures import IMAGE_DIFFERS
from cluster.reporter import Reporter
from handlers.dispatch import Action, Invocation
from handlers.messages import CONFIRM_ACTION
from tests.handlers.doubles import (
    ALICE,
    BOB,
    CH,
    CLUSTER,
    Hold,
    ScriptedControllers,
    failed,
    passed,
    running_dispatcher,
    settings,
)

pytestmark = pytest.mark.timeout(30)
IMAGE = CLUSTER.container.image


def image_differs():
    listing = "spark-lab-0: sha256:aaaa; spark-lab-1: sha256:bbbb"
    return Reporter().known(
        BY_ID["image"], IMAGE_DIFFERS, {"image": IMAGE, "listing": listing}, evidence=listing
    )


def sync_passes(hold: Hold | None = None):
    reporter = Reporter()
    steps = [reporter.passed(checkpoint, f"{checkpoint.id} proven") for checkpoint in SYNC_IMAGE]
    progress = Progress(
        elapsed_s=1.0,
        phase="sync-image",
        node="spark-lab-1",
        message=f"{IMAGE} to spark-lab-1: 1.0 GiB of ~4.0 GiB (25%), 100.0 MiB/s, about 31 s left",
        transfer=Transfer(bytes_done=1 << 30, bytes_total=4 << 30, rate_bps=100 << 20, eta_s=30.7),
    )
    return [*steps[:2], progress, *([hold] if hold else []), *steps[2:]]


def operations(controllers: ScriptedControllers) -> list[str]:
    return [c.operation for c in controllers.calls if c.operation not in {"status", "watch"}]


async def click(dispatcher, value: str, user: str = ALICE):
    reply = await dispatcher.action(Action(user, CH, CONFIRM_ACTION, value))
    await dispatcher.idle()
    return reply


async def test_sync_image_asks_first_then_runs_with_its_progress_on_the_message(tmp_path):
    hold = Hold()
    controllers = ScriptedControllers(sync_image=sync_passes(hold))
    async with running_dispatcher(controllers, settings(tmp_path)) as (dispatcher, chat):
        await dispatcher.command(Invocation(ALICE, CH, "sync-image"))
        await dispatcher.idle()
        question = chat.private[-1][1]
        assert question.title == "Confirm" and operations(controllers) == []
        assert f"Copy `{IMAGE}` from `{CLUSTER.head.name}`" in question.text
        [button] = question.buttons
        await dispatcher.action(Action(ALICE, CH, CONFIRM_ACTION, button.value))
        await hold.reached.wait()
        await chat.wait_until(lambda: "about 31 s left" in (chat.parent().footer or ""))
        hold.release.set()
        await dispatcher.idle()
        parent = chat.parent()
    assert operations(controllers) == ["sync_image"]
    assert parent.title == f"📦 Sync image `{IMAGE}` on `{CLUSTER.name}`"
    assert [item.state for item in parent.checklist] == ["done"] * len(SYNC_IMAGE)
    assert parent.footer.startswith("✔ Same image on every node in")


async def test_an_image_mismatch_offers_the_sync_to_the_requester_once(tmp_path):
    controllers = ScriptedControllers(up=[passed("ssh"), passed("docker"), image_differs()])
    controllers.scripts["sync_image"] = sync_passes()
    async with running_dispatcher(controllers, settings(tmp_path)) as (dispatcher, chat):
        await dispatcher.command(Invocation(ALICE, CH, "up"))
        await dispatcher.idle()
        thread = [sent.message for sent in chat.thread()]
        failure, offer = thread[-2], thread[-1]
        assert failure.title == "✘ Same image on every node failed"
        assert "sync-image" in failure.text
        assert offer.title == "Fix it: /spark sync-image"
        assert f"<@{ALICE}>" in offer.text and "the button is yours for 600 s" in offer.text
        [button] = offer.buttons
        assert button.label == "Sync image" and button.confirm is not None
        refused = await click(dispatcher, button.value, user=BOB)
        assert refused.title == "This confirmation is no longer valid"
        assert operations(controllers) == ["up"]
        confirmed = await click(dispatcher, button.value)
        again = await click(dispatcher, button.value)
        assert await dispatcher.store.locks() == []
    assert confirmed.title == "Confirmed: `/spark sync-image`"
    assert again.title == "This confirmation is no longer valid"
    assert operations(controllers) == ["up", "sync_image"]
    assert chat.parent(1).footer.startswith("✔ Same image on every node")


async def test_a_failure_no_command_fixes_offers_nothing(tmp_path):
    controllers = ScriptedControllers(up=[passed("ssh"), failed("weights")])
    async with running_dispatcher(controllers, settings(tmp_path)) as (dispatcher, chat):
        await dispatcher.command(Invocation(ALICE, CH, "up"))
        await dispatcher.idle()
    assert not [sent for sent in chat.thread() if sent.message.buttons]
