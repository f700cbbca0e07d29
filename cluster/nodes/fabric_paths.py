"""The fabric's subnets: which each node holds on its RoCE ports that are Up, and a subnet one
node holds that another lacks.

NVIDIA's layout since 2026-07 (dgx-spark-playbooks@0db7c141 nvidia/connect-two-sparks/README.md,
Step 3): a QSFP port is two logical interfaces (`enp1s0f1np1` and `enP2p1s0f1np1`, one per PCIe
x4 link of the ConnectX-7), each with a static address on a subnet of its own (192.168.100.x/24
and 192.168.101.x/24), the same physical port cabled on both Sparks. NCCL aggregates the two
halves only with both devices in NCCL_IB_HCA (dgx-spark-playbooks PR #103: ~100 Gb/s per half),
and pairs the devices of the list across ranks: a device whose subnet the peer lacks has no path
(a connection timeout in ibv_modify_qp). A peer cabled to the other port shows it: its Up
devices are the other port's (`…s0f0`), whose interfaces hold none of the subnets.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping
from dataclasses import dataclass

from cluster.nodes.interfaces import FabricAddress, NodeInterfaces, Unresolved

_PORT = re.compile(r"f(\d+)np\d+$")  # enp1s0f1np1 -> port 1


def port_of(netdev: str) -> str | None:
    match = _PORT.search(netdev)
    return match[1] if match else None


def network_of(address: FabricAddress) -> str:
    """192.168.100.10/24 -> 192.168.100.0/24."""
    return str(ipaddress.ip_interface(address.cidr).network)


def subnets(interfaces: NodeInterfaces) -> dict[str, FabricAddress]:
    """Subnet (e.g. 192.168.100.0/24) -> the node's first address on it, on its Up RoCE ports."""
    found: dict[str, FabricAddress] = {}
    for address in interfaces.addresses:
        found.setdefault(network_of(address), address)
    return found


@dataclass(frozen=True)
class MissingPath:
    node: str  # the node that lacks the subnet
    subnet: str
    peer: str  # a node that holds it
    peer_address: FabricAddress
    other_port: bool  # the two nodes' Up RoCE ports are different physical ports
    node_ports: str  # the lacking node's Up netdevs, for the words

    def values(self) -> dict[str, str]:
        return {
            "node": self.node,
            "subnet": self.subnet,
            "peer": self.peer,
            "peer_netdev": self.peer_address.netdev,
            "peer_address": self.peer_address.cidr,
            "netdevs": self.node_ports or "none",
        }


def _ports(netdevs: tuple[str, ...]) -> set[str]:
    return {port for port in map(port_of, netdevs) if port is not None}


def missing_path(nodes: Mapping[str, NodeInterfaces | Unresolved]) -> MissingPath | None:
    """The first subnet some node holds on its Up RoCE ports and another does not, on a netdev
    that shares no other subnet with it (link-local ones aside); a node whose
    interfaces could not be settled counts when its Up ports are not its peer's (the cable in
    the other port: the address its netplan gives is on the port without it)."""
    resolved = {n: i for n, i in nodes.items() if isinstance(i, NodeInterfaces)}
    held = {name: subnets(interfaces) for name, interfaces in resolved.items()}
    for peer, peer_subnets in held.items():
        peer_ports = _ports(resolved[peer].up_netdevs)
        for subnet, address in peer_subnets.items():
            if ipaddress.ip_network(subnet).is_link_local:
                continue  # an address the kernel or avahi gave itself: no path NCCL is told of
            for name, found in nodes.items():
                if name == peer or subnet in held.get(name, {}):
                    continue
                if _shares_another(resolved[peer], address.netdev, held.get(name, {})):
                    continue  # an extra address beside one both hold: the device has a path
                ports = _ports(found.up_netdevs)
                other_port = bool(ports and peer_ports and not ports & peer_ports)
                if isinstance(found, Unresolved) and not other_port:
                    continue  # its own problem (INTERFACES_UNEXPECTED) says more
                return MissingPath(
                    node=name,
                    subnet=subnet,
                    peer=peer,
                    peer_address=address,
                    other_port=other_port,
                    node_ports=", ".join(found.up_netdevs),
                )
    return None


def _shares_another(peer: NodeInterfaces, netdev: str, node_subnets: Mapping[str, object]) -> bool:
    """Whether the peer's `netdev` also holds a subnet the other node holds."""
    return any(
        network_of(address) in node_subnets
        for address in peer.addresses
        if address.netdev == netdev
    )


def unaddressed(interfaces: NodeInterfaces) -> list[FabricAddress]:
    """The Up RoCE ports whose interface holds no IPv4 address (their cidr is empty)."""
    holding = {address.netdev for address in interfaces.addresses}
    return [
        FabricAddress(netdev, device, "")
        for device, netdev in interfaces.up_ports
        if netdev not in holding
    ]


def describe(name: str, interfaces: NodeInterfaces) -> str:
    held = ", ".join(f"{a.netdev} {a.cidr} ({a.device})" for a in interfaces.addresses)
    return f"{name} fabric subnets: {held or 'none on a RoCE port that is Up'}"
