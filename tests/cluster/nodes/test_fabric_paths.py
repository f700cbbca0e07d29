"""NVIDIA's two-subnet layout and a peer cabled to the other port, on the real tools' output:
`ibdev2netdev` as NVIDIA's playbooks print it on a Spark (dgx-spark-playbooks@0db7c141
nvidia/connect-two-sparks/README.md Step 2: port 1 cabled; assets/performance_benchmarking_guide.md
Step 1: port 0 cabled), `ip -o -f inet addr show` lines with the playbook's netplan addresses
(Step 3: enp1s0f1np1 192.168.100.x/24, enP2p1s0f1np1 192.168.101.x/24)."""

from __future__ import annotations

from cluster.nodes.fabric_paths import missing_path, subnets, unaddressed
from cluster.nodes.interfaces import (
    InterfaceProblem,
    NodeInterfaces,
    Unresolved,
    resolve_interfaces,
)

PORT_1_UP = """roceP2p1s0f0 port 1 ==> enP2p1s0f0np0 (Down)
roceP2p1s0f1 port 1 ==> enP2p1s0f1np1 (Up)
rocep1s0f0 port 1 ==> enp1s0f0np0 (Down)
rocep1s0f1 port 1 ==> enp1s0f1np1 (Up)
"""
PORT_0_UP = """rocep1s0f0 port 1 ==> enp1s0f0np0 (Up)
rocep1s0f1 port 1 ==> enp1s0f1np1 (Down)
roceP2p1s0f0 port 1 ==> enP2p1s0f0np0 (Up)
roceP2p1s0f1 port 1 ==> enP2p1s0f1np1 (Down)
"""


def ip_addr(*lines: tuple[str, str]) -> str:
    """`ip -o -f inet addr show` as iproute2 prints it, one line per (interface, address)."""
    out = [
        "1: lo    inet 127.0.0.1/8 scope host lo\\       valid_lft forever preferred_lft forever"
    ]
    for i, (ifname, cidr) in enumerate(lines, start=4):
        out.append(
            f"{i}: {ifname}    inet {cidr} brd 0.0.0.0 scope global noprefixroute {ifname}\\"
            "       valid_lft forever preferred_lft forever"
        )
    return "\n".join(out) + "\n"


def node(ibdev: str, addrs: str, fabric_ip: str) -> NodeInterfaces:
    return resolve_interfaces(
        fabric_ip=fabric_ip,
        eth_choice="auto",
        ib_choice="auto",
        ibdev2netdev_output=ibdev,
        ip_addr_output=addrs,
    )


def two_subnets(host: int) -> NodeInterfaces:
    return node(
        PORT_1_UP,
        ip_addr(
            ("enp1s0f1np1", f"192.168.100.{host}/24"), ("enP2p1s0f1np1", f"192.168.101.{host}/24")
        ),
        f"192.168.100.{host}",
    )


def test_the_two_subnet_layout_gives_nccl_both_halves_of_the_port():
    found = two_subnets(10)
    assert found.eth_if == "enp1s0f1np1"  # NCCL_SOCKET_IFNAME, as NVIDIA's NCCL playbook sets it
    assert found.ib_if == ("roceP2p1s0f1", "rocep1s0f1")  # NCCL_IB_HCA: both logical interfaces
    assert {s: a.device for s, a in subnets(found).items()} == {
        "192.168.100.0/24": "rocep1s0f1",
        "192.168.101.0/24": "roceP2p1s0f1",
    }
    assert missing_path({"spark-a": found, "spark-b": two_subnets(11)}) is None


def test_a_node_without_the_second_subnet_has_no_path_on_it():
    one = node(PORT_1_UP, ip_addr(("enp1s0f1np1", "192.168.100.11/24")), "192.168.100.11")
    path = missing_path({"spark-a": two_subnets(10), "spark-b": one})
    assert path is not None and not path.other_port
    assert (path.node, path.subnet, path.peer) == ("spark-b", "192.168.101.0/24", "spark-a")
    assert path.values()["peer_netdev"] == "enP2p1s0f1np1"
    assert [bare.netdev for bare in unaddressed(one)] == ["enP2p1s0f1np1"]


def test_an_extra_address_beside_one_both_hold_is_no_missing_path():
    # a management address added on one node's fabric netdev, and one the kernel gave itself
    extra = node(
        PORT_1_UP,
        ip_addr(
            ("enp1s0f1np1", "192.168.100.10/24"),
            ("enp1s0f1np1", "10.77.0.10/24"),
            ("enP2p1s0f1np1", "192.168.101.10/24"),
            ("enP2p1s0f1np1", "169.254.3.7/16"),
        ),
        "192.168.100.10",
    )
    assert "10.77.0.0/24" in subnets(extra) and "169.254.0.0/16" in subnets(extra)
    assert missing_path({"spark-a": extra, "spark-b": two_subnets(11)}) is None
    # the same extra address alone on a netdev is a device with no path to the peer
    alone = node(
        PORT_1_UP,
        ip_addr(("enp1s0f1np1", "192.168.100.10/24"), ("enP2p1s0f1np1", "10.77.0.10/24")),
        "192.168.100.10",
    )
    path = missing_path({"spark-a": alone, "spark-b": two_subnets(11)})
    assert path is not None and path.subnet == "10.77.0.0/24" and path.node == "spark-b"


def test_a_peer_cabled_to_the_other_port_has_no_address_where_its_cable_is():
    # spark-b's netplan addresses port 1 (no carrier: no address assigned); its cable is in port 0
    try:
        node(PORT_0_UP, ip_addr(), "192.168.100.11")
    except InterfaceProblem as problem:
        other = Unresolved(
            str(problem), (("rocep1s0f0", "enp1s0f0np0"), ("roceP2p1s0f0", "enP2p1s0f0np0"))
        )
    path = missing_path({"spark-a": two_subnets(10), "spark-b": other})
    assert path is not None and path.other_port and path.node == "spark-b"
    assert path.values()["netdevs"] == "enp1s0f0np0, enP2p1s0f0np0"


def test_the_other_port_with_the_address_kept_on_the_port_without_carrier():
    # networkd's ConfigureWithoutCarrier, or `ip addr add` by hand: the address stays on the
    # port that is Down; the Up port holds none
    kept = node(PORT_0_UP, ip_addr(("enp1s0f1np1", "192.168.100.11/24")), "192.168.100.11")
    assert kept.addresses == ()
    path = missing_path({"spark-a": two_subnets(10), "spark-b": kept})
    assert path is not None and path.other_port


def test_a_node_that_cannot_be_resolved_for_another_reason_is_left_to_its_own_failure():
    broken = Unresolved("`ibdev2netdev` failed (exit 127): not found")
    assert missing_path({"spark-a": two_subnets(10), "spark-b": broken}) is None
