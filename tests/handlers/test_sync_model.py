"""`/spark sync-model` and the button a missing or partial model offers: asked first like any
change to the cluster, the offer's button the requester's once, the copy's progress on the job's
message, the model check's result at its end."""

from __future__ import annotations

import pytest

from cluster.checkpoints import BY_ID, SYNC_MODEL
from cluster.events import Progress, Transfer
from cluster.failures import MODEL_INCOMPLETE
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
    passed,
    running_dispatcher,
    settings,
)
from tests.handlers.test_sync_image import click, operations

pytestmark = pytest.mark.timeout(30)
MODEL = CLUSTER.serve.model
HEAD, WORKER = (node.name for node in CLUSTER.nodes)
SHARD = "model-00002-of-00002.safetensors"


def model_incomplete():
    defects = f"{WORKER}: shards 1/2 complete: {SHARD} is 1.2 GiB of 4.0 GiB"
    return Reporter().known(
        BY_ID["model"],
        MODEL_INCOMPLETE,
        {"model": MODEL, "nodes": WORKER, "defects": defects, "source": HEAD},
        node=WORKER,
        evidence=defects,
    )


def sync_passes(hold: Hold | None = None):
    reporter = Reporter()
    steps = [reporter.passed(checkpoint, f"{checkpoint.id} proven") for checkpoint in SYNC_MODEL]
    progress = Progress(
        elapsed_s=1.0,
        phase="sync-model",
        node=WORKER,
        message=f"{MODEL} to {WORKER}: 2.0 GiB of ~8.0 GiB (25%), 1.0 GiB/s, about 6 s left",
        transfer=Transfer(bytes_done=2 << 30, bytes_total=8 << 30, rate_bps=1 << 30, eta_s=6.0),
    )
    return [*steps[:2], progress, *([hold] if hold else []), *steps[2:]]


async def test_sync_model_asks_first_then_runs_with_its_progress_on_the_message(tmp_path):
    hold = Hold()
    controllers = ScriptedControllers(sync_model=sync_passes(hold))
    async with running_dispatcher(controllers, settings(tmp_path)) as (dispatcher, chat):
        await dispatcher.command(Invocation(ALICE, CH, "sync-model"))
        await dispatcher.idle()
        question = chat.private[-1][1]
        assert question.title == "Confirm" and operations(controllers) == []
        assert f"Copy `{MODEL}` from a node of `{CLUSTER.name}`" in question.text
        [button] = question.buttons
        await dispatcher.action(Action(ALICE, CH, CONFIRM_ACTION, button.value))
        await hold.reached.wait()
        await chat.wait_until(lambda: "about 6 s left" in (chat.parent().footer or ""))
        hold.release.set()
        await dispatcher.idle()
        parent = chat.parent()
    assert operations(controllers) == ["sync_model"]
    assert parent.title == f"📦 Sync model `{MODEL}` on `{CLUSTER.name}`"
    assert [item.state for item in parent.checklist] == ["done"] * len(SYNC_MODEL)
    assert parent.footer.startswith("✔ The model complete on every node in")


async def test_a_partial_model_offers_the_sync_to_the_requester_once(tmp_path):
    controllers = ScriptedControllers(up=[passed("ssh"), passed("docker"), model_incomplete()])
    controllers.scripts["sync_model"] = sync_passes()
    async with running_dispatcher(controllers, settings(tmp_path)) as (dispatcher, chat):
        await dispatcher.command(Invocation(ALICE, CH, "up"))
        await dispatcher.idle()
        thread = [sent.message for sent in chat.thread()]
        failure, offer = thread[-2], thread[-1]
        assert failure.title == "✘ The model complete on every node failed"
        assert SHARD in failure.text and "spark-bot sync-model --config F" in failure.text
        assert offer.title == "Fix it: /spark sync-model"
        [button] = offer.buttons
        assert button.label == "Sync model" and button.confirm is not None
        refused = await click(dispatcher, button.value, user=BOB)
        assert refused.title == "This confirmation is no longer valid"
        confirmed = await click(dispatcher, button.value)
        assert await dispatcher.store.locks() == []
    assert confirmed.title == "Confirmed: `/spark sync-model`"
    assert operations(controllers) == ["up", "sync_model"]
    assert chat.parent(1).footer.startswith("✔ The model complete on every node")
