"""The fabric interface as a Spark's ConnectX-7 shows it: MTU 9000 on both ends of the node's
veth (the bridge takes the least of its ports'), and a link speed of 200000 Mb/s in the node's
sysfs (a veth reports 10000; the file `Node.fabric_speed_file` is bound over its `speed` in the
mount namespace of the node's sshd, as rdma.py builds /sys/class/infiniband there).
`set_mtu` and `set_speed` make a mismatched or degraded link for a test; `set_second_subnet`
NVIDIA's two-subnet layout (the port's second logical interface, enP2p1s0f1np1, with an address
on a subnet of its own), `set_cable_port` the node's cable in the Spark's other port."""

from __future__ import annotations

from . import rdma, sshd
from . import topology as T
from .errors import LabError
from .proc import run

MTU = 9000
SPEED_MBPS = 200_000  # a ConnectX-7 port at 200 Gb/s (sysfs `speed` is in Mb/s)


def _speed_path() -> str:
    return f"/sys/class/net/{T.FABRIC_IFNAME}/speed"


def set_mtu(node: T.Node, mtu: int) -> None:
    """The node's end of the fabric link (its host-side veth end too, so the frames pass)."""
    run(["ip", "link", "set", node.fabric_veth, "mtu", str(max(mtu, MTU))])
    run(["ip", "-n", node.netns, "link", "set", T.FABRIC_IFNAME, "mtu", str(mtu)])


def set_speed(node: T.Node, mbps: int) -> None:
    node.fabric_speed_file.write_text(f"{mbps}\n")


def ensure(node: T.Node) -> None:
    """MTU 9000 and 200000 Mb/s on the node's fabric interface (after its sshd started)."""
    if not sshd.alive(node):
        raise LabError(f"sshd for {node.name} is not running")
    set_mtu(node, MTU)  # the bridge follows once every port has it
    set_speed(node, SPEED_MBPS)
    sshd.bind_for_sessions(
        node,
        node.fabric_speed_file,
        _speed_path(),
        aliases=(f"/sys/devices/virtual/net/{T.FABRIC_IFNAME}/speed",),
        net=True,
    )


def _add_veth(node: T.Node, host_end: str, inner: str) -> None:
    """A veth pair at MTU 9000 from the fabric bridge into the node (the MTU set before the
    bridge takes the port: the bridge follows the least of its ports')."""
    run(["ip", "link", "add", host_end, "mtu", str(MTU), "type", "veth", "peer", "name", inner,
         "mtu", str(MTU), "netns", node.netns])  # fmt: skip
    run(["ip", "link", "set", host_end, "master", T.FABRIC_BRIDGE])
    run(["ip", "link", "set", host_end, "up"])
    run(["ip", "-n", node.netns, "link", "set", inner, "up"])


def _second_speed_path() -> str:
    return f"/sys/devices/virtual/net/{T.SECOND_FABRIC_IFNAME}/speed"


def set_second_subnet(node: T.Node, on: bool) -> None:
    """NVIDIA's two-subnet layout on the node: the port's second logical interface on the fabric
    with an address on 198.18.2.0/24, MTU 9000, 200000 Mb/s; off: the lab's default, the
    twin with no interface of its own. /sys/class/infiniband follows (its GIDs)."""
    exists = run(["ip", "-n", node.netns, "link", "show", T.SECOND_FABRIC_IFNAME], check=False)
    if on and exists.returncode != 0:
        _add_veth(node, node.second_fabric_veth, T.SECOND_FABRIC_IFNAME)
        run(["ip", "-n", node.netns, "addr", "add", f"{node.second_fabric_ip}/{T.PREFIXLEN}",
             "dev", T.SECOND_FABRIC_IFNAME])  # fmt: skip
        node.second_fabric_speed_file.write_text(f"{SPEED_MBPS}\n")
        sshd.bind_for_sessions(
            node,
            node.second_fabric_speed_file,
            f"/sys/class/net/{T.SECOND_FABRIC_IFNAME}/speed",
            aliases=(_second_speed_path(),),
            net=True,
        )
    elif not on and exists.returncode == 0:
        sshd.unbind_for_sessions(node, _second_speed_path(), net=True)
        run(["ip", "link", "del", node.second_fabric_veth], check=False)
        run(["ip", "-n", node.netns, "link", "del", T.SECOND_FABRIC_IFNAME], check=False)
    rdma.refresh(node)


def set_cable_port(node: T.Node, port: int) -> None:
    """The node's cable in the Spark's port 0 (`enp1s0f0np0` then Up, with no address: the
    node's netplan addresses port 1, which has no carrier and so no address) or back in port 1
    (the lab's default)."""
    ns, address = node.netns, f"{node.fabric_ip}/{T.PREFIXLEN}"
    moved = run(["ip", "-n", ns, "link", "show", T.OTHER_PORT_IFNAME], check=False)
    if port == 0 and moved.returncode != 0:
        run(["ip", "-n", ns, "link", "set", T.FABRIC_IFNAME, "down"])
        run(["ip", "-n", ns, "addr", "flush", "dev", T.FABRIC_IFNAME])
        _add_veth(node, node.other_port_veth, T.OTHER_PORT_IFNAME)
    elif port == 1 and moved.returncode == 0:
        run(["ip", "link", "del", node.other_port_veth], check=False)
        run(["ip", "-n", ns, "link", "del", T.OTHER_PORT_IFNAME], check=False)
        run(["ip", "-n", ns, "addr", "replace", address, "dev", T.FABRIC_IFNAME])
        run(["ip", "-n", ns, "link", "set", T.FABRIC_IFNAME, "up"])
    rdma.refresh(node)
