"""The GPU's clocks and why they are held back, as `nvidia-smi` on the node tells them.

One query (argv only): `nvidia-smi --query-gpu=index,clocks.sm,clocks.max.sm,
clocks_event_reasons.active,temperature.gpu,power.draw --format=csv,noheader,nounits`, one line
per GPU, e.g. `0, 2405, 3003, 0x0000000000000000, 62, 45.12`. The reasons are NVML's bitmask
(nvmlClocksEventReasons, https://docs.nvidia.com/deploy/nvml-api/group__nvmlClocksEventReasons.html;
nvidia-smi prints it as 0x followed by 16 hex digits, as RedHatInsights/insights-core
insights/parsers/nvidia.py at 1bd94f74 parses it). Drivers before the rename know the field as
`clocks_throttle_reasons.active` only: asked again under that name when the first is refused.
Memory is not asked: on a GB10 (unified memory) nvidia-smi answers `[N/A]` for every memory
field; the node's /proc/meminfo is the truth (cluster.resources.memory).

What is found, per GPU, only while its SM clock is below LOW_CLOCK_SHARE of its maximum (or the
clocks are not told): thermal slowdown (SW or HW thermal bits), power (HW slowdown, HW power
brake, or SW power cap with low clocks: a GPU under load at its cap runs at full speed), or low
clocks with neither while the GPU is not idle (a GB10 left at low clocks after a fault). An
idle GPU (the GpuIdle bit) is not judged: its clocks drop by design.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from cluster.errors import NodeError
from cluster.nodes import NodeConnection

FIELDS = (
    "index",
    "clocks.sm",
    "clocks.max.sm",
    "clocks_event_reasons.active",
    "temperature.gpu",
    "power.draw",
)
OLD_REASONS_FIELD = "clocks_throttle_reasons.active"
LOW_CLOCK_SHARE = 0.5

# NVML's bits (nvmlClocksEventReasons / nvmlClocksThrottleReasons), and what each says
GPU_IDLE = 0x1
REASONS: dict[int, tuple[str, str]] = {
    0x1: ("GPU idle", "idle"),
    0x2: ("applications clocks setting", "setting"),
    0x4: ("SW power cap", "power"),
    0x8: ("HW slowdown", "power"),
    0x10: ("sync boost", "setting"),
    0x20: ("SW thermal slowdown", "thermal"),
    0x40: ("HW thermal slowdown", "thermal"),
    0x80: ("HW power brake slowdown", "power"),
    0x100: ("display clock setting", "setting"),
}

SW_POWER_CAP = 0x4
POWER_BITS = sum(bit for bit, (_, kind) in REASONS.items() if kind == "power")

Verdict = Literal["thermal", "power", "low_clocks", "ok", "idle", "unknown"]


def argv(reasons_field: str = FIELDS[3]) -> list[str]:
    fields = [reasons_field if f == FIELDS[3] else f for f in FIELDS]
    return ["nvidia-smi", f"--query-gpu={','.join(fields)}", "--format=csv,noheader,nounits"]


def _number(cell: str) -> float | None:
    try:
        return float(cell)
    except ValueError:
        return None  # "[N/A]", "[Not Supported]"


@dataclass(frozen=True)
class GpuClocks:
    index: str
    sm_mhz: float | None
    max_sm_mhz: float | None
    reasons: int | None
    temperature_c: float | None
    power_w: float | None

    def reason_names(self) -> list[str]:
        if self.reasons is None:
            return []
        return [name for bit, (name, _) in REASONS.items() if self.reasons & bit]

    def clocks_low(self) -> bool | None:
        """The SM clock below LOW_CLOCK_SHARE of its maximum; None when either is not told."""
        if self.sm_mhz is None or not self.max_sm_mhz:
            return None
        return self.sm_mhz < LOW_CLOCK_SHARE * self.max_sm_mhz

    def verdict(self) -> Verdict:
        if self.reasons is None:
            return "unknown"
        kinds = {kind for bit, (_, kind) in REASONS.items() if self.reasons & bit}
        low = self.clocks_low()
        # A reason bit is only why the clocks are where they are: a GPU under load near its
        # power cap shows SW power cap at full speed, which holds nothing back.
        if low is False:
            return "ok"
        if "thermal" in kinds:
            return "thermal"
        if "power" in kinds and (low or self.reasons & ~SW_POWER_CAP & POWER_BITS):
            return "power"
        if self.reasons & GPU_IDLE:
            return "idle"
        return "low_clocks" if low else "ok"

    def describe(self) -> str:
        def figure(value: float | None, unit: str) -> str:
            return "?" if value is None else f"{value:g}{unit}"

        reasons = ", ".join(self.reason_names()) or "none"
        return (
            f"GPU {self.index}: SM {figure(self.sm_mhz, '')} of {figure(self.max_sm_mhz, ' MHz')}, "
            f"{figure(self.temperature_c, ' C')}, {figure(self.power_w, ' W')}, "
            f"clock event reasons {'?' if self.reasons is None else f'0x{self.reasons:016x}'} "
            f"({reasons})"
        )


def parse(output: str) -> list[GpuClocks]:
    """ValueError when a line is not the query's six cells."""
    gpus = []
    for line in output.splitlines():
        if not line.strip():
            continue
        cells = [cell.strip() for cell in line.split(",")]
        if len(cells) != len(FIELDS):
            raise ValueError(f"not nvidia-smi's answer to the query: {line[:120]!r}")
        index, sm, max_sm, reasons, temperature, power = cells
        bits = int(reasons, 16) if reasons.lower().startswith("0x") else None
        gpus.append(
            GpuClocks(
                index, _number(sm), _number(max_sm), bits, _number(temperature), _number(power)
            )
        )
    return gpus


@dataclass(frozen=True)
class ClocksReading:
    gpus: list[GpuClocks]
    problem: str | None = None  # why it could not be read


async def read_clocks(node: NodeConnection, *, timeout: float) -> ClocksReading:
    try:
        result = await node.run(argv(), timeout=timeout)
        if not result.ok and "not a valid field" in result.stdout + result.stderr:
            result = await node.run(argv(OLD_REASONS_FIELD), timeout=timeout)
    except NodeError as error:
        return ClocksReading([], f"not asked: {error.problem}")
    if result.exit_status == 127:
        return ClocksReading([], "no nvidia-smi on the node")
    if not result.ok:
        said = (result.stdout + result.stderr).strip().splitlines()
        return ClocksReading(
            [], f"nvidia-smi exited {result.exit_status}: {(said or [''])[-1][:160]}"
        )
    try:
        return ClocksReading(parse(result.stdout))
    except ValueError as error:
        return ClocksReading([], str(error))
