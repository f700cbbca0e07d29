"""Nodes that drop out for hardware reasons (issue 25, item 5), through the two ways in: Bolt's
real client on the Slack stand-in (the failure is a reply in the launch's thread) and the CLI
(`spark-bot watch` prints it and exits 1). The lab's worker reboots, or logs a GPU fallen off
the bus, or reports its GPU held back by heat (tests/cluster/in_lab/test_hardware_faults.py
has every case on the controller)."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from cluster.config import WatchConfig
from cluster.events import Ready
from lab import api as lab_api
from testkit.lab_cluster import FAST, cluster_for, collect, controller_for
from testkit.slack_bot import ALICE, CH, block_text, down, header, settings, slack_bot
from tests.cluster.in_lab.test_hardware_faults import CONTAINER, XID_79
from tests.cluster.test_faults import lab_docker_kill
from tests.cluster.test_node_faults import QUICK_WATCH

pytestmark = [pytest.mark.lab, pytest.mark.timeout(240)]
CONFIG = str(Path(__file__).resolve().parents[3] / "configs" / "lab.yaml")
NO_MEMORY_WARNINGS = WatchConfig(memory_low_gib=0)  # the lab's nodes share the host's memory


@pytest.fixture
def worker_restored(lab):
    yield lab.nodes[1]
    lab_api.set_gpu(1)


async def reboot_the_worker(lab) -> None:
    await asyncio.to_thread(lab_api.reboot_node, 1)


async def the_workers_gpu_falls_off_the_bus(lab) -> None:
    await asyncio.to_thread(lab_api.add_kernel_lines, 1, *XID_79)
    await lab_docker_kill(lab, 1, CONTAINER)


async def failure_in_the_thread(
    slack, lab, tmp_path, fault, watch: WatchConfig = NO_MEMORY_WARNINGS, **cluster
) -> str:
    """`/spark up`, then `fault(lab)` once Ready: the failure's reply in the launch's thread."""
    config = cluster_for(lab, timeouts=FAST, watch=watch, **cluster)
    await down(config)
    try:
        async with slack_bot(slack, config, settings(tmp_path)):
            await slack.send_slash_command(ALICE, CH, "up")
            ready = await slack.wait_for(
                lambda c: c.method == "chat.postMessage" and header(c) == "✅ Ready", 120
            )
            thread = ready.params["thread_ts"]
            await fault(lab)
            failed = await slack.wait_for(
                lambda c: (
                    c.method == "chat.postMessage"
                    and c.params.get("thread_ts") == thread
                    and header(c) == "✘ Serving failed"
                ),
                60,
            )
        return block_text(failed)
    finally:
        await down(config)


async def test_a_worker_rebooted_while_serving_is_told_in_the_thread(slack, lab, tmp_path):
    text = await failure_in_the_thread(slack, lab, tmp_path, reboot_the_worker)
    worker = lab.nodes[1].name
    assert f"{worker} rebooted while serving (its boot id changed; up 12 s)" in text, text
    assert "journalctl -k -b -1" in text and "power adapter" in text, text


async def test_a_gpu_fallen_off_the_bus_is_told_in_the_thread(slack, lab, tmp_path):
    text = await failure_in_the_thread(slack, lab, tmp_path, the_workers_gpu_falls_off_the_bus)
    worker = lab.nodes[1].name
    assert f"GPU error on {worker}: Xid 79, GPU has fallen off the bus" in text, text
    assert f"power-cycle {worker}" in text, text


async def test_a_gpu_held_back_by_heat_is_told_in_the_thread(slack, lab, tmp_path, worker_restored):
    await asyncio.to_thread(lab_api.set_gpu, 1, reasons=0x40, clocks_sm=1100, temperature=97)

    async def nothing(lab) -> None:
        return None

    text = await failure_in_the_thread(
        slack,
        lab,
        tmp_path,
        nothing,
        env={"SPARK_EMU_FAULT": "serving_hang", "SPARK_EMU_FAULT_AFTER_S": "5"},
        watch=QUICK_WATCH.model_copy(update={"memory_low_gib": 0}),
    )
    assert f"the GPU on {worker_restored.name} is held back by heat (HW thermal slowdown" in text
    assert "vents" in text, text


async def cli_watch_failure(lab, fault: Callable[[object], Awaitable[None]]) -> str:
    """`spark-bot watch --config configs/lab.yaml` on a cluster `up` launched; `fault(lab)` once
    it watches: what it printed (it must exit 1)."""
    await collect(controller_for(lab).down())
    assert isinstance((await collect(controller_for(lab).up()))[-1], Ready)
    process = await asyncio.create_subprocess_exec(
        *(sys.executable, "-m", "bot.cli", "watch", "--config", CONFIG),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    assert process.stdout is not None
    printed = []
    try:
        async with asyncio.timeout(60):
            while "watching" not in (line := (await process.stdout.readline()).decode()):
                assert line, "the watch ended before it watched"
                printed.append(line)
        await fault(lab)
        out, _ = await asyncio.wait_for(process.communicate(), 90)
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    assert process.returncode == 1, out
    return "".join(printed) + out.decode()


async def test_a_worker_rebooted_while_serving_is_told_by_the_cli(lab):
    try:
        out = await cli_watch_failure(lab, reboot_the_worker)
    finally:
        await collect(controller_for(lab).down())
    worker = lab.nodes[1].name
    assert f"{worker} rebooted while serving (its boot id changed; up 12 s)" in out, out
    assert "journalctl -k -b -1" in out


async def test_a_gpu_fallen_off_the_bus_is_told_by_the_cli(lab):
    try:
        out = await cli_watch_failure(lab, the_workers_gpu_falls_off_the_bus)
    finally:
        await collect(controller_for(lab).down())
    assert f"GPU error on {lab.nodes[1].name}: Xid 79, GPU has fallen off the bus" in out, out
