"""One Docker engine per node, started inside the node's network namespace with
`nsenter --net=...` (not `ip netns exec`: that remounts /sys and dockerd then fails
with "Devices cgroup isn't mounted") and in the node's mount namespace (`--mount=...`: a
container's bind mount of /root/... is the node's home, as a session sees it)."""

from __future__ import annotations

import http.client
import json
import os
import signal
import socket
import subprocess
import time
from pathlib import Path

from . import mountns
from . import topology as T
from .errors import LabError
from .preflight import tool
from .proc import as_host, has_own_uts, live_pid, pid_alive, pids_with_cmdline, run, terminate


class _UnixHTTPConnection(http.client.HTTPConnection):
    def __init__(self, path: str, timeout: float = 5.0):
        super().__init__("localhost", timeout=timeout)
        self._path = path

    def connect(self):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            s.settimeout(self.timeout)
            s.connect(self._path)
        except BaseException:
            s.close()  # (an engine not up yet: pinged again soon, no socket left behind)
            raise
        self.sock = s


def api(node: T.Node, method: str, path: str, timeout: float = 5.0) -> tuple[int, bytes]:
    conn = _UnixHTTPConnection(str(node.docker_sock), timeout)
    try:
        conn.request(method, path)
        r = conn.getresponse()
        return r.status, r.read()
    finally:
        conn.close()


def ping(node: T.Node) -> bool:
    try:
        status, body = api(node, "GET", "/_ping", timeout=2)
        return status == 200 and body.strip() == b"OK"
    except OSError:
        return False


def version(node: T.Node) -> str | None:
    try:
        status, body = api(node, "GET", "/version")
        return json.loads(body).get("Version") if status == 200 else None
    except (OSError, ValueError):
        return None


def pid(node: T.Node) -> int | None:
    return live_pid(node.docker_pidfile, str(node.exec_root))


def alive(node: T.Node) -> bool:
    return pid(node) is not None and ping(node)


def _environment(p: int) -> dict[str, str]:
    try:
        raw = Path(f"/proc/{p}/environ").read_bytes()
    except OSError:
        return {}
    pairs = (item.split(b"=", 1) for item in raw.split(b"\0") if b"=" in item)
    return {k.decode(errors="replace"): v.decode(errors="replace") for k, v in pairs}


def _current(node: T.Node, p: int) -> bool:
    """Started as `start` starts it now: the GPU hook on its PATH, the node's hostname and its
    home (an engine from an older lab lacks them and is restarted)."""
    path = _environment(p).get("PATH", "").split(":")
    return str(node.bin_dir) in path and has_own_uts(p) and mountns.sees_home(p, node)


def cli(
    node: T.Node,
    *args: str,
    check: bool = True,
    input: bytes | None = None,
    timeout: float | None = 600,
) -> subprocess.CompletedProcess:
    """Run the docker CLI against the node's engine."""
    env = dict(
        os.environ, DOCKER_HOST=node.docker_host, DOCKER_BUILDKIT="0", DOCKER_CLI_HINTS="false"
    )
    return run([tool("docker"), *args], check=check, input=input, env=env, timeout=timeout)


def _argv(node: T.Node) -> list[str]:
    return [
        tool("nsenter"),
        f"--net={node.netns_path}",
        f"--mount={node.mount_ns}",
        *as_host(node.name, [tool("dockerd")]),
        "--config-file",
        str(node.dockerd_config),
        "--data-root",
        str(node.data_root),
        "--exec-root",
        str(node.exec_root),
        "-H",
        node.docker_host,
        "--pidfile",
        str(node.docker_pidfile),
        "--bridge=none",
        "--iptables=false",
        "--ip6tables=false",
        "--ip-masq=false",
        "--cgroup-parent",
        node.cgroup_parent,
        "--shutdown-timeout",
        "3",
        "--storage-driver",
        "overlay2",
    ]


def _under(mount_points: list[str], prefixes: list[str]) -> list[str]:
    found = [mp for mp in mount_points if any(mp == p or mp.startswith(p + "/") for p in prefixes)]
    return sorted(found, key=len, reverse=True)


def _host_mount_points() -> list[str]:
    try:
        with open("/proc/self/mountinfo") as f:
            return [line.split()[4].replace("\\040", " ") for line in f]
    except OSError:
        return []


def cleanup_stale(node: T.Node) -> None:
    """After a crash: leftover shims/containers of the node, mounts, pid file, socket."""
    for cg_pid in cgroup_pids(node):
        terminate(cg_pid, 2)
    for p in pids_with_cmdline(str(node.exec_root)):
        terminate(p, 3)
    ours = [str(node.exec_root), str(node.data_root)]
    for mp in _under(mountns.mounts(node), ours):  # the engine's, in the node's namespace
        run(mountns.enter(node, ["umount", "-l", mp]), check=False)
    for mp in _under(_host_mount_points(), ours):  # an engine of an older lab made them here
        run(["umount", "-l", mp], check=False)
    node.docker_pidfile.unlink(missing_ok=True)
    node.docker_sock.unlink(missing_ok=True)


def cgroup_pids(node: T.Node) -> list[int]:
    pids: set[int] = set()
    base = Path("/sys/fs/cgroup/pids") / node.cgroup_parent
    if base.is_dir():
        for procs in base.rglob("cgroup.procs"):
            try:
                pids.update(int(x) for x in procs.read_text().split())
            except OSError:
                pass
    return sorted(p for p in pids if pid_alive(p))


def remove_cgroups(node: T.Node) -> None:
    root = Path("/sys/fs/cgroup")
    if not root.is_dir():
        return
    for ctrl in root.iterdir():
        d = ctrl / node.cgroup_parent
        if d.is_dir():
            for sub in sorted(
                (p for p in d.rglob("*") if p.is_dir()), key=lambda p: len(str(p)), reverse=True
            ):
                try:
                    sub.rmdir()
                except OSError:
                    pass
            try:
                d.rmdir()
            except OSError:
                pass


CPUSET_ROOT = Path("/sys/fs/cgroup/cpuset")


def pin_cpus(node: T.Node, cpus: str | None) -> None:
    """Give the node's containers these CPUs (cgroup v1 cpuset of the engine's cgroup parent;
    Docker copies it into each new container). None: every CPU of the machine."""
    if not CPUSET_ROOT.is_dir():
        raise LabError(
            "no cgroup v1 cpuset hierarchy at /sys/fs/cgroup/cpuset: cannot give "
            "each node its own core"
        )
    parent = CPUSET_ROOT / node.cgroup_parent
    parent.mkdir(exist_ok=True)
    want = cpus or (CPUSET_ROOT / "cpuset.cpus").read_text().strip()
    if (parent / "cpuset.cpus").read_text().strip() == want:
        return
    if not (parent / "cpuset.mems").read_text().strip():
        (parent / "cpuset.mems").write_text((CPUSET_ROOT / "cpuset.mems").read_text())
    try:
        (parent / "cpuset.cpus").write_text(want)
    except OSError as e:
        raise LabError(
            f"cannot set {node.name}'s CPUs to {want} ({e}): a container of the node "
            "still runs on others; remove the node's containers and run `lab up` again"
        ) from e


def start(node: T.Node, timeout: float = 60.0, *, keep_containers: bool = False) -> bool:
    """Start the engine unless it answers already. Returns True if freshly started.
    `keep_containers`: after `stop(keep_containers=True)`, restore the containers still running
    (live-restore) instead of clearing them away as after a crash."""
    p = pid(node)
    if p and ping(node) and _current(node, p):
        return False
    if p:  # running but not answering: restart it
        terminate(p, 10)
    if keep_containers:
        node.docker_pidfile.unlink(missing_ok=True)
        node.docker_sock.unlink(missing_ok=True)
    else:
        cleanup_stale(node)
    node.state_dir.mkdir(parents=True, exist_ok=True)
    node.run_dir.mkdir(parents=True, exist_ok=True)
    node.data_root.mkdir(parents=True, exist_ok=True)
    # Without live-restore at start-up, dockerd kills the containers it finds still running.
    node.dockerd_config.write_text(
        json.dumps({"live-restore": True}) + "\n" if keep_containers else "{}\n"
    )
    with open(node.dockerd_log, "ab") as log:
        log.write(f"\n--- spark-lab: starting dockerd {time.ctime()}\n".encode())
        log.flush()
        # setsid -f: detach into its own session, re-parented to init (no zombie here)
        subprocess.run(
            [tool("setsid"), "-f", *_argv(node)],
            env=dict(os.environ, PATH=node.remote_path),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            check=True,
        )
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if ping(node):
            if keep_containers:
                set_live_restore(node, False)  # the lab's engines otherwise run without it
            return True
        time.sleep(0.05)
    tail = node.dockerd_log.read_text(errors="replace")[-2000:]
    raise LabError(
        f"dockerd for {node.name} did not answer on {node.docker_sock} within "
        f"{timeout:.0f}s; log {node.dockerd_log}:\n{tail}"
    )


def remove_all_containers(node: T.Node) -> None:
    p = cli(node, "ps", "-aq", check=False, timeout=30)
    ids = p.stdout.decode().split()
    if ids:
        cli(node, "rm", "-f", *ids, check=False, timeout=60)


def set_live_restore(node: T.Node, on: bool, timeout: float = 10.0) -> None:
    """Turn live-restore on or off in the running engine (a SIGHUP reloads it)."""
    node.dockerd_config.write_text(json.dumps({"live-restore": on}) + "\n")
    p = pid(node)
    if p is None:
        raise LabError(f"dockerd for {node.name} is not running")
    os.kill(p, signal.SIGHUP)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status, body = api(node, "GET", "/info")
        if status == 200 and json.loads(body).get("LiveRestoreEnabled") is on:
            return
        time.sleep(0.05)
    raise LabError(
        f"dockerd for {node.name} did not reload live-restore={on} within {timeout:.0f}s"
    )


def kill(node: T.Node, timeout: float = 10.0) -> None:
    """SIGKILL the engine (dockerd and the containerd it runs), configured with live-restore as
    production engines often are: its API goes away at once, its containers keep running
    (their shims outlive it) until `start(keep_containers=True)` restores them."""
    p = pid(node)
    if p is None:
        raise LabError(f"dockerd for {node.name} is not running")
    set_live_restore(node, True)
    containerd_pidfile = node.exec_root / "containerd" / "containerd.pid"
    containerd = live_pid(containerd_pidfile, "containerd")
    for victim in (p, containerd):
        if victim is not None:
            os.kill(victim, signal.SIGKILL)
    deadline = time.monotonic() + timeout
    while any(v is not None and pid_alive(v) for v in (p, containerd)):
        if time.monotonic() > deadline:
            raise LabError(f"dockerd for {node.name} outlived SIGKILL for {timeout:g}s")
        time.sleep(0.05)
    # Killed, they may linger as zombies (nothing here reaps them), which the next dockerd
    # would take for a containerd still running: forget its pid.
    containerd_pidfile.unlink(missing_ok=True)


def stop(node: T.Node, remove_containers: bool = True, *, keep_containers: bool = False) -> None:
    """Stop the engine; its containers go too, unless `keep_containers`: then the engine stops
    with live-restore on and they keep running without it (until `start(keep_containers=True)`)."""
    p = pid(node)
    if p and keep_containers:
        set_live_restore(node, True)
        terminate(p, 20)
        return
    if p and remove_containers and ping(node):
        remove_all_containers(node)
    if p:
        terminate(p, 20)
    cleanup_stale(node)
