"""Each node's boot as its SSH sessions see it: a boot id and an uptime of its own, a kernel log,
and a GPU whose clocks a test sets.

/proc is the host's in every namespace, so a file per node is bound over
/proc/sys/kernel/random/boot_id and one over /proc/uptime in the mount namespace of the node's
sshd (as LXC binds a boot id of its own over a container's: lxc/lxc#3027); its containers do
not see them. Unlike the kernel's, the lab's uptime does not run by itself: it is what `ensure`
or `reboot` wrote, plus a second for every kernel line a test adds (so a line added after the
launch is stamped after the uptime the launch read). `reboot` is a new boot: a new boot id,
the uptime from a few seconds, an empty kernel log, the node's containers killed and every SSH
session to it ended, as a power cut ends them (the node answers again at once: a real one is
down for a minute or two first).

The kernel log is the file the node's `dmesg` and `journalctl` stand-ins print
(lab/emulator/kernel_log.py); `set_kernel_log_readable(node, False)` makes them answer as they
do for a user without the rights. The GPU's state is a JSON file the node's nvidia-smi reads
(lab/emulator/gpu_tools.py): the fields a test names, over an idle GB10's.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path

from . import sshd
from . import topology as T
from .errors import LabError
from .proc import out, run

BOOT_ID = "/proc/sys/kernel/random/boot_id"
UPTIME = "/proc/uptime"
BOOTED_S = 12.5  # the uptime a node shows right after `reboot`
_UPTIME_WIDTH = 32  # the file is rewritten in place at one length: a reader never sees half


def _host_uptime() -> float:
    with open(UPTIME) as f:
        return float(f.read().split()[0])


def _overwrite(path: Path, text: str) -> None:
    """In place, so the file bound over /proc stays the same file (and a reader of one of a
    fixed length never sees it half written)."""
    with open(path, "r+" if path.exists() else "w") as f:
        f.write(text)
        f.truncate()


def _write_uptime(node: T.Node, seconds: float) -> None:
    text = f"{seconds:.2f} {seconds * 1.5:.2f}"
    _overwrite(node.uptime_file, text.ljust(_UPTIME_WIDTH) + "\n")


def uptime(node: T.Node) -> float:
    return float(node.uptime_file.read_text().split()[0])


def boot_id(node: T.Node) -> str:
    return node.boot_id_file.read_text().strip()


def add_kernel_lines(node: T.Node, *lines: str) -> float:
    """Kernel messages, stamped one second after the node's uptime; returns their stamp."""
    stamp = uptime(node) + 1.0
    _write_uptime(node, stamp)
    with node.kernel_log_file.open("a") as f:
        for line in lines:
            if "\n" in line or "\t" in line:
                raise LabError(f"a kernel message is one line without tabs: {line!r}")
            f.write(f"{stamp:.6f}\t{line}\n")
    return stamp


def set_kernel_log_readable(node: T.Node, readable: bool) -> None:
    if readable:
        node.kernel_log_restricted.unlink(missing_ok=True)
    else:
        node.kernel_log_restricted.write_text("dmesg_restrict=1, not in adm\n")


# An idle GB10 as nvidia-smi shows it (lab/emulator/gpu_tools.py's figures).
GPU_IDLE = {
    "clocks.sm": 208,
    "clocks.max.sm": 3003,
    "clocks_event_reasons.active": 0x1,
    "temperature.gpu": 42,
    "power.draw": 4.12,
}


# set_gpu's names for nvidia-smi's fields
GPU_FIELDS = {
    "clocks_sm": "clocks.sm",
    "clocks_max_sm": "clocks.max.sm",
    "reasons": "clocks_event_reasons.active",
    "temperature": "temperature.gpu",
    "power": "power.draw",
}


def set_gpu(node: T.Node, **state: float) -> None:
    """The fields named (GPU_FIELDS' keys), over an idle GB10's."""
    unknown = set(state) - set(GPU_FIELDS)
    if unknown:
        raise LabError(f"no such GPU field: {', '.join(sorted(unknown))}")
    fields = {**GPU_IDLE, **{GPU_FIELDS[name]: value for name, value in state.items()}}
    node.gpu_state_file.write_text(json.dumps(fields) + "\n")


def _kill_containers(node: T.Node) -> None:
    docker = ["docker", "-H", node.docker_host]
    running = out([*docker, "ps", "-q"]).split()
    if running:
        run([*docker, "kill", *running], check=False)


def reboot(node: T.Node) -> str:
    """A new boot of the node (see the module's doc); returns its boot id."""
    new = str(uuid.uuid4())
    # the new boot first: the bot asks the node why once its containers died, and a real node
    # it reaches again is in its new boot (one still down does not answer at all)
    _overwrite(node.boot_id_file, new + "\n")
    _write_uptime(node, BOOTED_S)
    _overwrite(node.kernel_log_file, "")
    set_gpu(node)
    _kill_containers(node)
    sshd.drop_sessions(node)  # the connections to it break, as a power cut breaks them
    return new


def ensure(node: T.Node) -> None:
    """The node in a boot of its own (after its sshd started): kept across `lab up` when its
    files are there, so a launch's recorded boot id stays true."""
    if not sshd.alive(node):
        raise LabError(f"sshd for {node.name} is not running")
    node.run_dir.mkdir(parents=True, exist_ok=True)
    if not node.boot_id_file.exists():
        _overwrite(node.boot_id_file, str(uuid.uuid4()) + "\n")
    if not node.uptime_file.exists():
        _write_uptime(node, _host_uptime())
    if not node.kernel_log_file.exists():
        node.kernel_log_file.write_text("")
    if not node.gpu_state_file.exists():
        set_gpu(node)
    set_kernel_log_readable(node, True)
    sshd.bind_for_sessions(node, node.boot_id_file, BOOT_ID)
    sshd.bind_for_sessions(node, node.uptime_file, UPTIME)
