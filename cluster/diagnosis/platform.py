"""What a log shows of the machine it ran on: the GPU's name, its compute capability, the CPU
architecture, NCCL's version. A failure's text names the GB10, sm_121, aarch64 or the NCCL 2.28
hang on ARM only when the log shows them; otherwise it speaks of the GPU it saw, or of "the GPU".

`PlatformSeen.offer` reads each prefix-stripped message; `words()` gives the `{gpu}`,
`{unified_memory}`, `{nccl_hang}` and `{nccl_hang_fix}` that the failure table's texts use.
`NEUTRAL_WORDS` are those words when the log shows nothing. Bounded: a few short strings.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["NEUTRAL_WORDS", "PlatformSeen"]

# Where the GPU's name shows (sources: torch/cuda/__init__.py `Found GPU0 NAME which is of
# compute capability (CC) 12.1` (2.13; earlier `which is of cuda capability 12.1`), vLLM's fused
# MoE config file names `device_name=NVIDIA_GB10`, nvidia-smi's table, vLLM's platform lines).
_GPU_NAME = (
    re.compile(r"Found GPU\d+ (?P<name>.+?) which is of (?:cuda|compute) capability"),
    re.compile(r"device_name=(?P<name>NVIDIA_[A-Za-z0-9_-]+?)(?:,|\.json|\b)"),
    re.compile(r"\b(?P<name>NVIDIA (?:GB10|GH200|GB200|[A-Z]?\d{2,4}[A-Za-z]*(?: \w+)?))\b"),
)
_CAPABILITY = (
    re.compile(r"(?:cuda|compute) capability (?:\(CC\) )?(?P<major>\d+)\.(?P<minor>\d)"),
    re.compile(r"\bsm_?(?P<major>1\d|[5-9])(?P<minor>\d)a?\b"),
)
_ARM = re.compile(r"\baarch64\b|\barm64\b|\bsbsa\b")
# NCCL's own INFO line (`NCCL version 2.28.3+cuda13.0`) and vLLM's pynccl.py (`vLLM is using
# nccl==2.28.3`).
_NCCL_VERSION = re.compile(r"NCCL version (?P<v>\d+\.\d+\.\d+)|using nccl==(?P<w>\d+\.\d+\.\d+)")

# Every line is offered: one search of what any of the patterns above needs.
_WORTH_READING = re.compile(
    r"GPU\d|device_name=|NVIDIA |capability|sm_?\d|aarch64|arm64|sbsa|nccl", re.I
)

# GB10's unified memory and the NCCL 2.28.x hang on ARM (the multi-node reference's table).
_UNIFIED = "GB10"
_HANGING_NCCL = re.compile(r"^2\.28\.")

NEUTRAL_WORDS: dict[str, str] = {
    "gpu": "the GPU",
    "unified_memory": "the GPU's memory is held by other processes",
    "nccl_hang": "a collective never completed (a rank stalled or died, or the network between "
    "the nodes dropped)",
    "nccl_hang_fix": "Relaunch with NCCL_DEBUG=INFO and read every rank's last lines for the one "
    "that stopped; check the network between the nodes; if the image's NCCL has a known hang, "
    "use another NCCL (the system libnccl via LD_PRELOAD, or a newer image); then relaunch.",
}


@dataclass
class PlatformSeen:
    gpu: str | None = None
    capability: str | None = None  # "12.1"
    arm: bool = False
    nccl: str | None = None

    def offer(self, message: str) -> None:
        if not _WORTH_READING.search(message):
            return
        if self.gpu is None:
            for pattern in _GPU_NAME:
                if m := pattern.search(message):
                    self.gpu = m["name"].replace("_", " ").strip()
                    break
        if self.capability is None:
            for pattern in _CAPABILITY:
                if m := pattern.search(message):
                    self.capability = f"{m['major']}.{m['minor']}"
                    break
        if not self.arm and _ARM.search(message):
            self.arm = True
        if self.nccl is None and (m := _NCCL_VERSION.search(message)):
            self.nccl = m["v"] or m["w"]

    @property
    def unified_memory(self) -> bool:
        return (self.gpu is not None and _UNIFIED in self.gpu) or self.capability == "12.1"

    @property
    def hanging_nccl_on_arm(self) -> bool:
        return self.nccl is not None and bool(_HANGING_NCCL.match(self.nccl)) and self.arm

    def describe_gpu(self) -> str:
        if self.gpu is None and self.capability is None:
            return NEUTRAL_WORDS["gpu"]
        name = self.gpu or "the GPU"
        sm = f"compute capability {self.capability}" if self.capability else ""
        return f"{name} ({sm})" if self.gpu and sm else name if self.gpu else f"the GPU ({sm})"

    def words(self) -> dict[str, str]:
        """The platform words of the failure texts, for what this log showed."""
        words = {**NEUTRAL_WORDS, "gpu": self.describe_gpu()}
        if self.unified_memory:
            words["unified_memory"] = (
                f"{self.describe_gpu()} shares the host's memory (unified memory): the page "
                "cache or other processes hold part of it"
            )
        if self.hanging_nccl_on_arm:
            words["nccl_hang"] = (
                f"this log shows NCCL {self.nccl} on aarch64: NCCL 2.28.x hangs on ARM (a "
                "collective never completes, typically 20-55 min after ready)"
            )
            words["nccl_hang_fix"] = (
                "Use an image whose NCCL is >= 2.29.3 or the system libnccl (NCCL 2.28.x hangs "
                "on ARM): e.g. rebuild the image, or set LD_PRELOAD to the system libnccl.so.2; "
                "then relaunch."
            )
        return words
