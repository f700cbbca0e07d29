"""The probe's node checks (issue 25, item 5) on nodes that answer from tables: a reboot known
from the boot id its launch recorded (and the kernel's OOM count that went back with it), an
Xid or AER line since the launch, the kernel log read where the SSH user may (journalctl,
then dmesg, else why not), a GPU held back; and which failures they may replace: a symptom's
or an unexplained death's cause, or a CUDA error's and an NCCL watchdog's (a dead node behind
them), never the OOM killer's or Ray's memory monitor's."""

from __future__ import annotations

import asyncio

import pytest

from cluster.diagnosis import postmortem
from cluster.diagnosis.failures import (
    FABRIC_LINK_DOWN,
    GPU_LOW_CLOCKS,
    GPU_THROTTLED,
    NODE_REBOOTED,
    SIGNATURES,
)
from cluster.diagnosis.postmortem import Finding, ProbeReport, amend, needs_probe, probe
from cluster.errors import NodeTimedOut, NodeUnreachable
from cluster.nodes import ClusterConnection, CommandResult
from cluster.nodes.boot import BOOT_ID, UPTIME, Boot
from cluster.progress.checkpoints import SERVING
from cluster.progress.reporter import Reporter
from cluster.resources.memory import MemoryReading, MemoryWatch
from tests.cluster.nodes.test_node_hardware import AER_FATAL, XID_13, XID_79
from tests.cluster.test_serving_watch import CONFIG, HEAD, WORKER, fake_node

LAUNCHED = Boot("11111111-2222-4333-8444-555555555555", 1000.0)
REBOOTED = "99999999-8888-4777-8666-555555555555"
IDLE_GPU = CommandResult(0, "0, 208, 3003, 0x0000000000000001, 42, 4.12\n", "")
WITHHELD = (
    "Hint: You are currently not seeing messages from other users and the system.\n"
    "      Users in groups 'adm', 'systemd-journal' can see all messages.\n"
)
DMESG_REFUSED = CommandResult(1, "", "dmesg: read kernel buffer failed: Operation not permitted\n")


def node(name, *, boot_id=LAUNCHED.boot_id, uptime=5000.0, journal="", gpu=IDLE_GPU, **more):
    found = fake_node(name, link="up", reach=True)
    found.files[BOOT_ID] = f"{boot_id}\n"
    found.files[UPTIME] = f"{uptime:.2f} 100.00\n"
    found.commands["journalctl"] = CommandResult(0, journal, "")
    found.commands["nvidia-smi"] = gpu
    found.commands.update(more)
    return found


async def probed(head, worker, *, memory=None):
    connection = ClusterConnection(CONFIG)
    connection.nodes = {HEAD: head, WORKER: worker}
    boots = {HEAD: LAUNCHED, WORKER: LAUNCHED}
    return await probe(CONFIG, connection, memory=memory, boots=boots)


def failed_with(signature: str, summary: str = "x"):
    return Reporter().failed(SERVING, summary, cause="c", fix="f", signature=signature)


async def test_a_boot_id_other_than_the_launchs_is_a_reboot_and_outranks_what_follows_from_it():
    memory = MemoryWatch(6)
    for count in (3, 0):  # the kernel's OOM count is since boot: it went back with the reboot
        memory.observe(MemoryReading(WORKER, 0.0, 10, 10, count))
    worker = node(WORKER, boot_id=REBOOTED, uptime=42.0)
    worker.files["/proc/vmstat"] = "oom_kill 0\n"
    report = await probed(node(HEAD), worker, memory=memory)
    cause = report.cause()
    assert cause is not None and cause.failure is not None and cause.node == WORKER
    assert cause.failure.id == "node_rebooted", report.lines()
    assert cause.failure.render(cause.values)[0] == (
        f"{WORKER} rebooted while serving (its boot id changed; up 42 s)"
    )
    text = "\n".join(report.lines())
    assert f"the kernel's OOM-kill count on {WORKER} went back" in text, "no negative OOM kills"
    assert "OOM kill(s)" not in text
    assert "boot: the same boot as at launch (up 83 min)" in text, "the head's"


async def test_an_xid_after_the_launch_is_named_and_one_before_it_is_not():
    journal = (
        f"[  900.000000] {WORKER} kernel: {XID_79}\n[ 1500.500000] {WORKER} kernel: {XID_13}\n"
    )
    report = await probed(node(HEAD), node(WORKER, journal=journal))
    cause = report.cause()
    assert cause is not None and cause.failure is not None
    assert cause.failure.id == "gpu_application_xid", "the 79 came before the launch (900 s)"
    assert cause.values["code"] == "13"

    journal += f"[ 1600.000000] {WORKER} kernel: {XID_79}\n"
    report = await probed(node(HEAD), node(WORKER, journal=journal))
    cause = report.cause()
    assert cause is not None and cause.failure is not None
    assert cause.failure.id == "gpu_xid" and cause.values["code"] == "79", "hardware first"
    assert "power-cycle" in cause.failure.render(cause.values)[2]


async def test_a_fatal_aer_error_is_named_and_corrected_ones_alone_are_not():
    corrected = (
        "[ 1500.000000] h kernel: pcieport 0000:00:1c.5: AER: Corrected error received: "
        "0000:03:00.0\n"
    )
    report = await probed(node(HEAD), node(WORKER, journal=corrected))
    assert report.cause(faults_only=True) is None  # (the fake Ray sees 1 node of 2)
    assert "1 PCIe AER line(s) (1 corrected)" in "\n".join(report.lines())
    report = await probed(node(HEAD), node(WORKER, journal=f"[ 1501.0] h kernel: {AER_FATAL}\n"))
    cause = report.cause()
    assert cause is not None and cause.failure is not None and cause.failure.id == "pcie_aer_error"


async def test_the_kernel_log_is_read_with_dmesg_where_journalctl_withholds_it():
    worker = node(
        WORKER,
        journalctl=CommandResult(0, "-- No entries --\n", WITHHELD),
        dmesg=CommandResult(0, f"[ 1500.000000] {XID_79}\n", ""),
    )
    report = await probed(node(HEAD), worker)
    cause = report.cause()
    assert cause is not None and cause.failure is not None and cause.failure.id == "gpu_xid"
    assert "dmesg since the launch: 1 Xid line(s)" in "\n".join(report.lines())


async def test_a_kernel_log_neither_tool_may_read_says_so_and_what_right_it_takes():
    worker = node(
        WORKER, journalctl=CommandResult(0, "-- No entries --\n", WITHHELD), dmesg=DMESG_REFUSED
    )
    report = await probed(node(HEAD), worker)
    text = "\n".join(report.lines())
    assert f"kernel log: not readable on {WORKER}" in text
    assert "not seeing messages from other users" in text and "Operation not permitted" in text
    assert "adm group" in text
    assert report.cause(faults_only=True) is None, "an unread log is no finding against it"


@pytest.mark.parametrize(
    ("answer", "row"),
    [
        ("0, 1100, 3003, 0x0000000000000040, 97, 60.00\n", "gpu_throttled"),
        ("0, 850, 3003, 0x0000000000000000, 55, 18.00\n", "gpu_low_clocks"),
    ],
)
async def test_a_gpu_held_back_is_named_and_an_idle_one_is_not(answer, row):
    report = await probed(node(HEAD), node(WORKER, gpu=CommandResult(0, answer, "")))
    cause = report.cause()
    assert cause is not None and cause.failure is not None and cause.failure.id == row
    assert (await probed(node(HEAD), node(WORKER))).cause(faults_only=True) is None


async def test_an_older_driver_is_asked_by_the_reasons_old_name():
    refused = CommandResult(
        2, 'Field "clocks_event_reasons.active" is not a valid field to query.\n\n', ""
    )

    class OldDriver(dict):
        calls = 0

        def get(self, key, default=None):
            if key != "nvidia-smi":
                return super().get(key, default)
            OldDriver.calls += 1
            return refused if OldDriver.calls == 1 else IDLE_GPU

    worker = node(WORKER)
    worker.commands = OldDriver(worker.commands)
    report = await probed(node(HEAD), worker)
    assert "clocks_throttle_reasons.active" in " ".join(worker.ran[-1])
    assert "GPU 0: SM 208 of 3003 MHz" in "\n".join(report.lines())


def test_which_failures_a_nodes_hardware_may_explain():
    for probed_too in (
        "unrecognised",
        "nccl_watchdog_timeout",
        "no_gpu_platform",
        "ray_node_marked_dead",
    ):
        if probed_too != "unrecognised":
            assert any(row.id == probed_too for row in SIGNATURES), probed_too
        assert needs_probe(failed_with(probed_too), SIGNATURES), probed_too
    for not_probed in ("ray_memory_monitor_killed", "host_oom_killed", "cuda_oom"):
        assert any(row.id == not_probed for row in SIGNATURES), not_probed
        assert not needs_probe(failed_with(not_probed), SIGNATURES), not_probed


def test_a_named_cause_gives_way_to_a_nodes_hardware_finding_only():
    watchdog = failed_with("nccl_watchdog_timeout", "NCCL collective hung (watchdog timeout)")
    link = Finding("fabric link", WORKER, "enp1s0f1np1 is down", None)
    down = Finding(
        "fabric link",
        WORKER,
        "down",
        FABRIC_LINK_DOWN,
        {"interface": "enp1s0f1np1", "node": WORKER, "state": "down"},
    )
    kept = amend(watchdog, ProbeReport([link, down]), SIGNATURES)
    assert kept.signature == "nccl_watchdog_timeout" and kept.summary == watchdog.summary
    assert kept.evidence.startswith("probed after the failure:")
    rebooted = Finding(
        "boot", WORKER, "rebooted", NODE_REBOOTED, {"node": WORKER, "uptime": "40 s"}
    )
    amended = amend(watchdog, ProbeReport([down, rebooted]), SIGNATURES)
    assert amended.signature == "node_rebooted"
    assert amended.summary == (
        "NCCL collective hung (watchdog timeout); the probe found: "
        f"{WORKER} rebooted while serving (its boot id changed; up 40 s)"
    )
    assert "(the log showed: c)" in amended.cause


def test_a_gpu_held_back_is_evidence_beside_a_named_cause_never_its_replacement():
    watchdog = failed_with("nccl_watchdog_timeout", "NCCL collective hung (watchdog timeout)")
    throttled = Finding(
        "gpu clocks",
        WORKER,
        "GPU 0: SM 1100 of 3003 MHz (HW thermal slowdown)",
        GPU_THROTTLED,
        {"node": WORKER, "kind": "heat", "reasons": "HW thermal slowdown", "clocks": "1100"},
    )
    slow = Finding(
        "gpu clocks", WORKER, "GPU 0: SM 850 of 3003 MHz", GPU_LOW_CLOCKS, {"node": WORKER}
    )
    kept = amend(watchdog, ProbeReport([throttled, slow]), SIGNATURES)
    assert kept.signature == "nccl_watchdog_timeout" and kept.summary == watchdog.summary
    assert "HW thermal slowdown" in kept.evidence and "SM 850 of 3003 MHz" in kept.evidence
    # the same findings do explain a death the log did not explain
    hung = amend(failed_with("serving_hung"), ProbeReport([slow, throttled]), SIGNATURES)
    assert hung.signature == "gpu_throttled"


async def test_a_node_whose_session_went_silent_is_not_answering_without_a_reconnect():
    silent = node(WORKER)

    async def dropped(path, *, timeout, limit=32768):  # a host off or hung drops the packets
        raise NodeTimedOut(WORKER, f"reading {path} took over {timeout:g} s", "is it up?")

    silent.read_file = dropped
    connection = ClusterConnection(CONFIG)
    connection.nodes = {HEAD: node(HEAD), WORKER: silent}
    reopened: list[str] = []

    async def reopen(name):
        reopened.append(name)
        raise AssertionError(
            "a silent node is not connected to again: it would wait out the budget"
        )

    connection.reopen = reopen
    report = await probe(CONFIG, connection, boots={HEAD: LAUNCHED, WORKER: LAUNCHED})
    cause = report.cause(faults_only=True)
    assert cause is not None and cause.failure is not None
    assert cause.failure.id == "node_not_answering" and cause.node == WORKER
    assert reopened == []


async def test_a_node_whose_connection_broke_is_opened_again_within_a_commands_time(
    monkeypatch,
):
    monkeypatch.setattr(postmortem, "COMMAND_S", 0.5)
    broken = node(WORKER)

    async def refused(path, *, timeout, limit=32768):
        raise NodeUnreachable(WORKER, "the connection broke", "is it up?")

    broken.read_file = refused
    connection = ClusterConnection(CONFIG)
    connection.nodes = {HEAD: node(HEAD), WORKER: broken}
    hung = asyncio.Event()

    async def reopen(name):
        await hung.wait()  # a SYN nobody answers: never set

    connection.reopen = reopen
    report = await probe(CONFIG, connection, boots={HEAD: LAUNCHED, WORKER: LAUNCHED})
    cause = report.cause(faults_only=True)
    assert cause is not None and cause.failure is not None
    assert cause.failure.id == "node_not_answering" and cause.node == WORKER
    assert "no new SSH connection within 0.5 s" in "\n".join(report.lines())
