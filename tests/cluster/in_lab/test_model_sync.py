"""`sync-model` on the lab (real sshd per node, each node its own home and Hugging Face cache,
node-to-node SSH over the fabric): a worker with a partial model fails preflight naming the
shard and offering the fix; `spark-bot sync-model` copies the head's over the fabric with rsync
(progress seen, the hub layout kept); the next `up` is Ready with HF_HUB_OFFLINE=1. A cancel
mid-copy ends rsync on both nodes and leaves the worker without the model; the next copy goes
on from where it stopped."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
from collections.abc import Iterator
from contextlib import aclosing, contextmanager
from pathlib import Path

import pytest

from cluster.config import Secrets
from cluster.controller import Controller
from cluster.events import CheckpointPassed, Progress, parse_event
from cluster.operations.transfer import size
from lab import api as lab_api
from lab.topology import FABRIC_IFNAME
from testkit.lab_cluster import cluster_for, collect
from testkit.model_cache import lay_out_big_model, repo_folder
from tests.cluster.in_lab.test_cli import CONFIG, spark_bot

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


@contextmanager
def slowed_fabric(netns: str) -> Iterator[None]:
    """The node's fabric link sends at 300 Mbit/s (a token bucket on its egress)."""
    on_node = ["ip", "netns", "exec", netns, "tc", "qdisc"]
    bucket = ["tbf", "rate", "300mbit", "burst", "64kb", "latency", "100ms"]
    subprocess.run([*on_node, "add", "dev", FABRIC_IFNAME, "root", *bucket], check=True)
    try:
        yield
    finally:
        subprocess.run([*on_node, "del", "dev", FABRIC_IFNAME, "root"], check=True)


def rsync_pids() -> list[int]:
    """rsync processes of the lab's nodes (they share this machine's process table)."""
    found = subprocess.run(["pgrep", "-a", "rsync"], capture_output=True, text=True).stdout
    return [int(line.split()[0]) for line in found.splitlines() if "/tmp/pytest" not in line]


async def ended(pids: list[int], within: float) -> bool:
    """Whether every process of `pids` ends within `within` seconds (a pidfd is readable once
    its process has ended)."""
    loop = asyncio.get_running_loop()

    async def end(pid: int) -> None:
        try:
            fd = os.pidfd_open(pid)
        except ProcessLookupError:
            return
        gone = asyncio.Event()
        loop.add_reader(fd, gone.set)
        try:
            await gone.wait()
        finally:
            loop.remove_reader(fd)
            os.close(fd)

    try:
        async with asyncio.timeout(within):
            await asyncio.gather(*(end(pid) for pid in pids))
    except TimeoutError:
        return False
    return True


async def test_a_cancel_mid_copy_ends_rsync_on_both_nodes_and_the_next_copy_goes_on(lab):
    big = 200 << 20
    model = "spark-lab/big"
    config = cluster_for(lab)
    config = config.model_copy(update={"serve": config.serve.model_copy(update={"model": model})})
    lay_out_big_model(Path(lab.nodes[0].hf_cache), model, big)
    try:
        sync = Controller(config, Secrets({})).sync_model(report_every_s=0.2)
        # the head's fabric slowed to ~37 MiB/s: on a quiet machine the copy took 0.15 s, over
        # before its first progress report
        with slowed_fabric(lab.nodes[0].netns):
            async with aclosing(sync) as events:
                async for event in events:
                    if isinstance(event, Progress) and event.transfer:
                        copying = rsync_pids()  # on the head and, by its ssh, on the worker
                        break  # a job's cancel closes the operation here, mid-copy
        assert len(copying) >= 2, copying
        assert await ended(copying, within=10), "the copy outlived its cancel"  # hung up
        worker = repo_folder(Path(lab.nodes[1].hf_cache), model)
        assert not (worker / "refs" / "main").exists()  # no model there rather than half a one
        partial = (worker / "blobs" / "big").stat().st_size
        assert 0 < partial < big

        events = await collect(Controller(config, Secrets({})).sync_model())
        assert isinstance(events[-1], CheckpointPassed), events[-1]
        [done] = [e for e in events if isinstance(e, Progress) and e.message.endswith("copied")]
        assert done.transfer.bytes_done <= big - partial + (1 << 20)  # it went on
        assert (worker / "blobs" / "big").stat().st_size == (
            Path(lab.nodes[0].hf_cache) / repo_folder(Path("."), model) / "blobs" / "big"
        ).stat().st_size
    finally:
        lab_api.remove_model(0, model)
        lab_api.remove_model(1, model)
