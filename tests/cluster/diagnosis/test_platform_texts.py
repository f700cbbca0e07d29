"""Failure texts name the GB10, sm_121, aarch64 or NCCL 2.28 on ARM only when the log shows them
(cluster/diagnosis/platform.py); otherwise they speak of the GPU the log saw."""

from __future__ import annotations

import re

import pytest

from cluster.diagnosis.engine import diagnose
from cluster.diagnosis.failures import (
    ROWS_WITHOUT_A_LOG_LINE,
    SIGNATURES,
    KnownFailure,
    cluster_words,
)
from cluster.diagnosis.platform import PlatformSeen
from tests.cluster.diagnosis.test_failure_table import CALL_SITE_VALUES

OUR_PLATFORM = re.compile(r"GB10|sm_?121|aarch64|\bARM\b|2\.28|2\.29|\bSparks?\b")
ENGINE = "(EngineCore_DP0 pid=89) "


@pytest.mark.parametrize("row", SIGNATURES + ROWS_WITHOUT_A_LOG_LINE, ids=lambda row: row.id)
def test_no_row_names_our_platform_when_the_log_shows_nothing_of_it(row: KnownFailure):
    values = {**cluster_words(), **CALL_SITE_VALUES.get(row.id, {})}
    text = " ".join(row.render(values))
    assert not OUR_PLATFORM.search(text), (row.id, OUR_PLATFORM.search(text))


WATCHDOG = (
    "[rank1]:[E1130 05:42:03.123456 ProcessGroupNCCL.cpp:632] [Rank 1] Watchdog caught "
    "collective operation timeout: WorkNCCL(SeqNum=812, OpType=_ALLGATHER_BASE, NumelIn=1, "
    "NumelOut=2, Timeout(ms)=600000) ran for 600060 milliseconds before timing out."
)


def test_the_nccl_hang_on_arm_is_named_when_the_log_shows_nccl_2_28_on_aarch64():
    shown = [
        "spark1:89:89 [0] NCCL INFO NCCL version 2.28.3+cuda13.0",
        ENGINE + "INFO 11-30 05:40:00 [utils.py:1] libs in /usr/lib/aarch64-linux-gnu",
        WATCHDOG,
    ]
    d = diagnose(shown)
    assert d is not None and d.signature_id == "nccl_watchdog_timeout"
    assert "NCCL 2.28.3 on aarch64" in d.cause and "2.29.3" in d.fix
    on_x86 = diagnose([shown[0], WATCHDOG])  # NCCL 2.28 but no sign of ARM
    assert on_x86 is not None and "2.29.3" not in on_x86.fix and "ARM" not in on_x86.cause


def test_the_gpu_the_log_saw_is_named():
    free = (
        "ValueError: Free memory on device cuda:0 (20.1/121.63 GiB) on startup is less than "
        "desired GPU memory utilization (0.9, 109.47 GiB)."
    )
    gb10 = diagnose(
        ["Found GPU0 NVIDIA GB10 which is of compute capability (CC) 12.1.", ENGINE + free]
    )
    assert gb10 is not None and "NVIDIA GB10 (compute capability 12.1)" in gb10.cause
    assert "unified memory" in gb10.cause
    plain = diagnose([ENGINE + free])
    assert plain is not None and "GB10" not in plain.cause and "unified" not in plain.cause
    kernels = diagnose(
        [
            "E=128,N=704,device_name=NVIDIA_H100_80GB_HBM3.json not found",
            "RuntimeError: CUDA error: no kernel image is available for execution on the device",
        ]
    )
    assert kernels is not None and "NVIDIA H100 80GB HBM3" in kernels.title


def test_what_a_platform_line_shows():
    seen = PlatformSeen()
    for line in ("vLLM is using nccl==2.28.9", "sm_121a", "ptxas for aarch64"):
        seen.offer(line)
    assert (seen.nccl, seen.capability, seen.arm) == ("2.28.9", "12.1", True)
    assert seen.unified_memory and seen.hanging_nccl_on_arm
