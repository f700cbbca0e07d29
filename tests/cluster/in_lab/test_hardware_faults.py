"""Nodes that drop out for hardware reasons while serving (issue 25, item 5), on the lab's nodes:
a worker that reboots (its boot id changes, its uptime starts again, its containers die), a GPU
that falls off the bus and a PCIe link that fails (the kernel's lines in the worker's kernel
log, then its rank's container dies), a GPU held back by heat, and one left at low clocks (the
worker's nvidia-smi, under a serving hang). The probe names each, with its fix, and tells it
from the OOM killer's and the fabric's failures; a kernel log the SSH user may not read is
said to be that, with the right it takes."""

from __future__ import annotations

import asyncio

import pytest

from cluster.config import WatchConfig
from cluster.events import Failed, Progress, Ready
from lab import api as lab_api
from testkit.lab_cluster import collect, controller_for
from tests.cluster.test_faults import lab_docker_kill
from tests.cluster.test_node_faults import QUICK_WATCH, next_failure, watched

pytestmark = [pytest.mark.lab, pytest.mark.timeout(240)]

# A real Xid 79 (NVIDIA/open-gpu-kernel-modules#1151) on a GB10's bus address, with the line
# the driver prints after it
XID_79 = (
    "NVRM: Xid (PCI:000f:01:00): 79, GPU has fallen off the bus.",
    "NVRM: GPU 000f:01:00.0: GPU has fallen off the bus.",
)
# drivers/pci/pcie/aer.c's lines for a fatal error on the GPU's link
AER_FATAL = (
    "pcieport 000f:00:00.0: AER: Uncorrectable (Fatal) error received: 000f:01:00.0",
    "nvidia 000f:01:00.0: AER: PCIe Bus Error: severity=Uncorrectable (Fatal), "
    "type=Transaction Layer, (Requester ID)",
    "nvidia 000f:01:00.0: AER:   device [10de:2e12] error status/mask=00004000/00000000",
)
CONTAINER = "vllm_lab"  # configs/lab.yaml's
NO_MEMORY_WARNINGS = WatchConfig(memory_low_gib=0)  # the lab's nodes share the host's memory


async def failure_after(clean, fault, *, env=None, watch=NO_MEMORY_WARNINGS) -> Failed:
    """Launch, watch, do `fault()` (in a thread) once the watch runs: the failure reported."""
    controller = controller_for(clean, env=env or {}, watch=watch)
    assert isinstance((await collect(controller.up()))[-1], Ready)
    async with watched(controller, health_interval=1) as (next_event, _):
        assert (await next_event(30)).phase == "watch"
        await fault()
        return await next_failure(next_event, 60)


@pytest.fixture
def worker_restored(clean):
    """The worker's kernel log readable and its GPU idle again after the test."""
    yield clean.nodes[1]
    lab_api.set_kernel_log_readable(1, True)
    lab_api.set_gpu(1)


async def test_a_worker_that_reboots_while_serving_is_named_from_its_boot_id(clean):
    worker = clean.nodes[1].name
    before = lab_api.node_boot_id(1)

    async def reboot():
        assert await asyncio.to_thread(lab_api.reboot_node, 1) != before

    failed = await failure_after(clean, reboot)
    assert failed.signature == "node_rebooted", failed
    assert f"{worker} rebooted while serving (its boot id changed; up 12 s)" in failed.summary
    assert f"boot id {lab_api.node_boot_id(1)} is not the launch's {before}" in failed.evidence
    assert "the same boot as at launch" in failed.evidence, "the head did not reboot"
    assert "journalctl -k -b -1" in failed.fix and "power adapter" in failed.fix
    assert "fwupdmgr" in failed.fix, "firmware"


async def test_a_gpu_fallen_off_the_bus_is_named_from_the_kernel_log(clean, worker_restored):
    worker = worker_restored.name

    async def gpu_lost():
        await asyncio.to_thread(lab_api.add_kernel_lines, 1, *XID_79)
        await lab_docker_kill(clean, 1, CONTAINER)  # its rank died with the GPU

    failed = await failure_after(clean, gpu_lost)
    assert failed.signature == "gpu_xid", failed
    assert f"GPU error on {worker}: Xid 79, GPU has fallen off the bus" in failed.summary
    assert "ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS" in failed.cause
    assert XID_79[0] in failed.evidence
    assert "journalctl -k since the launch: 1 Xid line(s)" in failed.evidence
    assert f"power-cycle {worker}" in failed.fix and "nvidia-bug-report.sh" in failed.fix


async def test_a_fatal_pcie_error_is_named_from_the_kernel_log(clean, worker_restored):
    worker = worker_restored.name

    async def link_failed():
        await asyncio.to_thread(lab_api.add_kernel_lines, 1, *AER_FATAL)
        await lab_docker_kill(clean, 1, CONTAINER)

    failed = await failure_after(clean, link_failed)
    assert failed.signature == "pcie_aer_error", failed
    assert f"PCIe error on {worker}: Uncorrectable (Fatal) on nvidia 000f:01:00.0" in failed.summary
    assert "power-cycle" in failed.fix and "fwupdmgr" in failed.fix


async def test_a_kernel_line_from_before_the_launch_is_not_blamed(clean, worker_restored):
    """An Xid the worker logged before this launch is old news: the death is not put on it."""
    await asyncio.to_thread(lab_api.add_kernel_lines, 1, *XID_79)

    async def container_killed():
        await lab_docker_kill(clean, 1, CONTAINER)

    failed = await failure_after(clean, container_killed)
    assert failed.signature not in ("gpu_xid", "node_rebooted"), failed
    assert "journalctl -k since the launch: no GPU Xid or PCIe AER error" in failed.evidence


@pytest.mark.parametrize(
    ("gpu", "kind", "shown"),
    [
        ({"reasons": 0x40, "clocks_sm": 1100, "temperature": 97}, "heat", "HW thermal slowdown"),
        ({"reasons": 0x80, "clocks_sm": 900, "power": 31.5}, "power", "HW power brake slowdown"),
    ],
)
async def test_a_gpu_held_back_by_heat_or_power_is_named_under_a_serving_hang(
    clean, worker_restored, gpu, kind, shown
):
    worker = worker_restored.name
    await asyncio.to_thread(lab_api.set_gpu, 1, **gpu)
    env = {"SPARK_EMU_FAULT": "serving_hang", "SPARK_EMU_FAULT_AFTER_S": "5"}

    async def nothing():
        return None

    failed = await failure_after(clean, nothing, env=env, watch=QUICK_WATCH)
    assert failed.signature == "gpu_throttled", failed
    assert f"the GPU on {worker} is held back by {kind} ({shown}" in failed.summary, failed
    assert "serving hung" in failed.summary, "the symptom stays in the summary"
    assert f"SM {gpu['clocks_sm']} of 3003 MHz" in failed.summary
    fix = "vents" if kind == "heat" else "power adapter"
    assert fix in failed.fix, failed.fix


async def test_a_gpu_left_at_low_clocks_is_named_under_a_serving_hang(clean, worker_restored):
    worker = worker_restored.name
    await asyncio.to_thread(lab_api.set_gpu, 1, reasons=0x0, clocks_sm=850, power=18)
    env = {"SPARK_EMU_FAULT": "serving_hang", "SPARK_EMU_FAULT_AFTER_S": "5"}

    async def nothing():
        return None

    failed = await failure_after(clean, nothing, env=env, watch=QUICK_WATCH)
    assert failed.signature == "gpu_low_clocks", failed
    assert f"the GPU on {worker} is left at low clocks (SM 850 of 3003 MHz" in failed.summary
    assert "nvidia-smi -rgc" in failed.fix
    assert "memory" not in " ".join(
        line for line in failed.evidence.splitlines() if "gpu clocks:" in line
    ), "nothing of nvidia-smi's memory (N/A on a GB10) is read"


async def test_a_kernel_log_the_ssh_user_may_not_read_is_said_with_the_right_it_takes(
    clean, worker_restored
):
    worker = worker_restored.name
    await asyncio.to_thread(lab_api.set_kernel_log_readable, 1, False)

    async def gpu_lost():
        await asyncio.to_thread(lab_api.add_kernel_lines, 1, *XID_79)
        await lab_docker_kill(clean, 1, CONTAINER)

    failed = await failure_after(clean, gpu_lost)
    assert failed.signature != "gpu_xid", "an unreadable log shows no Xid"
    assert f"kernel log: not readable on {worker}" in failed.evidence, failed.evidence
    assert "not seeing messages from other users and the system" in failed.evidence
    assert "dmesg: read kernel buffer failed: Operation not permitted" in failed.evidence
    assert "adm group" in failed.evidence


async def test_a_worker_that_went_down_and_stays_down_is_named_as_not_answering(clean):
    """Its containers dead and no SSH to it (as a node that powered off under load is until it
    is back): the probe opens it again once, and says it does not answer at all."""
    worker = clean.nodes[1].name

    async def power_off():
        await asyncio.to_thread(lab_api.drop_ssh_sessions, 1)
        await asyncio.to_thread(lab_api.stop_sshd, 1)  # before the bot's reconnect, 1 s later
        await lab_docker_kill(clean, 1, CONTAINER)

    controller = controller_for(clean, watch=NO_MEMORY_WARNINGS)
    assert isinstance((await collect(controller.up()))[-1], Ready)
    try:
        async with watched(controller, health_interval=1) as (next_event, _):
            assert (await next_event(30)).phase == "watch"
            await power_off()
            lost = await next_event(30)  # its streams broke while the API still served
            assert isinstance(lost, Progress) and lost.phase == "monitoring_lost", lost
            failed = await next_failure(next_event, 90)  # the head's rank goes when Ray sees
    finally:
        await asyncio.to_thread(lab_api.start_sshd, 1)
    assert failed.signature == "node_not_answering", failed
    assert f"{worker} does not answer at all" in failed.summary, failed.summary
    assert "journalctl -k -b -1" in failed.fix
