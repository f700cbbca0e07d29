"""Through Slack (Bolt's real client on the stand-in) on the lab: `/spark up` with a shard missing
from the worker's Hugging Face cache fails in preflight naming it and offers the fix as a button;
the button copies the head's model to the worker over the fabric, with the model check's result
at its end; the next `/spark up` is Ready."""

from __future__ import annotations

import pytest

from lab import api as lab_api
from tests.bot.helpers import (
    ALICE,
    CH,
    attachment_text,
    block_text,
    down,
    header,
    settings,
    slack_bot,
)
from tests.controller.helpers import cluster_for

pytestmark = [pytest.mark.lab, pytest.mark.timeout(300)]

FAST = {"stall": 4, "containers": 20, "ray": 10, "weights": 30, "engine": 30, "api": 30}
SHARD_1 = "model-00001-of-00002.safetensors"


async def test_the_failures_button_syncs_the_model_and_the_next_up_is_ready(slack, lab, tmp_path):
    cluster = cluster_for(lab, timeouts=FAST)
    await down(cluster)
    try:
        lab_api.put_model(
            1,
            lab_api.LAB_MODEL,
            config=lab_api.LAB_MODEL_CONFIG,
            total_size=lab_api.LAB_MODEL_BYTES,
            missing=[1],
        )
        async with slack_bot(slack, cluster, settings(tmp_path)):
            await slack.send_slash_command(ALICE, CH, "up")
            offer = await slack.wait_for(
                lambda c: (
                    c.method == "chat.postMessage" and header(c) == "Fix it: /spark sync-model"
                ),
                60,
            )
            failure = slack.thread(CH, offer.params["thread_ts"])[-2]
            assert header(failure).startswith("✘ The model complete on every node")
            assert f"spark-lab-1: shards 1/2 complete: {SHARD_1} missing" in block_text(failure)
            [actions] = [b for b in offer.params["blocks"] if b["type"] == "actions"]
            [button] = actions["elements"]
            assert button["text"]["text"] == "Sync model" and "confirm" in button

            await slack.click_button(ALICE, CH, offer.result["ts"], "spark_confirm")
            copied = await slack.wait_for(
                lambda c: (
                    c.method == "chat.postMessage"
                    and header(c).startswith("✔ Model copied to the nodes that lack it")
                ),
                120,
            )
            sync_ts = copied.params["thread_ts"]
            assert "spark-lab-1: " in block_text(copied) and "over the fabric" in block_text(copied)
            await slack.wait_until(
                lambda: (
                    "The model complete on every node in"
                    in attachment_text(slack.message(CH, sync_ts))
                ),
                30,
            )

            await slack.send_slash_command(ALICE, CH, "up")
            await slack.wait_for(
                lambda c: c.method == "chat.postMessage" and header(c) == "✅ Ready", 60
            )
    finally:
        await down(cluster)
        lab_api.put_lab_model(1)
