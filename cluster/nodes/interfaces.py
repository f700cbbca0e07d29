"""Which interfaces NCCL, Gloo and Ray must use on a node, as the community launcher detects them.

IB_IF: every RoCE device `ibdev2netdev` reports Up. ETH_IF: the interface holding the node's
fabric IP (auto), or the configured one, which must exist and hold an IPv4 address.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from cluster.errors import InterfaceProblem

_IBDEV_LINE = re.compile(r"^(?P<dev>\S+) port \d+ ==> (?P<netdev>\S+) \((?P<state>\w+)\)")
_IP_ADDR_LINE = re.compile(r"^\d+:\s+(?P<ifname>[^\s:@]+)\S*\s+inet\s+(?P<ip>[\d.]+)/\d+")


@dataclass(frozen=True)
class NodeInterfaces:
    eth_if: str
    ib_if: tuple[str, ...]
    local_ip: str
    # the fabric's netdevs: ETH_IF's, then those behind the RoCE devices Up (both logical
    # interfaces of a ConnectX-7 port, in NVIDIA's two-subnet layout)
    netdevs: tuple[str, ...] = ()

    def describe(self) -> str:
        return (
            f"Detected IB_IF: {','.join(self.ib_if) or '(none)'}; "
            f"Detected ETH_IF: {self.eth_if}; Detected Local IP: {self.local_ip}"
        )


def up_roce_devices(ibdev2netdev_output: str) -> list[tuple[str, str]]:
    """(RoCE device, netdev) for each line of `ibdev2netdev` whose port is Up."""
    found = []
    for line in ibdev2netdev_output.splitlines():
        match = _IBDEV_LINE.match(line.strip())
        if match and match["state"] == "Up":
            found.append((match["dev"], match["netdev"]))
    return found


def ipv4_addresses(ip_addr_output: str) -> dict[str, list[str]]:
    """Interface -> IPv4 addresses, from `ip -o -f inet addr show`."""
    addresses: dict[str, list[str]] = {}
    for line in ip_addr_output.splitlines():
        match = _IP_ADDR_LINE.match(line.strip())
        if match:
            addresses.setdefault(match["ifname"], []).append(match["ip"])
    return addresses


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
    return NodeInterfaces(eth_if=eth_if, ib_if=ib_if, local_ip=fabric_ip, netdevs=netdevs)


def _summary(addresses: dict[str, list[str]]) -> str:
    return ", ".join(f"{name}={'/'.join(ips)}" for name, ips in addresses.items()) or "none"
