"""The lab node's GPU tool and kernel log, held against the real ones' formats (issue 25, item 5):
nvidia-smi's clocks and NVML's clock event reasons as spark-bot asks them (and memory N/A, as
a GB10 answers), dmesg's and journalctl -k's lines as the kernel log reader parses them, and
what each says to a user without the rights (util-linux dmesg's error, journalctl's hint)."""

from cluster.nodes import gpu_clocks, kernel_log

from .test_tools import run

# The bits of nvmlClocksEventReasons (https://docs.nvidia.com/deploy/nvml-api/group__nvmlClocksEventReasons.html)
NVML_REASONS = {
    0x1: "GpuIdle",
    0x2: "ApplicationsClocksSetting",
    0x4: "SwPowerCap",
    0x8: "HwSlowdown",
    0x10: "SyncBoost",
    0x20: "SwThermalSlowdown",
    0x40: "HwThermalSlowdown",
    0x80: "HwPowerBrakeSlowdown",
    0x100: "DisplayClockSetting",
}


def test_the_reasons_spark_bot_decodes_are_nvmls_bits():
    assert set(gpu_clocks.REASONS) == set(NVML_REASONS)


def test_nvidia_smi_answers_spark_bots_query_as_a_gb10_does(tmp_path):
    r = run(gpu_clocks.argv())
    assert r.returncode == 0, r.stdout
    [gpu] = gpu_clocks.parse(r.stdout)
    assert gpu.verdict() == "idle" and gpu.sm_mhz == 208 and gpu.max_sm_mhz == 3003
    assert r.stdout.strip() == "0, 208, 3003, 0x0000000000000001, 42, 4.12", "16 hex digits"
    query = "--query-gpu=clocks_event_reasons.active,clocks.sm,memory.used"
    header = run(["nvidia-smi", query, "--format=csv"])
    assert (
        header.stdout.splitlines()[0]
        == "clocks_event_reasons.active, clocks.sm [MHz], memory.used [MiB]"
    )
    assert header.stdout.splitlines()[1].endswith(", [N/A]"), "a GB10 has no memory of its own"
    old = run(gpu_clocks.argv(gpu_clocks.OLD_REASONS_FIELD))
    assert old.stdout == r.stdout, "the older name of the same field"


def test_the_lab_sets_a_gpu_held_back(tmp_path):
    state = tmp_path / "gpu.json"
    state.write_text(
        '{"clocks.sm": 1100, "clocks_event_reasons.active": 96, "temperature.gpu": 97}'
    )
    r = run(gpu_clocks.argv(), env={"SPARK_LAB_GPU_STATE": str(state)})
    [gpu] = gpu_clocks.parse(r.stdout)
    assert gpu.verdict() == "thermal"
    assert gpu.reason_names() == ["SW thermal slowdown", "HW thermal slowdown"]


def test_dmesg_and_journalctl_print_the_nodes_kernel_log_as_the_reader_parses_it(tmp_path):
    log = tmp_path / "kernel.log"
    xid = "NVRM: Xid (PCI:000f:01:00): 79, GPU has fallen off the bus."
    log.write_text(f"0.5\tBooting Linux\n5120.123456\t{xid}\n")
    env = {"SPARK_LAB_KERNEL_LOG": str(log)}
    dmesg = run(["dmesg"], env=env)
    assert dmesg.stdout.splitlines() == ["[    0.500000] Booting Linux", f"[ 5120.123456] {xid}"]
    journal = run(list(kernel_log.JOURNAL_ARGV), env=env)
    assert journal.returncode == 0
    assert journal.stdout.splitlines()[1].endswith(f" kernel: {xid}")
    for out in (dmesg.stdout, journal.stdout):
        assert kernel_log.parse(out) == [kernel_log.KernelLine(5120.123456, xid)]
    refused = run(["journalctl", "-k", "--since", "today"], env=env)
    assert refused.returncode == 1 and "unrecognized option '--since'" in refused.stderr


def test_a_kernel_log_the_user_may_not_read(tmp_path):
    flag = tmp_path / "restricted"
    flag.write_text("")
    env = {"SPARK_LAB_KERNEL_LOG_RESTRICTED": str(flag)}
    dmesg = run(["dmesg"], env=env)
    assert dmesg.returncode == 1
    assert dmesg.stderr == "dmesg: read kernel buffer failed: Operation not permitted\n"
    journal = run(list(kernel_log.JOURNAL_ARGV), env=env)
    assert journal.returncode == 0 and journal.stdout == "-- No entries --\n"
    assert "not seeing messages from other users and the system" in journal.stderr
    assert "'adm', 'systemd-journal'" in journal.stderr
