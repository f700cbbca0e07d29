"""Node-to-node SSH trust, as on a real pair (launch scripts ssh from the head to the workers):
each node's root has its own key, its authorized_keys admits every node's key and the lab's
client key, its known_hosts holds every node's host key under the names the others use
(management IP, fabric IP, hostname), and the hostnames resolve in its sessions."""

from __future__ import annotations

import os
from pathlib import Path

from . import topology as T
from .sshd import host_pubkey


def _public(path: Path) -> str:
    kind, blob, *comment = path.read_text().split()
    return " ".join([kind, blob, *comment[:1]])


def _write(path: Path, text: str, mode: int) -> None:
    """In place (same inode): /etc/netns files are bind-mounted into running sessions."""
    if not path.exists() or path.read_text() != text:
        with open(path, "w") as f:
            f.write(text)
    os.chmod(path, mode)


def write_hosts(node: T.Node, nodes: list[T.Node], isolated_workers: bool) -> None:
    """/etc/hosts of the node's sessions (`ip netns exec` binds /etc/netns/<ns>/hosts over it):
    the host's own lines, then every node's hostname at the address the others reach it by."""
    node.netns_etc.mkdir(parents=True, exist_ok=True)
    try:
        base = Path("/etc/hosts").read_text()
    except FileNotFoundError:
        base = "127.0.0.1\tlocalhost\n"
    lines = [f"{n.ssh_names(isolated_workers)[0]}\t{n.name}\n" for n in nodes]
    _write(node.netns_etc / "hosts", base + "# spark-lab nodes\n" + "".join(lines), 0o644)


def write(nodes: list[T.Node], isolated_workers: bool) -> None:
    """Every node's authorized_keys and known_hosts, for the nodes there are now."""
    admitted = [_public(T.CLIENT_KEY.with_suffix(".pub"))]
    admitted += [_public(n.ssh_key.with_suffix(".pub")) for n in nodes]
    authorized = "".join(f"{key}\n" for key in admitted)
    known = "".join(f"{','.join(n.ssh_names(isolated_workers))} {host_pubkey(n)}\n" for n in nodes)
    for node in nodes:
        ssh_dir = node.ssh_key.parent
        _write(ssh_dir / "authorized_keys", authorized, 0o600)
        _write(ssh_dir / "known_hosts", known, 0o644)
