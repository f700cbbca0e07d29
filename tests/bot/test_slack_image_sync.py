"""Through Slack (Bolt's real client on the stand-in) on the lab: `/spark up` on a worker with
another image ID fails in preflight and offers the fix as a button; the button streams the head's
image into the worker, with its progress on the job's message; the next `/spark up` is Ready."""

from __future__ import annotations

import pytest

from lab import api as lab_api
from lab import image
from lab import topology as T
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


async def test_the_failures_button_syncs_the_image_and_the_next_up_is_ready(slack, relab, tmp_path):
    lab = relab(nodes=2, variant_node=1)
    cluster = cluster_for(lab, timeouts=FAST)
    await down(cluster)
    try:
        async with slack_bot(slack, cluster, settings(tmp_path)):
            await slack.send_slash_command(ALICE, CH, "up")
            offer = await slack.wait_for(
                lambda c: (
                    c.method == "chat.postMessage" and header(c) == "Fix it: /spark sync-image"
                ),
                60,
            )
            launch_ts = offer.params["thread_ts"]
            failure = slack.thread(CH, launch_ts)[-2]
            assert header(failure) == "✘ Same image on every node failed"
            assert "spark-lab-1: sha256:" in block_text(failure)
            assert f"<@{ALICE}>" in block_text(offer)
            [actions] = [b for b in offer.params["blocks"] if b["type"] == "actions"]
            [button] = actions["elements"]
            assert button["text"]["text"] == "Sync image" and "confirm" in button

            await slack.click_button(ALICE, CH, offer.result["ts"], "spark_confirm")
            copied = await slack.wait_for(
                lambda c: (
                    c.method == "chat.postMessage"
                    and header(c).startswith("✔ Image streamed to the nodes that differ")
                ),
                120,
            )
            sync_ts = copied.params["thread_ts"]
            assert "spark-lab-1: " in block_text(copied) and "Loaded image" in block_text(copied)
            await slack.wait_until(
                lambda: (
                    "Same image on every node in" in attachment_text(slack.message(CH, sync_ts))
                ),
                30,
            )
            edits = [
                str(c.params) for c in slack.calls("chat.update") if c.params.get("ts") == sync_ts
            ]
            assert any("spark-lab/vllm-emu:latest to spark-lab-1: " in e for e in edits), edits
            assert image.image_id(T.Node(1)) == lab.image_id

            await slack.send_slash_command(ALICE, CH, "up")
            await slack.wait_for(
                lambda c: c.method == "chat.postMessage" and header(c) == "✅ Ready", 60
            )
    finally:
        await down(cluster)
        lab_api.restore_image()
