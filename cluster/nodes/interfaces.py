"""Which interfaces NCCL, Gloo and Ray must use on a node, as the community launcher detects them.

IB_IF: every RoCE device `ibdev2netdev` reports Up (in NVIDIA's two-subnet layout both logical
interfaces of the port: NCCL_IB_HCA lists both, and NCCL uses both halves). ETH_IF: the
interface holding the node's fabric IP (auto), or the configured one, which must exist and hold
an IPv4 address. The fabric's addresses: the IPv4 addresses, with their prefixes, of the
interfaces behind the RoCE devices Up (cluster/nodes/fabric_paths.py compares them across nodes).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from cluster.errors import InterfaceProblem

_IBDEV_LINE = re.compile(r"^(?P<dev>\S+) port \d+ ==> (?P<netdev>\S+) \((?P<state>\w+)\)")
_IP_ADDR_LINE = re.compile(
    r"^\d+:\s+(?P<ifname>[^\s:@]+)\S*\s+inet\s+(?P<ip>[\d.]+)/(?P<prefix>\d+)"
)


@dataclass(frozen=True)
class FabricAddress:
    netdev: str
    device: str  # the RoCE device behind it
    cidr: str  # 192.168.100.10/24


@dataclass(frozen=True)
class NodeInterfaces:
    eth_if: str
    ib_if: tuple[str, ...]
    local_ip: str
    # the fabric's netdevs: ETH_IF's, then those behind the RoCE devices Up (both logical
    # interfaces of a ConnectX-7 port, in NVIDIA's two-subnet layout)
    netdevs: tuple[str, ...] = ()
    up_ports: tuple[tuple[str, str], ...] = ()  # (RoCE device, netdev) of each Up
    addresses: tuple[FabricAddress, ...] = ()  # the Up ones' netdevs' IPv4, with prefixes

    @property
    def up_netdevs(self) -> tuple[str, ...]:
        return tuple(netdev for _, netdev in self.up_ports)

    def describe(self) -> str:
        return (
            f"Detected IB_IF: {','.join(self.ib_if) or '(none)'}; "
            f"Detected ETH_IF: {self.eth_if}; Detected Local IP: {self.local_ip}"
        )


@dataclass(frozen=True)
class Unresolved:
    """Why a node's interfaces could not be settled, and the netdevs behind its RoCE devices Up
    (where its cable is: another port than its peer's?)."""

    problem: str
    up_ports: tuple[tuple[str, str], ...] = ()

    @property
    def up_netdevs(self) -> tuple[str, ...]:
        return tuple(netdev for _, netdev in self.up_ports)


def up_roce_devices(ibdev2netdev_output: str) -> list[tuple[str, str]]:
    """(RoCE device, netdev) for each line of `ibdev2netdev` whose port is Up."""
    found = []
    for line in ibdev2netdev_output.splitlines():
        match = _IBDEV_LINE.match(line.strip())
        if match and match["state"] == "Up":
            found.append((match["dev"], match["netdev"]))
    return found


def ipv4_cidrs(ip_addr_output: str) -> dict[str, list[str]]:
    """Interface -> IPv4 addresses with their prefixes, from `ip -o -f inet addr show`."""
    addresses: dict[str, list[str]] = {}
    for line in ip_addr_output.splitlines():
        match = _IP_ADDR_LINE.match(line.strip())
        if match:
            addresses.setdefault(match["ifname"], []).append(f"{match['ip']}/{match['prefix']}")
    return addresses


def ipv4_addresses(ip_addr_output: str) -> dict[str, list[str]]:
    """Interface -> IPv4 addresses, from `ip -o -f inet addr show`."""
    return {
        name: [cidr.split("/")[0] for cidr in cidrs]
        for name, cidrs in ipv4_cidrs(ip_addr_output).items()
    }


def resolve_interfaces(
    *,
    fabric_ip: str,
    eth_choice: str | list[str],
    ib_choice: str | list[str],
    ibdev2netdev_output: str,
    ip_addr_output: str,
) -> NodeInterfaces:
    addresses = ipv4_addresses(ip_addr_output)
    holder = next((name for name, ips in addresses.items() if fabric_ip in ips), None)
    if eth_choice == "auto":
        if holder is None:
            raise InterfaceProblem(
                f"no interface holds the fabric IP {fabric_ip} (IPv4 addresses: "
                f"{_summary(addresses)}); fix fabric_ip in the config or the node's network"
            )
        eth_if = holder
    else:
        wanted = [eth_choice] if isinstance(eth_choice, str) else eth_choice
        missing = [name for name in wanted if name not in addresses]
        if missing:
            raise InterfaceProblem(
                f"configured eth_if {', '.join(missing)} has no IPv4 address on the node "
                f"(it has: {_summary(addresses)})"
            )
        eth_if = ",".join(wanted)
    devices = up_roce_devices(ibdev2netdev_output)
    if ib_choice == "auto":
        ib_if = tuple(dev for dev, _ in devices)
        if not ib_if:
            raise InterfaceProblem(
                "ibdev2netdev shows no RoCE device Up: check the QSFP cable and "
                "`ibdev2netdev` on the node, or set network.ib_if explicitly"
            )
    else:
        ib_if = (ib_choice,) if isinstance(ib_choice, str) else tuple(ib_choice)
        up = {dev for dev, _ in devices}
        down = [dev for dev in ib_if if dev not in up]
        if down:
            raise InterfaceProblem(
                f"configured ib_if {', '.join(down)} is not Up in ibdev2netdev "
                f"(Up: {', '.join(sorted(up)) or 'none'})"
            )
    netdevs = tuple(dict.fromkeys([*eth_if.split(","), *(netdev for _, netdev in devices)]))
    cidrs = ipv4_cidrs(ip_addr_output)
    return NodeInterfaces(
        eth_if=eth_if,
        ib_if=ib_if,
        local_ip=fabric_ip,
        netdevs=netdevs,
        up_ports=tuple(devices),
        addresses=tuple(
            FabricAddress(netdev, device, cidr)
            for device, netdev in devices
            for cidr in cidrs.get(netdev, [])
        ),
    )


def _summary(addresses: dict[str, list[str]]) -> str:
    return ", ".join(f"{name}={'/'.join(ips)}" for name, ips in addresses.items()) or "none"
