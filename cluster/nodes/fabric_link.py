"""The fabric link on every node: each fabric interface's state, MTU and speed, from sysfs.

Read over the node's connection (`/sys/class/net/<if>/operstate`, `mtu`, `speed`: no process
started, no package needed). RoCE needs the same MTU at both ends of the link; NVIDIA's
playbooks set 9000 (a ConnectX-7 reaches its speed with jumbo frames, ~96 Gb/s untuned at 1500
say practitioners); a Spark's QSFP port trains at 200 Gb/s (sysfs `speed` in Mb/s: 200000), and
a link trained lower (a cable, a dirty or half-seated connector) loads and serves, slower.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from cluster.errors import FileUnreadable
from cluster.nodes import NodeConnection

RECOMMENDED_MTU = 9000


@dataclass(frozen=True)
class LinkFacts:
    node: str
    interface: str
    operstate: str
    mtu: int | None
    speed_mbps: int | None  # None: the driver does not say (sysfs reads -1 or fails)

    def describe(self) -> str:
        speed = f"{self.speed_mbps / 1000:g} Gb/s" if self.speed_mbps else "speed unknown"
        return f"{self.node} {self.interface}: {self.operstate}, MTU {self.mtu}, {speed}"


def _number(text: str | None) -> int | None:
    try:
        value = int((text or "").strip())
    except ValueError:
        return None
    return value if value > 0 else None


async def read_link(node: NodeConnection, interface: str, timeout: float) -> LinkFacts | None:
    """The interface's facts; None when the node has no such netdev (a port's twin that is no
    interface of its own)."""

    async def read(name: str) -> str | None:
        try:
            return await node.read_file(f"/sys/class/net/{interface}/{name}", timeout=timeout)
        except FileUnreadable:  # `speed` of a link that is down cannot be read either
            return None

    state, mtu, speed = await asyncio.gather(read("operstate"), read("mtu"), read("speed"))
    if state is None:
        return None
    return LinkFacts(node.name, interface, state.strip(), _number(mtu), _number(speed))


def down(links: list[LinkFacts]) -> LinkFacts | None:
    return next((link for link in links if link.operstate not in ("up", "unknown")), None)


def mtu_mismatch(links: list[LinkFacts]) -> bool:
    """Two ends read with different MTUs (an end whose MTU could not be read proves nothing)."""
    return len({link.mtu for link in links if link.mtu is not None}) > 1


def warnings(links: list[LinkFacts], nominal_mbps: int) -> list[str]:
    """What loads and serves, slower: a link below its nominal speed, MTU below 9000."""
    found = [
        f"the fabric link {link.interface} on {link.node} runs at {link.speed_mbps / 1000:g} Gb/s, "
        f"not its nominal {nominal_mbps / 1000:g} Gb/s: reseat or replace the QSFP cable, check "
        f"`ethtool {link.interface}` on both ends (network.link_speed_mbps is the nominal)"
        for link in links
        if link.speed_mbps is not None and link.speed_mbps < nominal_mbps
    ]
    small = [link for link in links if link.mtu is not None and link.mtu < RECOMMENDED_MTU]
    if small and not mtu_mismatch(links):
        found.append(
            f"MTU {small[0].mtu} on the fabric of every node: RoCE runs, below its speed; set "
            f"{RECOMMENDED_MTU} on both ends (`sudo ip link set dev {small[0].interface} mtu "
            f"{RECOMMENDED_MTU}`, and `mtu: {RECOMMENDED_MTU}` in the node's netplan to keep it)"
        )
    return found
