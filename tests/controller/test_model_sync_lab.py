"""`sync-model` on the lab (real sshd per node, each node its own home and Hugging Face cache,
node-to-node SSH over the fabric): a worker with a partial model fails preflight naming the
shard and offering the fix; `spark-bot sync-model` copies the head's over the fabric with rsync
(progress seen, the hub layout kept); the next `up` is Ready with HF_HUB_OFFLINE=1."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from cluster.events import CheckpointPassed, Progress, parse_event
from cluster.transfer import size
from lab import api as lab_api
from tests.controller.test_cli_lab import CONFIG, spark_bot

pytestmark = [pytest.mark.lab, pytest.mark.timeout(300)]
SHARD_2 = "model-00002-of-00002.safetensors"


def container_env(socket: str, name: str) -> list[str]:
    out = subprocess.run(
        ["docker", "-H", f"unix://{socket}", "inspect", "-f", "{{json .Config.Env}}", name],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return json.loads(out)


async def test_a_partial_model_fails_preflight_naming_the_shard_and_sync_model_fixes_it(lab):
    worker = lab.nodes[1]
    try:
        partial = lab_api.put_model(
            1,
            lab_api.LAB_MODEL,
            config=lab_api.LAB_MODEL_CONFIG,
            total_size=lab_api.LAB_MODEL_BYTES,
            truncated=[2],
        )
        code, out, _ = await spark_bot("preflight")
        assert code == 1, out
        assert "✘ The model complete on every node on spark-lab-1 FAILED" in out
        full = partial.sizes[SHARD_2]
        assert (
            f"spark-lab-1: shards 1/2 complete: {SHARD_2} is {size(full // 2)} of {size(full)}"
            in out
        )
        assert "spark-lab-0: config.json, index, shards 2/2 at full size" in out
        assert f"run:      spark-bot sync-model --config {CONFIG}" in out

        code, out, err = await spark_bot("sync-model", "--json")
        assert code == 0, out + err
        events = [parse_event(line) for line in out.splitlines()]
        assert [e.checkpoint for e in events if isinstance(e, CheckpointPassed)] == [
            "ssh",
            "model_source",
            "model_copied",
            "model_synced",
        ]
        progress = [e for e in events if isinstance(e, Progress)]
        assert progress and progress[-1].node == "spark-lab-1"
        assert progress[-1].message.endswith(", copied") and progress[-1].transfer.bytes_done > 0
        copied = next(e for e in events if getattr(e, "checkpoint", "") == "model_copied")
        assert (
            "spark-lab-1: " in copied.evidence
            and "from spark-lab-0 over the fabric" in copied.evidence
        )
        assert f"@{worker.fabric_ip}" in copied.evidence
        synced = events[-1]
        assert "spark-lab-1: config.json, index, shards 2/2 at full size" in synced.evidence
        assert "HF_HUB_OFFLINE=1 in the containers" in synced.evidence
        link = partial.snapshot / SHARD_2  # the worker's cache, as the hub leaves it
        assert os.readlink(link).startswith("../../blobs/") and link.stat().st_size == full

        code, out, err = await spark_bot("up")
        assert code == 0, out + err
        assert "READY: qwen35" in out
        assert "HF_HUB_OFFLINE=1 in the containers: every node has the model" in out
        assert "HF_HUB_OFFLINE=1" in container_env(worker.docker_socket, "vllm_lab")
    finally:
        await spark_bot("down")
        lab_api.put_lab_model(1)
