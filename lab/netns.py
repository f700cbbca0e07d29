"""Network plumbing: two host bridges, one namespace per node, veth pairs, iptables.

Management: bridge sblab-mgmt (198.18.0.1/24 on the host) <-> enP7s7 in each node.
Fabric:     bridge sblab-fab (no host address)           <-> enp1s0f1np1 in each node.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from . import topology as T
from .proc import out, run


def _ip(*args: str, check: bool = True):
    return run(["ip", *args], check=check)


def _link_exists(name: str, netns: str | None = None) -> bool:
    cmd = ["ip"] + (["-n", netns] if netns else []) + ["link", "show", "dev", name]
    return run(cmd, check=False).returncode == 0


def list_netns() -> list[str]:
    try:
        return sorted(n for n in os.listdir("/var/run/netns") if n.startswith(T.NETNS_PREFIX))
    except FileNotFoundError:
        return []


def lab_node_indexes() -> list[int]:
    """Indexes of sblab<i> namespaces present on the host (also stale ones)."""
    idx = []
    for n in list_netns():
        rest = n[len(T.NETNS_PREFIX) :]
        if rest.isdigit():
            idx.append(int(rest))
    return sorted(idx)


def addrs(netns: str) -> dict[str, list[str]]:
    """ifname -> ['ip/prefix', ...] (IPv4) inside a namespace."""
    p = run(["ip", "-n", netns, "-j", "-4", "addr", "show"], check=False)
    if p.returncode != 0:
        return {}
    result: dict[str, list[str]] = {}
    for link in json.loads(p.stdout or b"[]"):
        result[link["ifname"]] = [
            f"{a['local']}/{a['prefixlen']}" for a in link.get("addr_info", [])
        ]
    return result


def link_up(netns: str, ifname: str) -> bool:
    p = run(["ip", "-n", netns, "-j", "link", "show", "dev", ifname], check=False)
    if p.returncode != 0:
        return False
    info = json.loads(p.stdout)[0]
    return "UP" in info.get("flags", [])


def set_link(netns: str, ifname: str, up: bool) -> None:
    """Set an interface inside a namespace up or down (a pulled cable, as the node sees it)."""
    _ip("-n", netns, "link", "set", ifname, "up" if up else "down")


# --- bridges ----------------------------------------------------------------
def ensure_bridge(name: str, addr: str | None) -> None:
    if not _link_exists(name):
        _ip("link", "add", name, "type", "bridge")
    # make the bridge forward immediately (no STP learning delay)
    run(
        ["ip", "link", "set", name, "type", "bridge", "forward_delay", "0", "stp_state", "0"],
        check=False,
    )
    if addr:
        have = out(["ip", "-4", "-o", "addr", "show", "dev", name])
        if addr not in have:
            _ip("addr", "flush", "dev", name)
            _ip("addr", "add", addr, "dev", name)
    _ip("link", "set", name, "up")


def ensure_bridges() -> None:
    ensure_bridge(T.MGMT_BRIDGE, f"{T.MGMT_HOST_IP}/{T.PREFIXLEN}")
    ensure_bridge(T.FABRIC_BRIDGE, None)
    ensure_forwarding()


def delete_bridges() -> None:
    remove_forwarding()
    for br in (T.MGMT_BRIDGE, T.FABRIC_BRIDGE):
        if _link_exists(br):
            _ip("link", "del", br, check=False)


# --- iptables ---------------------------------------------------------------
def _fw_rules() -> list[list[str]]:
    rules = []
    for br in (T.MGMT_BRIDGE, T.FABRIC_BRIDGE):
        rules.append(
            ["FORWARD", "-i", br, "-j", "ACCEPT", "-m", "comment", "--comment", "spark-lab"]
        )
        rules.append(
            ["FORWARD", "-o", br, "-j", "ACCEPT", "-m", "comment", "--comment", "spark-lab"]
        )
    return rules


def ensure_forwarding() -> None:
    """A host dockerd may set FORWARD policy DROP; with br_netfilter loaded
    (bridge-nf-call-iptables=1) that would cut bridged traffic between nodes.
    Explicit ACCEPT rules for the two bridges, inserted first."""
    for rule in _fw_rules():
        if run(["iptables", "-C", *rule], check=False).returncode != 0:
            run(["iptables", "-I", rule[0], "1", *rule[1:]], check=False)


def remove_forwarding() -> None:
    for rule in _fw_rules():
        while run(["iptables", "-C", *rule], check=False).returncode == 0:
            if run(["iptables", "-D", *rule], check=False).returncode != 0:
                break


def forwarding_ok() -> bool:
    return all(run(["iptables", "-C", *r], check=False).returncode == 0 for r in _fw_rules())


# --- nodes ------------------------------------------------------------------
def _ensure_iface(node: T.Node, host_end: str, inner: str, bridge: str, addr: str) -> bool:
    """Returns True when the veth pair had to be (re)created (a new MAC address)."""
    ns = node.netns
    created = False
    if not _link_exists(inner, ns):
        created = True
        if _link_exists(host_end):  # stale host end whose peer is gone/elsewhere
            _ip("link", "del", host_end, check=False)
        _ip("link", "add", host_end, "type", "veth", "peer", "name", inner, "netns", ns)
    if not _link_exists(host_end):  # inner exists but is not a veth to us: recreate
        created = True
        _ip("-n", ns, "link", "del", inner, check=False)
        _ip("link", "add", host_end, "type", "veth", "peer", "name", inner, "netns", ns)
    _ip("link", "set", host_end, "master", bridge)
    _ip("link", "set", host_end, "up")
    cidr = f"{addr}/{T.PREFIXLEN}"
    have = addrs(ns).get(inner, [])
    if have != [cidr]:
        _ip("-n", ns, "addr", "flush", "dev", inner)
        _ip("-n", ns, "addr", "add", cidr, "dev", inner)
    _ip("-n", ns, "link", "set", inner, "up")
    return created


def _remove_iface(node: T.Node, host_end: str, inner: str) -> None:
    if _link_exists(host_end):
        _ip("link", "del", host_end, check=False)
    if node.netns in list_netns() and _link_exists(inner, node.netns):
        _ip("-n", node.netns, "link", "del", inner, check=False)


def ensure_node(node: T.Node, with_mgmt: bool) -> bool:
    """Returns True if any interface was (re)created: neighbour caches are then stale."""
    created = False
    if node.netns not in list_netns():
        _ip("netns", "add", node.netns)
    _ip("-n", node.netns, "link", "set", "lo", "up")
    if with_mgmt:
        created |= _ensure_iface(node, node.mgmt_veth, T.MGMT_IFNAME, T.MGMT_BRIDGE, node.mgmt_ip)
    else:
        if _link_exists(node.mgmt_veth) or _link_exists(T.MGMT_IFNAME, node.netns):
            created = True
        _remove_iface(node, node.mgmt_veth, T.MGMT_IFNAME)
    created |= _ensure_iface(
        node, node.fabric_veth, T.FABRIC_IFNAME, T.FABRIC_BRIDGE, node.fabric_ip
    )
    return created


def flush_neighbours(nodes: list[T.Node]) -> None:
    """Forget cached (possibly FAILED) ARP entries after links were recreated."""
    run(["ip", "neigh", "flush", "dev", T.MGMT_BRIDGE], check=False)
    for n in nodes:
        run(["ip", "-n", n.netns, "neigh", "flush", "all"], check=False)


def node_ok(node: T.Node, with_mgmt: bool) -> bool:
    if node.netns not in list_netns():
        return False
    a = addrs(node.netns)
    want = {T.FABRIC_IFNAME: [f"{node.fabric_ip}/{T.PREFIXLEN}"]}
    if with_mgmt:
        want[T.MGMT_IFNAME] = [f"{node.mgmt_ip}/{T.PREFIXLEN}"]
    elif T.MGMT_IFNAME in a:
        return False
    return all(a.get(k) == v for k, v in want.items()) and "lo" in a


def delete_node(node: T.Node) -> None:
    """Remove a node's namespace; its veth peers go with it."""
    for host_end in (node.mgmt_veth, node.fabric_veth):
        if _link_exists(host_end):
            _ip("link", "del", host_end, check=False)
    if node.netns in list_netns():
        _ip("netns", "del", node.netns, check=False)
    # `ip netns del` can leave the mount point if something still holds it
    p = Path(node.netns_path)
    if p.exists():
        run(["umount", "-l", str(p)], check=False)
        try:
            p.unlink()
        except OSError:
            pass


def stale_host_links() -> list[str]:
    """Host links that look like ours (sbm<i>/sbf<i>/sbs<i>/sbo<i>, bridges)."""
    p = run(["ip", "-j", "link", "show"], check=False)
    names = [link["ifname"] for link in json.loads(p.stdout or b"[]")]
    return [
        n
        for n in names
        if n in (T.MGMT_BRIDGE, T.FABRIC_BRIDGE)
        or (n[:3] in T.HOST_VETH_PREFIXES and n[3:].isdigit())
    ]
