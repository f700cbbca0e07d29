"""Unified memory before a load, on the lab's nodes (their /proc/meminfo is a GB10's, set per
test): preflight tells the page cache apart from memory in use, `drop-caches` frees the cache,
and after a stop the next preflight waits for the last launch's memory to come back."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path

import pytest
import yaml

from cluster.events import CheckpointPassed, Failed, Progress, Ready
from lab import api as lab_api
from testkit.lab_cluster import FAST, LAB_CONFIG, collect, controller_for
from tests.cluster.in_lab.test_cli import spark_bot

pytestmark = [pytest.mark.lab, pytest.mark.timeout(240)]
GIB_KB = 1024 * 1024


def lab_config_with(tmp_path: Path, **memory) -> str:
    data = yaml.safe_load(LAB_CONFIG.read_text())
    data["cluster"]["memory"] = {**data["cluster"].get("memory", {}), **memory}
    path = tmp_path / "lab.yaml"
    path.write_text(yaml.safe_dump(data))
    return str(path)


def unstopped(tmp_path: Path) -> str:
    """The lab's config with no earlier stop in sight: an earlier test's `down` would make the
    preflight wait for the memory of that launch (test_after_a_stop_...) before its own finding."""
    return lab_config_with(tmp_path, return_window=0.001)


async def test_the_page_cache_in_the_way_is_named_and_dropped_from_the_command_line(
    idle_after, tmp_path
):
    lab_api.set_node_memory(1, MemFree=37, Cached=80)  # the last model's files in the cache
    config = unstopped(tmp_path)

    code, out, _ = await spark_bot("preflight", config=config)
    assert code == 1, out
    assert "the page cache holds the memory vLLM needs on spark-lab-1" in out
    assert "spark-lab-1: 37.0 GiB free, 80.4 GiB page cache and reclaimable" in out
    assert "spark-lab-1 has 80.0 GiB less free memory than spark-lab-0" in out
    assert "run:      spark-bot drop-caches --config" in out

    code, out, _ = await spark_bot("drop-caches", config=config)
    assert code == 0, out
    assert "spark-lab-1: 37.0 GiB free before, 117.4 GiB after (80.4 GiB given back" in out
    assert lab_api.node_memory(1)["Cached"] < GIB_KB

    code, out, _ = await spark_bot("preflight", config=config)
    assert code == 0, out
    assert "vLLM claims 109.5 GiB free at start-up (0.9 x 121.63 GiB)" in out


async def test_memory_in_use_is_no_cache_to_drop(idle_after, tmp_path):
    lab_api.set_node_memory(1, MemFree=20)  # held by something: in no cache

    code, out, _ = await spark_bot("preflight", config=unstopped(tmp_path))
    assert code == 1, out
    assert "memory in use on spark-lab-1 leaves less than vLLM claims" in out
    assert "lower serve.gpu_memory_utilization to 0.18 or less" in out
    assert "drop-caches" not in out, "dropping the cache would not help: not offered"


async def test_drop_caches_runs_only_what_the_config_names_and_grants(idle_after, tmp_path):
    code, out, _ = await spark_bot(
        "drop-caches", config=lab_config_with(tmp_path, drop_caches=None)
    )
    assert code == 1
    assert "the config names no command to drop the page cache (memory.drop_caches)" in out
    assert "NOPASSWD: /usr/local/sbin/drop-caches" in out

    refused = lab_config_with(tmp_path, drop_caches=["sudo", "-n", "/nonexistent/drop-caches"])
    code, out, _ = await spark_bot("drop-caches", config=refused)
    assert code == 1
    assert "`sudo -n /nonexistent/drop-caches` exited 1 on spark-lab-0" in out
    assert "command not found" in out


async def test_after_a_stop_the_next_preflight_waits_for_the_memory_to_come_back(idle_after):
    controller = controller_for(idle_after, timeouts=FAST)
    assert isinstance((await collect(controller.up(sample_max_tokens=4)))[-1], Ready)
    await collect(controller.down())
    lab_api.set_node_memory(1, MemFree=20)  # not given back when the container stopped

    held = controller_for(idle_after, timeouts=FAST, memory=memory(return_timeout=2))
    events = await collect(held.preflight())
    failure = events[-1]
    assert isinstance(failure, Failed) and failure.signature == "memory_not_returned", failure
    assert failure.summary.startswith(
        "memory not returned on spark-lab-1: 22.4 GiB available after waiting 2 s, 119.4 GiB "
        "before the last launch"
    ), failure.summary
    assert "reboot spark-lab-1" in failure.fix
    assert any(isinstance(e, Progress) and "waiting up to 2 s" in e.message for e in events)

    # the memory comes back while preflight waits: it goes on, and says so
    seen: asyncio.Queue = asyncio.Queue()

    async def preflight() -> None:
        async for event in controller.preflight():
            await seen.put(event)

    task = asyncio.create_task(preflight())
    try:
        first = await asyncio.wait_for(seen.get(), 60)
        while not isinstance(first, Progress):
            first = await asyncio.wait_for(seen.get(), 60)
        assert "spark-lab-1: 22.4 GiB available" in first.message, first
        lab_api.set_node_memory(1)
        await asyncio.wait_for(task, 60)
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    rest = [seen.get_nowait() for _ in range(seen.qsize())]
    back = next(e for e in rest if isinstance(e, Progress))
    assert back.message.startswith("memory back on spark-lab-1 after"), back
    passed = next(e for e in rest if isinstance(e, CheckpointPassed) and e.checkpoint == "memory")
    assert "memory back on spark-lab-1 after" in passed.evidence
    assert not any(isinstance(e, Failed) for e in rest), rest


def memory(**changes):
    from bot.config import load_config

    return load_config(LAB_CONFIG).cluster.memory.model_copy(update=changes)
