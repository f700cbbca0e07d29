"""/sys/class/infiniband in a node's SSH sessions, as on a Spark: launchers (sparkrun) detect RoCE
there (`<dev>/ports/1/state` "4: ACTIVE", `link_layer` "Ethernet", `gid_attrs/types/<i>`
"RoCE v2", `device/net/<netdev>`).

sysfs cannot be written, and a class directory cannot be made in it. So, in the mount namespace
of the node's sshd (the one `ip netns exec` made, whose /sys shows the node's interfaces), a
tmpfs goes over /sys/class with each real class directory bound back in (`/sys/class/net` and the
others read as before: their entries are relative links into /sys/devices) and an `infiniband`
directory of plain files. The devices and their Up/Down states are the node's own `ibdev2netdev`'s
(the emulator's: a Spark's four names, the cabled port and its twin Up), so the two always agree;
`refresh` rewrites the states (a pulled cable: `set_fabric_link`). Containers have a sysfs of
their own and no /sys/class/infiniband (the lab has no RDMA devices to give them).
"""

from __future__ import annotations

import ipaddress
import json
import shutil
from pathlib import Path

from . import sshd
from . import topology as T
from .errors import LabError
from .preflight import tool
from .proc import run

FS_SOURCE = "spark-lab-sysclass"  # the tmpfs's name in mountinfo
CONNECTX7 = {  # what mlx5 shows for a Spark's ConnectX-7
    "node_type": "1: CA",
    "hca_type": "MT4129",
    "fw_ver": "28.45.1200",
}
RATE = "200 Gb/sec (4X HDR)"
OVER_SYS_CLASS = """set -e
stage=$1
mount -t tmpfs -o mode=0755,size=4m "$2" "$stage"
for entry in /sys/class/*; do
    mkdir "$stage/${entry##*/}"
    mount --bind "$entry" "$stage/${entry##*/}"
done
mkdir "$stage/infiniband"
mount --move "$stage" /sys/class
"""


def _mounted(pid: int) -> bool:
    with open(f"/proc/{pid}/mountinfo") as f:
        for line in f:
            left, right = line.split(" - ", 1)
            if left.split()[4] == "/sys/class" and right.split()[1] == FS_SOURCE:
                return True
    return False


def _ports(node: T.Node, pid: int) -> list[tuple[str, str, bool]]:
    """(RoCE device, netdev, up) as the node's ibdev2netdev prints them in its sessions."""
    p = run(
        [tool("nsenter"), "-t", str(pid), "-m", "-n", str(node.bin_dir / "ibdev2netdev")],
        env={"PATH": T.SYSTEM_PATH},
    )
    ports = []
    for line in p.stdout.decode().splitlines():  # rocep1s0f1 port 1 ==> enp1s0f1np1 (Up)
        fields = line.split()
        ports.append((fields[0], fields[4], fields[5] == "(Up)"))
    return ports


def _gids(node: T.Node, netdev: str) -> list[tuple[str, str]]:
    """(GID, type) by index as mlx5 fills the table: the link-local address as RoCE v1 and v2,
    then the IPv4-mapped address as v1 and v2 (index 3: the one NCCL_IB_GID_INDEX names)."""
    p = run(["ip", "-n", node.netns, "-j", "addr", "show", "dev", netdev], check=False)
    if p.returncode != 0:
        return []  # the twin of a port has no netdev of its own in the lab
    addrs = json.loads(p.stdout)[0].get("addr_info", [])
    gids = []
    for family, prefix in (("inet6", ""), ("inet", "::ffff:")):
        for a in addrs:
            if a["family"] == family and (family == "inet" or a["local"].startswith("fe80")):
                gid = ipaddress.IPv6Address(prefix + a["local"]).exploded
                gids += [(gid, "IB/RoCE v1"), (gid, "RoCE v2")]
                break
    return gids


def _write_device(root: Path, node: T.Node, device: str, netdev: str, up: bool) -> None:
    d = root / device
    for stale in ("ports/1/gids", "ports/1/gid_attrs"):  # the node's addresses may have changed
        shutil.rmtree(d / stale, ignore_errors=True)
    files = {
        **CONNECTX7,
        "node_desc": f"{node.name} {device}",
        "ports/1/state": "4: ACTIVE" if up else "1: DOWN",
        "ports/1/phys_state": "5: LinkUp" if up else "3: Disabled",
        "ports/1/link_layer": "Ethernet",
        "ports/1/rate": RATE,
    }
    for index, (gid, kind) in enumerate(_gids(node, netdev)):
        files[f"ports/1/gids/{index}"] = gid
        files[f"ports/1/gid_attrs/types/{index}"] = kind
        files[f"ports/1/gid_attrs/ndevs/{index}"] = netdev
    for sub in ("device/net", "ports/1/gids", "ports/1/gid_attrs/types", "ports/1/gid_attrs/ndevs"):
        (d / sub).mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (d / name).write_text(text + "\n")
    link = d / "device" / "net" / netdev
    if not link.is_symlink():
        link.symlink_to(f"/sys/class/net/{netdev}")


def refresh(node: T.Node) -> None:
    """Rewrite the node's /sys/class/infiniband from its ports' states now (nothing to do while
    its sshd is down: `ensure` writes it when sshd starts)."""
    pid = sshd.pid(node)
    if pid is None or not _mounted(pid):
        return
    root = Path(f"/proc/{pid}/root/sys/class/infiniband")
    for device, netdev, up in _ports(node, pid):
        _write_device(root, node, device, netdev, up)


def ensure(node: T.Node) -> None:
    """Give the node's sessions /sys/class/infiniband (after its sshd started)."""
    pid = sshd.pid(node)
    if pid is None:
        raise LabError(f"sshd for {node.name} is not running")
    if not _mounted(pid):
        stage = node.run_dir / "sysclass"
        stage.mkdir(parents=True, exist_ok=True)
        run(
            [
                tool("nsenter"),
                "-t",
                str(pid),
                "-m",
                "sh",
                "-c",
                OVER_SYS_CLASS,
                "sh",
                str(stage),
                FS_SOURCE,
            ]
        )
    refresh(node)
