"""After a stop, the memory of the last launch coming back before the next one starts.

A launch's containers carry the MemAvailable its preflight saw on their node
(LABEL_MEMORY_BEFORE). When they stop (`down`, a failed launch's clean-up, a restart), Docker's
events of them keep their labels, on the node itself: the next preflight asks each node's engine
for them. A node whose MemAvailable is still below that level (less memory.return_tolerance_gib)
is waited for; memory that does not come back is named as held, by the processes `ps` shows
holding it, else as not returned at all (a driver's, or a process the node's `ps` cannot see).

A container the launch replaces still holds its memory while preflight checks the node (a
serving vLLM holds most of a Spark's unified memory): the checks judge the node on the memory
it will have once that container is gone (`credited`: its label's level), and the launch waits
for that memory after the removal as after any stop.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, replace

from cluster.nodes import NodeConnection
from cluster.resources.memory import GIB, MEMINFO, MemoryBreakdown, parse_memory_breakdown
from cluster.serving.containers import LABEL_CLUSTER

LABEL_MEMORY_BEFORE = "spark-bot.memory-available-before"  # bytes, as its preflight read it
_PS_LINE = re.compile(r"^\s*(?P<rss_kb>\d+)\s+(?P<pid>\d+)\s+(?P<command>.+?)\s*$")
HOLDERS_SHOWN = 3
# A process holds "the" memory only if it holds a good part of what is missing (a node has many
# small ones, and the lab's nodes see this machine's).
HOLDER_SHARE = 0.25
# Docker's states of a container whose processes live, holding their memory until it is removed
HOLDING = frozenset({"running", "paused", "restarting"})


@dataclass(frozen=True)
class LastStop:
    """The latest stop of one of our containers on a node, with the memory before its launch."""

    node: str
    container: str
    available_before: int  # bytes


async def last_stop(node: NodeConnection, cluster: str, within_s: float) -> LastStop | None:
    """Our latest container to die or be removed on `node` within `within_s`, if it says what
    the memory was before its launch (containers of older spark-bots do not)."""
    events = await node.docker.past_events(
        within_s=within_s,
        filters={
            "type": ["container"],
            "event": ["die", "destroy"],
            "label": [f"{LABEL_CLUSTER}={cluster}"],
        },
    )
    found = None
    for event in events:
        attributes = (event.get("Actor") or {}).get("Attributes") or {}
        before = memory_before(attributes)
        if before is not None:
            found = LastStop(node.name, str(attributes.get("name", "?")), before)
    return found


def memory_before(labels: Mapping[str, str]) -> int | None:
    """The MemAvailable a container's launch saw (LABEL_MEMORY_BEFORE); None without it."""
    before = str(labels.get(LABEL_MEMORY_BEFORE, ""))
    return int(before) if before.isdigit() else None


def credited(memory: MemoryBreakdown, available_before: int) -> MemoryBreakdown:
    """The node's memory once a container that holds it is gone: MemAvailable back to its level
    before that container's launch (never below now), what it gives back counted free."""
    back = max(0, available_before - memory.available)
    return replace(
        memory, available=memory.available + back, free=min(memory.total, memory.free + back)
    )


def is_back(memory: MemoryBreakdown, stop: LastStop, tolerance_gib: float) -> bool:
    return memory.available >= stop.available_before - int(tolerance_gib * GIB)


async def read_breakdown(node: NodeConnection, timeout: float) -> MemoryBreakdown | None:
    """The node's memory now; None when /proc/meminfo is not what Linux writes."""
    try:
        return parse_memory_breakdown(await node.read_file(MEMINFO, timeout=timeout))
    except ValueError:
        return None


@dataclass(frozen=True)
class Holder:
    command: str
    pid: int
    resident: int  # bytes

    def describe(self) -> str:
        return f"{self.command} (pid {self.pid}, {self.resident / GIB:.1f} GiB resident)"


def holders(ps_output: str, missing: int) -> list[Holder]:
    """The processes of `ps -eo rss=,pid=,comm= --sort=-rss` holding a good part of `missing`
    bytes, largest first."""
    found = []
    for line in ps_output.splitlines():
        match = _PS_LINE.match(line)
        if match and int(match["rss_kb"]) * 1024 >= missing * HOLDER_SHARE:
            found.append(Holder(match["command"], int(match["pid"]), int(match["rss_kb"]) * 1024))
    return found[:HOLDERS_SHOWN]


async def held_by(node: NodeConnection, missing: int, timeout: float) -> list[Holder]:
    """What `ps` on the node shows holding the memory (empty when nothing it can see does)."""
    result = await node.run(["ps", "-eo", "rss=,pid=,comm=", "--sort=-rss"], timeout=timeout)
    return holders(result.stdout, missing) if result.ok else []
