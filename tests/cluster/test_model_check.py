"""Preflight's model check (cluster/resources/model_cache.py) on real files through the `local` driver: each
"node" has its own home, so its own Hugging Face cache behind the container's `~/hf` mount."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from cluster.config import Mount, NodeConfig
from cluster.events import CheckpointPassed
from cluster.nodes.connect import ClusterConnection
from cluster.nodes.local import LocalNode
from cluster.operations.preflight import NodeFacts, Preflight, model_failure
from cluster.progress.checkpoints import BY_ID
from cluster.progress.reporter import Reporter
from cluster.resources.memory import GIB, MemoryBreakdown
from cluster.resources.model_cache import check_model
from testkit.doubles import CLUSTER
from testkit.model_cache import TINY_CONFIG, cut_short, lay_out_model, safetensors_file

MODEL = CLUSTER.serve.model
HEAD, WORKER = (node.name for node in CLUSTER.nodes)
SPARK_MEMORY = MemoryBreakdown(
    total=int(121.6 * GIB), free=int(117 * GIB), available=int(119 * GIB)
)
SHARD_2 = "model-00002-of-00002.safetensors"


def node(name: str) -> LocalNode:
    config = NodeConfig(name=name, driver="local", fabric_ip="127.0.0.1")
    return LocalNode(config, None, 0.0)  # type: ignore[arg-type]  # no Docker: files only


def cluster(**container: object):
    update = {"mounts": [Mount(source="~/hf", target="/root/.cache/huggingface")], **container}
    return CLUSTER.model_copy(update={"container": CLUSTER.container.model_copy(update=update)})


async def check(config, tmp_path: Path):
    homes = {HEAD: str(tmp_path / "head"), WORKER: str(tmp_path / "worker")}
    return await check_model(config, [node(HEAD), node(WORKER)], homes)


def failure(found):
    return model_failure(found, Reporter(), BY_ID["model"], HEAD)


async def test_a_model_complete_on_every_node_passes_with_what_was_checked(tmp_path):
    for home in ("head", "worker"):
        lay_out_model(tmp_path / home / "hf", MODEL, shards=2, shard_bytes=4096)
    found = await check(cluster(), tmp_path)
    assert found.complete_everywhere and failure(found) is None
    evidence = found.evidence()
    assert f"{HEAD}: config.json, index, shards 2/2 at full size, 8.2 KiB" in evidence, evidence
    assert f"{WORKER}: config.json, index, shards 2/2" in evidence
    assert found.hub_offline() == {"HF_HUB_OFFLINE": "1"}
    assert "HF_HUB_OFFLINE=1 in the containers" in found.offline_note()


async def test_a_worker_without_the_snapshot_fails_naming_it_and_offers_sync_model(tmp_path):
    lay_out_model(tmp_path / "head" / "hf", MODEL)
    found = await check(cluster(), tmp_path)
    failed = failure(found)
    assert failed is not None and failed.signature == "model_incomplete"
    assert failed.node == WORKER and failed.remedy == "sync-model"
    assert f"on {WORKER}: {WORKER}: not in the cache (no " in failed.summary
    assert "refs/main" in failed.summary
    assert "spark-bot sync-model --config F" in failed.fix and f"from {HEAD}" in failed.fix
    assert found.hub_offline() == {}


async def test_a_missing_shard_and_a_short_one_are_named_with_their_sizes(tmp_path):
    lay_out_model(tmp_path / "head" / "hf", MODEL)
    snapshot = lay_out_model(tmp_path / "worker" / "hf", MODEL, shards=2, shard_bytes=4096)
    (snapshot / SHARD_2).resolve().unlink()
    found = await check(cluster(), tmp_path)
    assert f"shards 1/2 complete: {SHARD_2} missing" in failure(found).summary
    lay_out_model(tmp_path / "worker" / "hf", MODEL, shards=2, shard_bytes=4096)
    cut_short(snapshot, SHARD_2, 3000)  # the header is whole, the data is not
    failed = failure(await check(cluster(), tmp_path))
    full = len(safetensors_file({"layers.1.weight": 4096}))
    assert f"{SHARD_2} is 2.9 KiB of {full / 1024:.1f} KiB" in failed.summary, failed.summary
    cut_short(snapshot, SHARD_2, 20)  # not even the header
    failed = failure(await check(cluster(), tmp_path))
    assert f"{SHARD_2} has no readable safetensors header (20 B)" in failed.summary


async def test_a_model_complete_nowhere_says_to_download_it_once_and_offers_no_copy(tmp_path):
    snapshot = lay_out_model(tmp_path / "head" / "hf", MODEL)
    (snapshot / "config.json").resolve().write_text('{"num_hidden_layers": ')  # cut short
    failed = failure(await check(cluster(), tmp_path))
    assert failed.signature == "model_not_cached" and failed.remedy is None
    assert "config.json not complete JSON" in failed.summary
    assert f"hf download {MODEL}" in failed.fix and "sync-model" in failed.fix


async def test_a_model_given_as_a_path_is_checked_in_the_mounted_folder(tmp_path):
    for home in ("head", "worker"):
        snapshot = lay_out_model(tmp_path / home / "hf", MODEL, shards=1)
        (tmp_path / home / "models").mkdir()
        (tmp_path / home / "models" / "m").symlink_to(snapshot)
    (tmp_path / "worker" / "models" / "m" / "model.safetensors").resolve().unlink()
    config = cluster(mounts=[Mount(source="~/models", target="/models")])
    config = config.model_copy(
        update={"serve": config.serve.model_copy(update={"model": "/models/m"})}
    )
    found = await check(config, tmp_path)
    assert found.nodes[0].complete and "shards 1/1 at full size" in found.nodes[0].describe()
    assert "neither model.safetensors.index.json nor model.safetensors in" in failure(found).summary
    assert found.hub_offline() == {}  # a path asks no hub; vLLM mishandles offline paths


async def test_no_mount_of_the_cache_passes_with_a_note_and_sets_nothing(tmp_path):
    found = await check(cluster(mounts=[]), tmp_path)
    assert failure(found) is None and not found.complete_everywhere
    assert "not checked: no container mount holds the Hugging Face cache" in found.evidence()
    assert found.hub_offline() == {}


async def test_the_configs_own_hub_setting_wins_and_dummy_weights_are_not_checked(tmp_path):
    for home in ("head", "worker"):
        snapshot = lay_out_model(tmp_path / home / "hf", MODEL)
        (snapshot / SHARD_2).unlink()
    config = cluster(env={"HF_HUB_OFFLINE": "0"})
    config = config.model_copy(
        update={"serve": config.serve.model_copy(update={"extra_args": ["--load-format=dummy"]})}
    )
    found = await check(config, tmp_path)
    assert found.complete_everywhere and "weights not checked" in found.evidence()
    assert found.hub_offline() == {} and "as the config sets it" in found.offline_note()


class CountingNode(LocalNode):
    """The local driver, counting the reads of each file."""

    def __init__(self, name: str) -> None:
        super().__init__(NodeConfig(name=name, driver="local", fabric_ip="127.0.0.1"), None, 0.0)  # type: ignore[arg-type]  # no Docker: files only
        self.reads: Counter[str] = Counter()

    async def read_file(self, path: str, *, timeout: float, limit: int = 32768) -> str:
        self.reads[Path(path).name] += 1
        return await super().read_file(path, timeout=timeout, limit=limit)

    async def read_bytes(self, path: str, *, timeout: float, offset: int, length: int):
        if offset == 0:  # a shard's header is read in two parts: count the file once
            self.reads[Path(path).name] += 1
        return await super().read_bytes(path, timeout=timeout, offset=offset, length=length)


async def preflight_model_and_fit(config, tmp_path: Path, *, model_check: bool = True):
    """Preflight's `model` and `fit` steps on counting nodes; the head's counts, and the fit."""
    head, worker = CountingNode(HEAD), CountingNode(WORKER)
    preflight = Preflight(
        config, ClusterConnection(config, {HEAD: head, WORKER: worker}), Reporter()
    )
    preflight.facts = {
        name: NodeFacts(home=str(tmp_path / home), memory=SPARK_MEMORY)
        for name, home in ((HEAD, "head"), (WORKER, "worker"))
    }
    events = [event async for event in preflight._model()] if model_check else []
    events += [event async for event in preflight._fits()]
    assert [type(event) for event in events] == [CheckpointPassed] * len(events), events
    return head.reads, preflight.fit


async def test_the_fit_check_reads_no_file_the_model_check_read(tmp_path):
    for home in ("head", "worker"):
        lay_out_model(tmp_path / home / "hf", MODEL, config=TINY_CONFIG, total_size=10**9)
    reads, fit = await preflight_model_and_fit(cluster(), tmp_path)
    assert reads["main"] == 1 and reads["config.json"] == 1, reads
    assert reads["model.safetensors.index.json"] == 1, reads
    assert fit is not None and fit.weights_gib == pytest.approx(10**9 / 2 / 2**30)
    alone, fit_alone = await preflight_model_and_fit(cluster(), tmp_path, model_check=False)
    assert alone == Counter({"main": 1, "config.json": 1, "model.safetensors.index.json": 1})
    assert fit_alone == fit


async def test_with_dummy_weights_the_fit_check_reads_only_the_index(tmp_path):
    for home in ("head", "worker"):
        lay_out_model(tmp_path / home / "hf", MODEL, config=TINY_CONFIG, total_size=10**9)
    config = cluster()
    config = config.model_copy(
        update={"serve": config.serve.model_copy(update={"extra_args": ["--load-format=dummy"]})}
    )
    reads, fit = await preflight_model_and_fit(config, tmp_path)
    assert reads == Counter({"main": 1, "config.json": 1, "model.safetensors.index.json": 1})
    assert fit is not None and fit.weights_gib == pytest.approx(10**9 / 2 / 2**30)
