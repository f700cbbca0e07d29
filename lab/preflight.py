"""Is this machine able to run the lab? Root and the system tools, else exit code 2."""

from __future__ import annotations

import os
import shutil

from .errors import LabError

# tool -> Debian package providing it
REQUIRED = {
    "dockerd": "docker.io",
    "docker": "docker.io",
    "containerd": "containerd",
    "runc": "runc",
    "sshd": "openssh-server",
    "ssh-keygen": "openssh-client",
    "debootstrap": "debootstrap",
    "ip": "iproute2",
    "nsenter": "util-linux",
    "setsid": "util-linux",
    "unshare": "util-linux",
    "iptables": "iptables",
    # what the operators' launch scripts run on a node (its sessions run this machine's tools)
    "rsync": "rsync",
    "nc": "netcat-openbsd",
    "sudo": "sudo",
}
SBIN_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def which(tool: str) -> str | None:
    return shutil.which(tool, path=os.environ.get("PATH", "") + ":" + SBIN_PATH)


def check() -> None:
    if os.geteuid() != 0:
        raise LabError(
            "the lab needs root (network namespaces, bridges, Docker engines): "
            "run it as root, e.g. `sudo .venv/bin/python -m lab up`",
            exit_code=2,
        )
    missing = {t: pkg for t, pkg in REQUIRED.items() if which(t) is None}
    if missing:
        pkgs = " ".join(sorted(set(missing.values())))
        raise LabError(
            f"missing system tools: {', '.join(sorted(missing))}. Install them with "
            f"`sudo scripts/bootstrap.sh` or `apt-get update && apt-get install -y {pkgs}`",
            exit_code=2,
        )


def tool(name: str) -> str:
    path = which(name)
    if path is None:
        check()
        raise LabError(f"{name} not found", exit_code=2)
    return path
