"""Through Slack (Bolt's real client on the stand-in) on the lab, for each fix a failure offers:
`/spark up` fails in preflight and offers the fix as a button; the button mends the worker with
its progress on the job's message; the next `/spark up` is Ready.

- `sync-image`: a worker with another image ID; the head's image is streamed into it.
- `sync-model`: a shard missing from the worker's Hugging Face cache; the head's model is copied
  to the worker over the fabric, the model check's result at its end.
- `drop-caches`: the worker's memory held by its page cache (the last model's files); the
  config's command drops it on every node, what each gave back at its end."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pytest

from lab import api as lab_api
from lab import image
from lab import topology as T
from lab.api import LabInfo
from testkit.lab_cluster import FAST, cluster_for
from testkit.slack_bot import (
    ALICE,
    CH,
    attachment_text,
    block_text,
    down,
    header,
    settings,
    slack_bot,
)

pytestmark = [pytest.mark.lab, pytest.mark.timeout(300)]

SHARD_1 = "model-00001-of-00002.safetensors"


def image_differs(request: pytest.FixtureRequest) -> LabInfo:
    return request.getfixturevalue("relab")(nodes=2, variant_node=1)


def shard_missing(request: pytest.FixtureRequest) -> LabInfo:
    lab = request.getfixturevalue("lab")
    lab_api.put_model(
        1,
        lab_api.LAB_MODEL,
        config=lab_api.LAB_MODEL_CONFIG,
        total_size=lab_api.LAB_MODEL_BYTES,
        missing=[1],
    )
    return lab


def image_is_the_heads(lab: LabInfo, edits: list[str]) -> None:
    assert any("spark-lab/vllm-emu:latest to spark-lab-1: " in e for e in edits), edits
    assert image.image_id(T.Node(1)) == lab.image_id


def cache_full(request: pytest.FixtureRequest) -> LabInfo:
    lab = request.getfixturevalue("lab")
    lab_api.set_node_memory(1, MemFree=37, Cached=80)
    return lab


def cache_dropped(lab: LabInfo, edits: list[str]) -> None:
    assert lab_api.node_memory(1)["MemFree"] > 110 * 1024 * 1024


@dataclass(frozen=True)
class LabRemedy:
    command: str
    label: str
    breaks: Callable[[pytest.FixtureRequest], LabInfo]  # the lab with the worker needing it
    failure_title: str
    failure_says: str
    done_header: str
    done_says: str
    footer: str
    mended: Callable[[LabInfo, list[str]], None]  # given the job message's edits
    restore: Callable[[], object]


REMEDIES = [
    LabRemedy(
        command="sync-image",
        label="Sync image",
        breaks=image_differs,
        failure_title="✘ Same image on every node failed",
        failure_says="spark-lab-1: sha256:",
        done_header="✔ Image streamed to the nodes that differ",
        done_says="Loaded image",
        footer="Same image on every node in",
        mended=image_is_the_heads,
        restore=lab_api.restore_image,
    ),
    LabRemedy(
        command="sync-model",
        label="Sync model",
        breaks=shard_missing,
        failure_title="✘ The model complete on every node failed",
        failure_says=f"spark-lab-1: shards 1/2 complete: {SHARD_1} missing",
        done_header="✔ Model copied to the nodes that lack it",
        done_says="over the fabric",
        footer="The model complete on every node in",
        mended=lambda lab, edits: None,  # the model check at the end says so (the footer)
        restore=lambda: lab_api.put_lab_model(1),
    ),
    LabRemedy(
        command="drop-caches",
        label="Drop caches",
        breaks=cache_full,
        failure_title="✘ Free memory for the model failed",
        failure_says="the page cache holds the memory vLLM needs on spark-lab-1",
        done_header="✔ Page cache dropped on every node",
        done_says="37.0 GiB free before, 117.4 GiB after",
        footer="Page cache dropped on every node in",
        mended=cache_dropped,
        restore=lambda: lab_api.set_node_memory(1),
    ),
]


@pytest.mark.parametrize("remedy", REMEDIES, ids=lambda remedy: remedy.command)
async def test_the_failures_button_mends_the_worker_and_the_next_up_is_ready(
    remedy: LabRemedy, request, slack, tmp_path
):
    lab = remedy.breaks(request)
    cluster = cluster_for(lab, timeouts=FAST)
    try:
        await down(cluster)
        async with slack_bot(slack, cluster, settings(tmp_path)) as bot:
            await slack.send_slash_command(ALICE, CH, "up")
            offer = await slack.wait_for(
                lambda c: (
                    c.method == "chat.postMessage"
                    and header(c) == f"Fix it: /spark {remedy.command}"
                ),
                60,
            )
            failure = slack.thread(CH, offer.params["thread_ts"])[-2]
            assert header(failure) == remedy.failure_title
            assert remedy.failure_says in block_text(failure)
            assert f"<@{ALICE}>" in block_text(offer)
            [actions] = [b for b in offer.params["blocks"] if b["type"] == "actions"]
            [button] = actions["elements"]
            assert button["text"]["text"] == remedy.label and "confirm" in button

            # the failed `up` has ended (its lock is free: its clean-up goes over SSH) before the
            # click, as it has long before a person reads the offer
            await bot.dispatcher.jobs.idle(chat=False)
            await slack.click_button(ALICE, CH, offer.result["ts"], "spark_confirm")
            copied = await slack.wait_for(
                lambda c: (
                    c.method == "chat.postMessage" and header(c).startswith(remedy.done_header)
                ),
                120,
            )
            sync_ts = copied.params["thread_ts"]
            assert "spark-lab-1: " in block_text(copied) and remedy.done_says in block_text(copied)
            await slack.wait_until(
                lambda: remedy.footer in attachment_text(slack.message(CH, sync_ts)), 30
            )
            edits = [
                str(c.params) for c in slack.calls("chat.update") if c.params.get("ts") == sync_ts
            ]
            remedy.mended(lab, edits)

            await slack.send_slash_command(ALICE, CH, "up")
            await slack.wait_for(
                lambda c: c.method == "chat.postMessage" and header(c) == "✅ Ready", 60
            )
    finally:
        await down(cluster)
        remedy.restore()
