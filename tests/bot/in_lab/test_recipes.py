"""Recipes and the fit check in the lab: `/spark up RECIPE` for each shipped recipe through Bolt's
real client on the Slack stand-in (the emulator standing in for each model, small stand-in model
files in each node's Hugging Face cache), and a model that cannot fit refused before any container."""

from __future__ import annotations

import subprocess

import pytest

from cluster.config import ClusterConfig, Secrets
from cluster.controller import Controller
from cluster.events import Failed, Progress
from lab.api import LAB_MODEL, put_model, remove_model
from testkit.lab_cluster import FAST, cluster_for, collect
from testkit.slack_bot import (
    ALICE,
    CH,
    attachment_text,
    block_text,
    containers_present,
    down,
    header,
    private_answer,
    private_answers,
    settings,
    slack_bot,
)
from tests.cluster.resources.test_fit import GPT_OSS_120B, HYBRID

pytestmark = [pytest.mark.lab, pytest.mark.timeout(240)]

EMULATOR = "spark-lab/vllm-emu:latest"
MINIMAX_M25 = {  # MiniMax-M2.5's attention: 62 full-attention layers, 8 KV heads of 128
    "num_hidden_layers": 62,
    "num_attention_heads": 48,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "hidden_size": 3072,
    "torch_dtype": "bfloat16",
    "max_position_embeddings": 196608,
}
LLAMA_70B = {
    "num_hidden_layers": 80,
    "num_attention_heads": 64,
    "num_key_value_heads": 8,
    "hidden_size": 8192,
    "torch_dtype": "bfloat16",
    "max_position_embeddings": 131072,
}
# model -> (config.json, the index's total_size): small shards standing in for the weights
MODELS = {
    "Qwen/Qwen3.5-122B-A10B-FP8": (HYBRID, 119_000_000_000),
    "openai/gpt-oss-120b": (GPT_OSS_120B, 65_249_902_592),
    "cyankiwi/MiniMax-M2.5-AWQ-4bit": (MINIMAX_M25, 125_000_000_000),
    "spark-lab/too-big": (LLAMA_70B, 200_000_000_000),
}


def docker(socket: str, *argv: str) -> None:
    subprocess.run(["docker", "-H", f"unix://{socket}", *argv], check=True, capture_output=True)


@pytest.fixture
async def recipes_cluster(lab):
    """The lab config (the shipped recipes beside it), the stand-in model files in every node's
    HF cache (configs/lab.yaml mounts each node's own), and the emulator image under each recipe's
    image name on every node."""
    config = cluster_for(lab, timeouts=FAST)
    for node in lab.nodes:
        for model, (model_config, total) in MODELS.items():
            put_model(node.index, model, config=model_config, total_size=total)
    images = sorted({r.image for r in config.recipes.values() if r.image})
    for node in config.nodes:
        for image in images:
            docker(node.docker_socket, "tag", EMULATOR, image)
    await down(config)
    try:
        yield config
    finally:
        await down(config)
        for node in config.nodes:
            for image in images:
                docker(node.docker_socket, "rmi", image)  # the tag only: the emulator stays
        for node in lab.nodes:
            for model in MODELS:
                if model != LAB_MODEL:  # `lab up`'s own, the same files: every test needs it
                    remove_model(node.index, model)


async def test_up_launches_each_shipped_recipe_and_names_it_everywhere(
    slack, recipes_cluster, tmp_path
):
    cluster: ClusterConfig = recipes_cluster
    async with slack_bot(slack, cluster, settings(tmp_path)):
        for name in sorted(cluster.recipes):
            recipe = cluster.with_recipe(name)
            mark = slack.calls()[-1].seq if slack.calls() else 0
            await slack.send_slash_command(ALICE, CH, f"up {name}")
            ready = await slack.wait_for(
                lambda c: c.method == "chat.postMessage" and header(c) == "✅ Ready", 90, after=mark
            )
            text = block_text(ready)
            assert f"Recipe: `{name}`" in text
            # the estimate beside what the emulator logged for the same model files
            assert "Memory: estimated" in text and "vLLM logged" in text
            estimate, logged = text.split("Memory: estimated ")[1].split("; vLLM logged ")
            assert estimate.split(" GiB")[0] == logged.split(" GiB")[0], text
            tokens = estimate.split("~")[1].split(" KV cache tokens")[0]
            assert f", {tokens} KV cache tokens" in logged, text
            fit = await slack.wait_for(
                lambda c: (
                    c.method == "chat.postMessage" and header(c).startswith("✔ The model fits")
                ),
                5,
                after=mark,
            )
            assert "x 121.63 GiB" in block_text(fit) and "KV cache" in block_text(fit)
            parent = ready.params["thread_ts"]
            launch = next(
                c for c in slack.calls("chat.postMessage") if c.result.get("ts") == parent
            )
            assert f"recipe `{name}`" in block_text(launch)
            present = await containers_present(cluster)
            assert present == [n.name for n in recipe.nodes], (name, present)

            answered = len(private_answers(slack, ALICE))
            await slack.send_slash_command(ALICE, CH, "recipes")
            listing = await private_answer(slack, ALICE, after=answered, timeout=20)
            assert f"`{name}` *running*" in block_text(listing)
            answered = len(private_answers(slack, ALICE))
            await slack.send_slash_command(ALICE, CH, "status")
            status = await private_answer(slack, ALICE, after=answered, timeout=20)
            assert f"(recipe `{name}`)" in block_text(status)
            ts = parent
            await slack.wait_until(
                lambda ts=ts: "Ready" in attachment_text(slack.message(CH, ts)), 20
            )
            await down(cluster)


async def test_a_model_that_cannot_fit_fails_before_any_container_with_what_would(
    recipes_cluster,
):
    config = recipes_cluster.model_copy(
        update={
            "serve": recipes_cluster.serve.model_copy(
                update={"model": "spark-lab/too-big", "max_model_len": 131072}
            )
        }
    )
    events = await collect(Controller(config, Secrets({})).up())
    failed = events[-1]
    assert isinstance(failed, Failed) and failed.checkpoint == "fit"
    assert failed.signature == "model_does_not_fit"
    # 200 GB over TP 2: 93.13 GiB a rank; 0.9 x 121.63 - 93.13 - 5.2 = 11.13 GiB for the KV cache;
    # 80 layers x 2 x 4 KV heads x 128 x 2 bytes = 160 KiB a token: 131072 tokens need 20 GiB,
    # 11.13 GiB holds 72,960 (blocks of 16); or (93.13 + 5.2 + 20) / 121.63 = 0.98 of the memory
    assert (
        "weights 93.13 GiB, engine overhead 5.2 GiB, KV cache budget 11.13 GiB" in failed.evidence
    )
    assert "max_model_len 131072 needs 20.00 GiB" in failed.evidence
    assert "set serve.max_model_len to 72960 or less" in failed.fix
    assert "raise gpu_memory_utilization to 0.98" in failed.fix
    assert not [e for e in events if isinstance(e, Progress)]
    assert await containers_present(config) == []
