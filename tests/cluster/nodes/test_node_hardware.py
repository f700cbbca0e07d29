"""A node that dropped out for hardware reasons, as the probe reads it: the boot id against the
launch's, the kernel log's Xid and AER lines (with the rights it takes), and the GPU's clocks
and throttle reasons; held against the real formats (the lines quoted are real ones or the
kernel's and NVIDIA's format strings filled in)."""

from __future__ import annotations

import pytest

from cluster.diagnosis.xids import XIDS, xid
from cluster.nodes import gpu_clocks, kernel_log
from cluster.nodes.boot import Boot, from_labels, labels, parse_boot

# A real Xid 79 as a kernel journal shows it (NVIDIA/open-gpu-kernel-modules#1151), in dmesg's
# and journalctl -o short-monotonic's stamps.
XID_79 = "NVRM: Xid (PCI:0000:2b:00): 79, GPU has fallen off the bus."
XID_13 = (
    "NVRM: Xid (PCI:0000:cb:00): 13, pid='<unknown>', name=<unknown>, Graphics SM Warp Exception "
    "on (GPC 7, TPC 7, SM 0): Illegal Instruction Parameter"
)
# drivers/pci/pcie/aer.c (02a06f5f) aer_print_port_info and aer_print_error, pr_fmt "AER: "
AER_FATAL_PORT = "pcieport 0000:00:00.0: AER: Uncorrectable (Fatal) error received: 0000:01:00.0"
AER_FATAL = (
    "nvidia 0000:01:00.0: AER: PCIe Bus Error: severity=Uncorrectable (Fatal), "
    "type=Transaction Layer, (Requester ID)"
)
AER_CORRECTED_OLD = "pcieport 0000:00:1c.5: AER: Corrected error received: 0000:03:00.0"
AER_CORRECTED = (
    "pcieport 0000:00:1c.5: AER: PCIe Bus Error: severity=Corrected, type=Physical Layer, "
    "(Receiver ID)"
)
OOM = (
    "Out of memory: Killed process 4242 (python3) total-vm:130000000kB, anon-rss:120000000kB, "
    "file-rss:0kB, shmem-rss:0kB, UID:0 pgtables:240000kB oom_score_adj:0"
)


def test_dmesg_and_journalctl_lines_are_read_alike_and_only_those_that_matter_kept():
    dmesg = f"[    0.000000] Booting Linux on physical CPU 0x0\n[ 5120.123456] {XID_79}\n"
    journal = (
        "[    0.000000] spark-1 kernel: Booting Linux\n"
        f"[ 5120.123456] spark-1 kernel: {XID_79}\n"
        f"[ 5121.000001] spark-1 kernel: {AER_FATAL}\n"
    )
    assert kernel_log.parse(dmesg) == [kernel_log.KernelLine(5120.123456, XID_79)]
    log = kernel_log.KernelLog(kernel_log.parse(journal), "journalctl -k")
    [found] = log.xids()
    assert (found.code, found.device) == (79, "PCI:0000:2b:00")
    [aer] = log.aer()
    assert aer.fatal and not aer.corrected and aer.device == "nvidia 0000:01:00.0"


def test_only_lines_after_the_launch_count():
    text = f"[  100.000000] {XID_79}\n[  300.500000] {XID_13}\n"
    assert [line.text for line in kernel_log.parse(text, since_s=200.0)] == [XID_13]
    assert len(kernel_log.parse(text, since_s=None)) == 2


@pytest.mark.parametrize(
    ("line", "fatal", "corrected"),
    [
        (AER_FATAL_PORT, True, False),
        (AER_FATAL, True, False),
        (AER_CORRECTED_OLD, False, True),
        (AER_CORRECTED, False, True),
        (
            "pcieport 0000:00:00.0: AER: Uncorrected (Non-Fatal) error received: 0000:01:00.0",
            False,
            False,
        ),
    ],
)
def test_aer_severities_in_both_kernels_spellings(line, fatal, corrected):
    log = kernel_log.KernelLog(kernel_log.parse(f"[ 12.000000] {line}\n"))
    [aer] = log.aer()
    assert (aer.fatal, aer.corrected) == (fatal, corrected)


def test_the_oom_killers_line_is_an_oom_line_not_a_hardware_one():
    log = kernel_log.KernelLog(kernel_log.parse(f"[ 12.000000] {OOM}\n"))
    assert log.oom() == [OOM] and log.xids() == [] and log.aer() == []


def test_a_flood_of_kernel_lines_keeps_a_bounded_tail():
    text = "".join(f"[ {i}.000000] {XID_13}\n" for i in range(1, 5000))
    kept = kernel_log.parse(text)
    assert len(kept) == kernel_log.KEPT_LINES and kept[-1].seconds == 4999.0


def test_xid_table_knows_the_hardware_codes_from_nvidias_catalog():
    assert xid(79).description == "GPU has fallen off the bus" and xid(79).kind == "hardware"
    assert xid(79).resolution == "RESTART_BM"
    assert xid(48).kind == "hardware" and xid(95).kind == "hardware"
    assert xid(13).kind == "application" and xid(31).kind == "application"
    assert xid(63).kind == "informational"
    assert xid(9999).kind == "hardware" and "9999" in xid(9999).description
    assert all(code == entry.code for code, entry in XIDS.items())


# nvidia-smi --query-gpu=<gpu_clocks.FIELDS> --format=csv,noheader,nounits: NVML's reason bits
# (nvmlClocksEventReasons): 0x1 idle, 0x4 SW power cap, 0x8 HW slowdown, 0x20 SW thermal,
# 0x40 HW thermal, 0x80 HW power brake.
@pytest.mark.parametrize(
    ("line", "verdict"),
    [
        ("0, 2405, 3003, 0x0000000000000000, 62, 45.12", "ok"),
        ("0, 208, 3003, 0x0000000000000001, 42, 4.12", "idle"),
        ("0, 1100, 3003, 0x0000000000000060, 97, 60.00", "thermal"),
        ("0, 900, 3003, 0x0000000000000080, 70, 88.00", "power"),
        ("0, 1500, 3003, 0x0000000000000004, 70, 88.00", "power"),
        ("0, 850, 3003, 0x0000000000000000, 55, 18.00", "low_clocks"),
        # a GPU under load at its power cap, at full clocks: nothing holds it back
        ("0, 2405, 3003, 0x0000000000000004, 71, 99.80", "ok"),
        ("0, 2800, 3003, 0x0000000000000020, 85, 60.00", "ok"),
        # clocks not told: a hardware bit still says it, the routine SW power cap does not
        ("0, [N/A], [N/A], 0x0000000000000080, 70, 88.00", "power"),
        ("0, [N/A], [N/A], 0x0000000000000004, 70, 88.00", "ok"),
        ("0, [N/A], [N/A], [N/A], [N/A], [N/A]", "unknown"),
    ],
)
def test_clock_reasons_say_heat_power_or_a_gpu_left_at_low_clocks(line, verdict):
    [gpu] = gpu_clocks.parse(line)
    assert gpu.verdict() == verdict


def test_the_query_never_asks_memory_a_gb10_answers_na():
    argv = gpu_clocks.argv()
    assert not any("memory" in a for a in argv)
    assert "clocks_event_reasons.active" in argv[1]
    assert "clocks_throttle_reasons.active" in gpu_clocks.argv(gpu_clocks.OLD_REASONS_FIELD)[1]
    with pytest.raises(ValueError, match="not nvidia-smi's answer"):
        gpu_clocks.parse("NVIDIA GB10, [N/A], [N/A]")


def test_boot_id_and_uptime_as_linux_writes_them_and_as_the_launch_labels_them():
    boot = parse_boot("7c3a6a43-5a4b-4f2e-9d1e-0a1b2c3d4e5f\n", "5123.45 40000.12\n")
    assert boot == Boot("7c3a6a43-5a4b-4f2e-9d1e-0a1b2c3d4e5f", 5123.45)
    assert from_labels(labels(boot)) == boot
    assert from_labels({}) is None
    with pytest.raises(ValueError, match="not a UUID"):
        parse_boot("garbage", "1.0 1.0")
