"""Which boot a node is in: its boot id and how long it has been up.

`/proc/sys/kernel/random/boot_id` is a UUID the kernel makes once per boot and keeps until the
next (Documentation/admin-guide/sysctl/kernel.rst, "random"); `/proc/uptime` is two figures,
seconds since boot and the idle seconds summed over CPUs (proc(5)). Both are read over the
node's connection without starting a process. The launch records each node's boot id and
uptime on its containers (LABEL_BOOT_ID, LABEL_UPTIME): a boot id that differs later is a
reboot for sure, not a guess from an uptime; the uptime at launch is where the kernel log's
lines since the launch begin.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Mapping
from dataclasses import dataclass

from cluster.errors import FileUnreadable, NodeError
from cluster.nodes import NodeConnection

BOOT_ID = "/proc/sys/kernel/random/boot_id"
UPTIME = "/proc/uptime"
LABEL_BOOT_ID = "spark-bot.boot-id"
LABEL_UPTIME = "spark-bot.uptime-at-launch"  # seconds, as its preflight read it
_UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")


@dataclass(frozen=True)
class Boot:
    boot_id: str
    uptime_s: float


def parse_boot(boot_id: str, uptime: str) -> Boot:
    """ValueError when either is not what Linux writes."""
    value = boot_id.strip()
    if not _UUID.match(value):
        raise ValueError(f"{BOOT_ID} holds {value[:60]!r}, not a UUID")
    try:
        seconds = float(uptime.split()[0])
    except (IndexError, ValueError):
        raise ValueError(f"{UPTIME} holds {uptime[:60]!r}, not seconds") from None
    return Boot(value, seconds)


async def read_boot(node: NodeConnection, *, timeout: float) -> Boot:
    """NodeError when the node does not answer; ValueError when the files are not Linux's."""
    boot_id, uptime = await asyncio.gather(
        node.read_file(BOOT_ID, timeout=timeout), node.read_file(UPTIME, timeout=timeout)
    )
    return parse_boot(boot_id, uptime)


async def boot_if_linux(node: NodeConnection, *, timeout: float) -> Boot | None:
    """The node's boot; None when /proc's files are missing or not Linux's (a reboot then goes
    unrecorded, nothing else). NodeError when the node does not answer."""
    try:
        return await read_boot(node, timeout=timeout)
    except (FileUnreadable, ValueError):
        return None


async def launch_boots(
    nodes: list[NodeConnection], container: str, *, timeout: float
) -> dict[str, Boot | None]:
    """Each node's boot as its launch recorded it on its container; for a container without
    the labels (an operator's launcher started it, an older spark-bot), the boot now. Asked of
    every node at once; a node that does not answer has None."""

    async def one(node: NodeConnection) -> Boot | None:
        try:
            info = await node.docker.find_container(container)
            recorded = from_labels(((info or {}).get("Config") or {}).get("Labels") or {})
            return recorded or await boot_if_linux(node, timeout=timeout)
        except NodeError:
            return None

    found = await asyncio.gather(*map(one, nodes))
    return {node.name: boot for node, boot in zip(nodes, found, strict=True)}


def labels(boot: Boot | None) -> dict[str, str]:
    """What a launch's container says of its node's boot."""
    if boot is None:
        return {}
    return {LABEL_BOOT_ID: boot.boot_id, LABEL_UPTIME: f"{boot.uptime_s:.2f}"}


def from_labels(container_labels: Mapping[str, str]) -> Boot | None:
    try:
        return parse_boot(
            container_labels.get(LABEL_BOOT_ID, ""), container_labels.get(LABEL_UPTIME, "")
        )
    except ValueError:
        return None


def duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"
