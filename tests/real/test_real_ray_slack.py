"""`/spark up` from Slack (Bolt's real Socket Mode client on the stand-in) on the real engine,
Ray backend: real `ray start` head and worker, real `ray status`, `vllm serve` over Ray.
"""

from __future__ import annotations

import pytest

from cluster.progress.checkpoints import launch_plan
from testkit.real_cluster import RAY, VERSION, real_cluster
from testkit.slack_bot import (
    ALICE,
    CH,
    GREEN,
    attachment_color,
    attachment_text,
    block_text,
    checkpoint_header,
    down,
    header,
    settings,
    slack_bot,
)

pytestmark = [pytest.mark.lab, pytest.mark.real_engine, pytest.mark.timeout(400)]


async def test_slash_up_on_the_real_ray_cluster_posts_every_checkpoint_with_its_log_tail(
    slack, real_lab, tmp_path
):
    cluster = real_cluster(RAY)
    plan = launch_plan(cluster)
    await down(cluster)
    try:
        async with slack_bot(slack, cluster, settings(tmp_path)):
            ack = await slack.send_slash_command(ALICE, CH, "up")
            assert ack.payload is None and ack.latency < 3
            # A failure is posted inside its phase timeout: it ends the wait with its words.
            ready = await slack.wait_for(
                lambda c: c.method == "chat.postMessage" and header(c).startswith(("✅", "✘")),
                300,
            )
            assert header(ready) == "✅ Ready", block_text(ready)
            parent_ts = ready.params["thread_ts"]
            await slack.wait_until(
                lambda: "Ready" in attachment_text(slack.message(CH, parent_ts)), 10
            )
            replies = [
                c
                for c in slack.calls()
                if c.method == "chat.postMessage" and c.params.get("thread_ts") == parent_ts
            ]
    finally:
        await down(cluster)
    # the dummy-weight model has no safetensors to size: the fit check cannot run, and says so;
    # nor the image against the GPU or its NCCL: the real engine's containers get none
    # (container.gpus false)
    unchecked = ("gpu_arch", "nccl_library", "fit")
    assert [checkpoint_header(r) for r in replies] == [
        f"{'➖' if c.id in unchecked else '✔'} {c.title}" for c in plan
    ] + ["✅ Ready"], "no checkpoint warned: every one proven by the real engine"
    by_title = {checkpoint_header(r): block_text(r) for r in replies}
    assert (
        "2 active node(s), 0.0/2.0 GPU" in by_title["✔ Ray sees every node and GPU"]
    )  # real `ray status`
    weights = by_title["✔ Weights loaded on every rank"]
    assert weights.count("Initializing model took") >= 2 and "ip=198.18.1.11" in weights, (
        "rank 1 on the worker"
    )
    assert (
        "CPU KV cache size" in by_title["✔ KV cache sized"]
        and "```" in by_title["✔ KV cache sized"]
    )
    assert f"vLLM {VERSION}" in block_text(replies[-1]) and "tok/s" in block_text(replies[-1])
    parent = slack.message(CH, parent_ts)
    assert attachment_color(parent) == GREEN and block_text(parent).count("✅") == len(plan) - len(
        unchecked
    )
    assert block_text(parent).count("➖") == len(unchecked)
    assert "not checked: no fit estimate" in block_text(parent)
    assert "not checked: the containers get no GPU" in block_text(parent)
