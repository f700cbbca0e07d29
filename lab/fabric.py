"""The fabric interface as a Spark's ConnectX-7 shows it: MTU 9000 on both ends of the node's
veth (the bridge takes the least of its ports'), and a link speed of 200000 Mb/s in the node's
sysfs (a veth reports 10000; the file `Node.fabric_speed_file` is bound over its `speed` in the
mount namespace of the node's sshd, as rdma.py builds /sys/class/infiniband there).
`set_mtu` and `set_speed` make a mismatched or degraded link for a test."""

from __future__ import annotations

from . import sshd
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
