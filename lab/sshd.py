"""One OpenSSH sshd per node namespace: key-only root login, its own host key,
SetEnv with the node's DOCKER_HOST and PATH; the client key and known_hosts. It runs in the
node's mount namespace (its own /root and /tmp, see mountns.py)."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path

from . import mountns
from . import topology as T
from .errors import LabError
from .preflight import tool
from .proc import as_host, has_own_uts, live_pid, run, terminate


def ensure_key(path: Path, comment: str) -> None:
    """An ed25519 key pair without a passphrase at `path` (+ .pub), made once: kept across
    `down`, so the lab's host keys and trust stay what known_hosts files recorded."""
    pub = path.with_suffix(".pub")
    if path.exists() and pub.exists():
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    path.unlink(missing_ok=True)
    pub.unlink(missing_ok=True)
    run([tool("ssh-keygen"), "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)])


def ensure_client_key() -> None:
    T.SSH_DIR.mkdir(parents=True, exist_ok=True)
    os.chmod(T.SSH_DIR, 0o700)
    ensure_key(T.CLIENT_KEY, "spark-lab")
    pub = T.CLIENT_KEY.with_suffix(".pub").read_text()
    if not T.AUTHORIZED_KEYS.exists() or T.AUTHORIZED_KEYS.read_text() != pub:
        T.AUTHORIZED_KEYS.write_text(pub)
    os.chmod(T.AUTHORIZED_KEYS, 0o600)


def ensure_host_key(node: T.Node) -> None:
    node.state_dir.mkdir(parents=True, exist_ok=True)
    ensure_key(node.host_key, node.name)


def host_pubkey(node: T.Node) -> str:
    kind, blob = node.host_key.with_suffix(".pub").read_text().split()[:2]
    return f"{kind} {blob}"


def write_known_hosts(nodes: list[T.Node], isolated_workers: bool) -> None:
    lines = []
    for n in nodes:
        names = ([n.mgmt_ip] if T.has_mgmt(n, isolated_workers) else []) + [n.fabric_ip]
        lines.append(f"{','.join(names)} {host_pubkey(n)}\n")
    text = "".join(lines)
    if not T.KNOWN_HOSTS.exists() or T.KNOWN_HOSTS.read_text() != text:
        tmp = T.KNOWN_HOSTS.with_suffix(".tmp")
        tmp.write_text(text)
        tmp.replace(T.KNOWN_HOSTS)


def write_client_config(nodes: list[T.Node], isolated_workers: bool) -> None:
    """An ssh_config for people: `ssh -F /var/lib/spark-lab/ssh/config spark-lab-1`
    (isolated workers go through the head with ProxyJump)."""
    parts = []
    for n in nodes:
        direct = T.has_mgmt(n, isolated_workers)
        parts.append(
            f"Host {n.name}\n"
            f"    HostName {n.mgmt_ip if direct else n.fabric_ip}\n"
            + ("" if direct else f"    ProxyJump {nodes[0].name}\n")
            + f"    User {T.SSH_USER}\n    Port {T.SSH_PORT}\n"
            f"    IdentityFile {T.CLIENT_KEY}\n    IdentitiesOnly yes\n"
            f"    UserKnownHostsFile {T.KNOWN_HOSTS}\n    StrictHostKeyChecking yes\n"
            f"    BatchMode yes\n"
        )
    text = "".join(parts)
    if not T.SSH_CONFIG.exists() or T.SSH_CONFIG.read_text() != text:
        T.SSH_CONFIG.write_text(text)
    os.chmod(T.SSH_CONFIG, 0o600)


def config_text(node: T.Node) -> str:
    return f"""# spark-lab sshd for {node.name} (namespace {node.netns}); generated
Port {T.SSH_PORT}
ListenAddress 0.0.0.0
HostKey {node.host_key}
PidFile {node.sshd_pidfile}
AuthorizedKeysFile .ssh/authorized_keys {T.AUTHORIZED_KEYS}
PermitRootLogin prohibit-password
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
AllowStreamLocalForwarding yes
AllowTcpForwarding yes
GatewayPorts no
X11Forwarding no
PrintMotd no
UseDNS no
MaxSessions 100
MaxStartups 100:30:200
ClientAliveInterval 30
LogLevel INFO
SetEnv DOCKER_HOST={node.docker_host} PATH={node.remote_path} SPARK_LAB_NODE={node.index}
Subsystem sftp internal-sftp
"""


def write_profile(node: T.Node) -> None:
    """Login shells source /etc/profile, which resets PATH on Debian. `ip netns exec`
    bind-mounts /etc/netns/<ns>/* over /etc for sshd and its sessions, so give the node
    a copy of /etc/profile that puts the node's tool dir back in front."""
    node.netns_etc.mkdir(parents=True, exist_ok=True)
    try:
        base = Path("/etc/profile").read_text()
    except FileNotFoundError:
        base = ""
    text = (
        base + f"\n# spark-lab {node.name}\nPATH={node.bin_dir}:$PATH\nexport PATH\n"
        f"export DOCKER_HOST={node.docker_host}\n"
    )
    target = node.netns_etc / "profile"
    if not target.exists() or target.read_text() != text:
        target.write_text(text)


def pid(node: T.Node) -> int | None:
    return live_pid(node.sshd_pidfile, str(node.sshd_config))


def alive(node: T.Node) -> bool:
    return pid(node) is not None


def bind_for_sessions(
    node: T.Node, source: Path, target: str, *, aliases: tuple[str, ...] = (), net: bool = False
) -> None:
    """`source` bound over `target` in the mount namespace of the node's sshd, once: what its
    sessions and SFTP read there (its containers do not see it). `aliases`: other paths the
    kernel may list that mount under; `net`: enter its network namespace too (sysfs's net
    entries are the namespace's)."""
    sshd_pid = pid(node)
    if sshd_pid is None:
        raise LabError(f"sshd for {node.name} is not running")
    with open(f"/proc/{sshd_pid}/mountinfo") as f:
        if any(line.split()[4] in (target, *aliases) for line in f):
            return
    enter = ["-m", "-n"] if net else ["-m"]
    run([tool("nsenter"), "-t", str(sshd_pid), *enter, "mount", "--bind", str(source), target])


def unbind_for_sessions(node: T.Node, target: str, *, net: bool = False) -> None:
    """Undo `bind_for_sessions` (nothing to do when it is not bound, or sshd is down)."""
    sshd_pid = pid(node)
    if sshd_pid is None:
        return
    with open(f"/proc/{sshd_pid}/mountinfo") as f:
        if not any(line.split()[4] == target for line in f):
            return
    enter = ["-m", "-n"] if net else ["-m"]
    run([tool("nsenter"), "-t", str(sshd_pid), *enter, "umount", target])


def start(node: T.Node) -> None:
    """Start the node's sshd (restarting it if its config changed)."""
    ensure_host_key(node)
    write_profile(node)
    node.run_dir.mkdir(parents=True, exist_ok=True)
    Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)
    text = config_text(node)
    changed = not node.sshd_config.exists() or node.sshd_config.read_text() != text
    if changed:
        node.sshd_config.write_text(text)
    current = pid(node)
    if current and not changed and has_own_uts(current) and mountns.sees_home(current, node):
        return
    if current:
        terminate(current, 5)
    node.sshd_pidfile.unlink(missing_ok=True)
    sshd = tool("sshd")
    run([sshd, "-t", "-f", str(node.sshd_config)])
    # `ip netns exec` makes a mount namespace of its own from the node's (its /sys shows the
    # node's interfaces; /etc/netns/<ns>/* are bound over /etc), so sessions see the node's /root.
    run(
        mountns.enter(
            node,
            [
                "ip",
                "netns",
                "exec",
                node.netns,
                *as_host(node.name, [sshd, "-f", str(node.sshd_config), "-E", str(node.sshd_log)]),
            ],
        )
    )
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:  # pidfile is written after it listens
        if alive(node):
            return
        time.sleep(0.02)
    raise LabError(f"sshd for {node.name} did not start; see {node.sshd_log}")


def stop(node: T.Node) -> None:
    p = pid(node)
    if p:
        terminate(p, 5)
    node.sshd_pidfile.unlink(missing_ok=True)


def drop_sessions(node: T.Node) -> int:
    """Kill the node's SSH sessions (its sshd's children), as a network drop or a restarted
    sshd ends them for the client; the listener stays, so clients can connect again. Returns how
    many session processes were killed."""
    listener = pid(node)
    if listener is None:
        raise LabError(f"sshd for {node.name} is not running")
    sessions = [child for child, parent in _parents().items() if parent == listener]
    for session in sessions:
        with contextlib.suppress(ProcessLookupError):
            os.kill(session, signal.SIGKILL)
    return len(sessions)


def _parents() -> dict[int, int]:
    """Every process's parent, from /proc."""
    parents = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                # the command name (field 2) may hold spaces and parentheses: split after its end
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
                parents[int(entry.name)] = int(fields[1])
    return parents
