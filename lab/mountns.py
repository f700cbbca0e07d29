"""Each node's own filesystem view: a mount namespace in which the node's home is bound over
/root and its own directory over /tmp, shared by the node's sshd and dockerd (so an SSH session
and a container's bind mount of the same path see the same files). The host's /root and /tmp are
untouched: the namespace is a slave of the host's (host mounts show in it, its own never leak).

It is kept alive by a bind mount of its nsfs file under MOUNT_NS_DIR (a private mount: a
mount namespace's file cannot live on a shared one), as `ip netns` keeps network namespaces.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from . import topology as T
from .preflight import tool
from .proc import run

SKELETON = Path("/etc/skel")  # what a new root home starts with (.bashrc, .profile)


def _mount_points() -> dict[str, str]:
    """This (the host's) mount namespace: mount point -> file system type."""
    found = {}
    with open("/proc/self/mountinfo") as f:
        for line in f:
            left, right = line.split(" - ", 1)
            found[left.split()[4].replace("\\040", " ")] = right.split()[0]
    return found


def ensure_dir() -> None:
    """Before the nodes' namespaces are made (once, not per node: they are made concurrently)."""
    T.MOUNT_NS_DIR.mkdir(parents=True, exist_ok=True)
    if str(T.MOUNT_NS_DIR) not in _mount_points():
        run(["mount", "--bind", str(T.MOUNT_NS_DIR), str(T.MOUNT_NS_DIR)])
    run(["mount", "--make-private", str(T.MOUNT_NS_DIR)])


def exists(node: T.Node) -> bool:
    return _mount_points().get(str(node.mount_ns)) == "nsfs"


def sees_home(pid: int, node: T.Node) -> bool:
    """The process's /root is the node's home (it runs in the node's mount namespace or in one
    made from it, as `ip netns exec` makes for sshd)."""
    try:
        inside, home = os.stat(f"/proc/{pid}/root/root"), os.stat(node.home)
    except OSError:
        return False
    return (inside.st_dev, inside.st_ino) == (home.st_dev, home.st_ino)


def _ensure_home(node: T.Node) -> None:
    if not node.home.is_dir():
        node.home.mkdir(parents=True)
        if SKELETON.is_dir():
            shutil.copytree(SKELETON, node.home, symlinks=True, dirs_exist_ok=True)
    os.chmod(node.home, 0o700)  # sshd's StrictModes: root's home writable by root alone
    for sub, mode in ((".ssh", 0o700), (".cache/huggingface/hub", 0o755)):
        d = node.home / sub
        d.mkdir(parents=True, exist_ok=True)
        os.chmod(d, mode)


def ensure(node: T.Node) -> bool:
    """Make the node's home, /tmp and mount namespace unless it exists. Returns True when made
    (as a boot: the node's /tmp starts empty, and its sshd and dockerd must be started in it)."""
    _ensure_home(node)
    if exists(node):
        return False
    shutil.rmtree(node.tmp, ignore_errors=True)
    node.tmp.mkdir(parents=True)
    os.chmod(node.tmp, 0o1777)
    node.mount_ns.touch()
    run(
        [
            tool("unshare"),
            f"--mount={node.mount_ns}",
            "--propagation",
            "slave",
            "sh",
            "-c",
            'mount --bind "$1" "$3" && mount --bind "$2" /tmp',
            "sh",
            str(node.home),
            str(node.tmp),
            T.NODE_ROOT_HOME,
        ]
    )
    return True


def enter(node: T.Node, argv: list[str]) -> list[str]:
    """argv run in the node's mount namespace."""
    return [tool("nsenter"), f"--mount={node.mount_ns}", *argv]


def mounts(node: T.Node) -> list[str]:
    """Mount points in the node's namespace (empty if it has none)."""
    if not exists(node):
        return []
    p = run(enter(node, ["cat", "/proc/self/mountinfo"]), check=False)
    return [line.split()[4].replace("\\040", " ") for line in p.stdout.decode().splitlines()]


def remove(node: T.Node) -> None:
    """Let the namespace go (it ends with its last process) and remove the node's /tmp."""
    if str(node.mount_ns) in _mount_points():
        run(["umount", "-l", str(node.mount_ns)], check=False)
    node.mount_ns.unlink(missing_ok=True)
    shutil.rmtree(node.tmp, ignore_errors=True)


def remove_dir() -> None:
    if str(T.MOUNT_NS_DIR) in _mount_points():
        run(["umount", "-l", str(T.MOUNT_NS_DIR)], check=False)
