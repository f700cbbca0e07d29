"""Small helpers around processes: run a command, check a pid, stop a daemon."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

from .errors import LabError
from .preflight import tool


def run(
    cmd: list[str],
    *,
    check: bool = True,
    input: bytes | None = None,
    env: dict | None = None,
    timeout: float | None = 120,
) -> subprocess.CompletedProcess:
    p = subprocess.run(cmd, input=input, capture_output=True, env=env, timeout=timeout)
    if check and p.returncode != 0:
        raise LabError(
            f"command failed ({p.returncode}): {' '.join(cmd)}\n"
            f"{p.stderr.decode(errors='replace').strip()}"
        )
    return p


def out(cmd: list[str], **kw) -> str:
    return run(cmd, **kw).stdout.decode(errors="replace")


def pid_alive(pid: int | None) -> bool:
    """True for a running (non-zombie) process."""
    if not pid:
        return False
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False
    return state not in ("Z", "X")


def read_pidfile(path: Path) -> int | None:
    try:
        return int(path.read_text().strip())
    except (FileNotFoundError, ValueError):
        return None


def pid_cmdline(pid: int) -> str:
    try:
        return (
            Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        )
    except OSError:
        return ""


def live_pid(pidfile: Path, must_contain: str) -> int | None:
    """The pid in `pidfile` if that process is alive and its command line contains
    `must_contain` (guards against a recycled pid from a stale file)."""
    pid = read_pidfile(pidfile)
    if pid is not None and pid_alive(pid) and must_contain in pid_cmdline(pid):
        return pid
    return None


def terminate(pid: int, timeout: float = 15.0) -> None:
    """SIGTERM, wait up to `timeout`, then SIGKILL."""
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not pid_alive(pid):
            return
        time.sleep(0.05)
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + 5
    while pid_alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)


def pids_with_cmdline(fragment: str) -> list[int]:
    """Pids whose command line contains `fragment` (a lab-unique path, never a bare name)."""
    found = []
    me = os.getpid()
    for d in os.listdir("/proc"):
        if d.isdigit() and int(d) != me and fragment in pid_cmdline(int(d)):
            found.append(int(d))
    return found


def as_host(name: str, argv: list[str]) -> list[str]:
    """argv run in a new UTS namespace whose hostname is `name`: each node is its own host, as
    `hostname` in its sessions and in its `--network host` containers (which take the engine's)
    show."""
    return [
        tool("unshare"),
        "--uts",
        "sh",
        "-c",
        'hostname "$1" && shift && exec "$@"',
        "sh",
        name,
        *argv,
    ]


def has_own_uts(pid: int) -> bool:
    """The process runs in a UTS namespace of its own (not this process's): started by `as_host`."""
    try:
        return os.readlink(f"/proc/{pid}/ns/uts") != os.readlink("/proc/self/ns/uts")
    except OSError:
        return False
