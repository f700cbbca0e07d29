"""A node's memory while serving: read from /proc, its trend, and when it runs out.

A DGX Spark's CPU and GPU share one pool (unified memory), so `MemAvailable` in /proc/meminfo is
what the engine and everything else on the node still have; a node that reaches zero freezes or
the kernel's OOM killer strikes. The kernel counts its OOM kills in /proc/vmstat (`oom_kill`).
Both files are read over the node's open connection (`NodeConnection.read_file`): no process is
started on the node. Parsing and the trend are pure; the reading is in `read_memory`.
"""

from __future__ import annotations

import asyncio
import re
from collections import deque
from dataclasses import dataclass

from cluster.errors import NodeError
from cluster.events import NodeMemory
from cluster.nodes import NodeConnection

GIB = 1024**3
MEMINFO = "/proc/meminfo"
VMSTAT = "/proc/vmstat"
_MEMINFO_LINE = re.compile(r"^(?P<key>\w+):\s+(?P<value>\d+)(?:\s+kB)?\s*$")
_VMSTAT_OOM = re.compile(r"^oom_kill (?P<count>\d+)\s*$", re.MULTILINE)


@dataclass(frozen=True)
class MemoryReading:
    node: str
    at: float  # monotonic seconds
    total_bytes: int
    available_bytes: int
    oom_kills: int | None  # the kernel's count since boot; None where /proc/vmstat lacks it

    @property
    def available_gib(self) -> float:
        return self.available_bytes / GIB

    @property
    def total_gib(self) -> float:
        return self.total_bytes / GIB

    def describe(self) -> str:
        return f"{self.available_gib:.1f} of {self.total_gib:.1f} GiB available"


def _meminfo_fields(text: str) -> dict[str, int]:
    values: dict[str, int] = {}
    for line in text.splitlines():
        match = _MEMINFO_LINE.match(line)
        if match:
            values[match["key"]] = int(match["value"]) * 1024
    return values


def parse_meminfo(text: str) -> tuple[int, int]:
    """(MemTotal, MemAvailable) in bytes; ValueError when either is missing."""
    values = _meminfo_fields(text)
    try:
        return values["MemTotal"], values["MemAvailable"]
    except KeyError as missing:
        raise ValueError(f"/proc/meminfo has no {missing.args[0]}") from None


@dataclass(frozen=True)
class MemoryBreakdown:
    """A node's memory split as the page cache matters on unified memory (bytes): what is free
    now, what the kernel would give back if asked (the page cache less shared memory, which
    cannot be dropped, buffers, reclaimable slab), and what is in use."""

    total: int
    free: int
    available: int
    cached: int = 0
    buffers: int = 0
    reclaimable_slab: int = 0
    shmem: int = 0

    @property
    def reclaimable(self) -> int:
        return max(0, self.cached - self.shmem + self.buffers + self.reclaimable_slab)

    @property
    def in_use(self) -> int:
        return max(0, self.total - self.free - self.reclaimable)

    def describe(self) -> str:
        return (
            f"{self.free / GIB:.1f} GiB free, {self.reclaimable / GIB:.1f} GiB page cache and "
            f"reclaimable, {self.in_use / GIB:.1f} GiB in use (MemAvailable "
            f"{self.available / GIB:.1f} of {self.total / GIB:.1f} GiB)"
        )


def parse_memory_breakdown(text: str) -> MemoryBreakdown:
    """ValueError when /proc/meminfo lacks MemTotal, MemFree or MemAvailable."""
    values = _meminfo_fields(text)
    try:
        total, free, available = (values[k] for k in ("MemTotal", "MemFree", "MemAvailable"))
    except KeyError as missing:
        raise ValueError(f"/proc/meminfo has no {missing.args[0]}") from None
    return MemoryBreakdown(
        total=total,
        free=free,
        available=available,
        cached=values.get("Cached", 0),
        buffers=values.get("Buffers", 0),
        reclaimable_slab=values.get("SReclaimable", 0),
        shmem=values.get("Shmem", 0),
    )


def parse_oom_kills(text: str) -> int | None:
    match = _VMSTAT_OOM.search(text)
    return int(match["count"]) if match else None


async def read_memory(node: NodeConnection, *, timeout: float, at: float) -> MemoryReading:
    """Both files at once over the node's connection: one round trip. NodeError when the node
    does not answer; ValueError when /proc/meminfo is not what Linux writes."""
    meminfo, vmstat = await asyncio.gather(
        node.read_file(MEMINFO, timeout=timeout), node.read_file(VMSTAT, timeout=timeout)
    )
    total, available = parse_meminfo(meminfo)
    return MemoryReading(node.name, at, total, available, parse_oom_kills(vmstat))


async def nodes_memory(nodes: list[NodeConnection], timeout: float) -> list[NodeMemory]:
    """Each node's memory for `status`, read at once; a node that does not answer is left out."""

    async def one(node: NodeConnection) -> NodeMemory | None:
        try:
            reading = await read_memory(node, timeout=timeout, at=0.0)
        except (NodeError, ValueError):
            return None
        return NodeMemory(
            node=node.name,
            available_gib=round(reading.available_gib, 2),
            total_gib=round(reading.total_gib, 2),
        )

    return [m for m in await asyncio.gather(*map(one, nodes)) if m is not None]


# The trend is the slope over the readings of the last TREND_WINDOW_S seconds (at least two).
TREND_WINDOW_S = 600.0
TREND_READINGS = 64


class MemoryTrend:
    """One node's recent readings: how fast available memory falls, and when it would be gone."""

    def __init__(self, window_s: float = TREND_WINDOW_S):
        self.window_s = window_s
        self._readings: deque[MemoryReading] = deque(maxlen=TREND_READINGS)

    def add(self, reading: MemoryReading) -> None:
        self._readings.append(reading)
        while self._readings and reading.at - self._readings[0].at > self.window_s:
            self._readings.popleft()

    def falling_bytes_per_s(self) -> float | None:
        """The least-squares slope of available memory, as bytes lost per second (negative
        when it grows); None with fewer than two readings."""
        readings = list(self._readings)
        if len(readings) < 2:
            return None
        n = len(readings)
        mean_t = sum(r.at for r in readings) / n
        mean_m = sum(r.available_bytes for r in readings) / n
        spread = sum((r.at - mean_t) ** 2 for r in readings)
        if spread == 0:
            return None
        slope = sum((r.at - mean_t) * (r.available_bytes - mean_m) for r in readings) / spread
        return -slope

    def seconds_left(self) -> float | None:
        """At the current rate, seconds until no memory is available; None when it is not
        falling."""
        rate = self.falling_bytes_per_s()
        if rate is None or rate <= 0 or not self._readings:
            return None
        return self._readings[-1].available_bytes / rate

    def describe(self) -> str:
        """The trend in words, for the warning."""
        rate = self.falling_bytes_per_s()
        if rate is None:
            return "no trend yet"
        if rate <= 0:
            return "not falling"
        left = self.seconds_left()
        per_min = rate * 60 / GIB
        assert left is not None
        return (
            f"falling by {per_min:.2f} GiB a minute: at this rate, out of memory in about "
            f"{_duration(left)}"
        )


def _duration(seconds: float) -> str:
    if seconds < 90:
        return f"{max(1, round(seconds))} s"
    if seconds < 90 * 60:
        return f"{round(seconds / 60)} minutes"
    return f"{seconds / 3600:.1f} hours"


@dataclass(frozen=True)
class MemoryLow:
    """A node's available memory fell below `watch.memory_low_gib`: a warning, with the trend."""

    node: str
    message: str


@dataclass(frozen=True)
class KernelOomKill:
    """The kernel's OOM killer struck on a node while it was watched."""

    node: str
    kills: int  # since the watch began
    reading: MemoryReading


class MemoryWatch:
    """Per node: the trend, the OOM-kill count the watch began with, and whether a warning is
    standing (a node is warned once each time it falls below the threshold; it must recover
    to 1.25 x the threshold before it is warned again)."""

    def __init__(self, low_gib: float):
        self.low_bytes = int(low_gib * GIB)
        self._trends: dict[str, MemoryTrend] = {}
        self._oom_base: dict[str, int] = {}
        self._warned: set[str] = set()
        self.last: dict[str, MemoryReading] = {}

    def observe(self, reading: MemoryReading) -> MemoryLow | KernelOomKill | None:
        node = reading.node
        trend = self._trends.setdefault(node, MemoryTrend())
        trend.add(reading)
        self.last[node] = reading
        if reading.oom_kills is not None:
            base = self._oom_base.setdefault(node, reading.oom_kills)
            if reading.oom_kills > base:
                return KernelOomKill(node, reading.oom_kills - base, reading)
        if reading.available_bytes >= self.low_bytes * 1.25:
            self._warned.discard(node)
        if reading.available_bytes >= self.low_bytes or node in self._warned:
            return None
        self._warned.add(node)
        return MemoryLow(
            node,
            f"memory low on {node}: {reading.describe()} (below watch.memory_low_gib "
            f"{self.low_bytes / GIB:g} GiB), {trend.describe()}",
        )

    def oom_kills_since_start(self, node: str) -> int | None:
        last = self.last.get(node)
        if last is None or last.oom_kills is None or node not in self._oom_base:
            return None
        return last.oom_kills - self._oom_base[node]
