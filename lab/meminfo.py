"""Each node's /proc/meminfo in its SSH sessions: a GB10's unified memory, not this machine's.

/proc is the host's in every namespace, so a file per node (`Node.meminfo`) is bound over
/proc/meminfo in the mount namespace of the node's sshd (its sessions and SFTP read it; its
containers do not). `set_memory` writes what a test needs there: page cache left by the last
model, memory held after a crash; the node's `drop-caches` tool frees the cache in it.
"""

from __future__ import annotations

from . import sshd
from . import topology as T
from .emulator import meminfo as emulated
from .errors import LabError

PROC_MEMINFO = "/proc/meminfo"


def set_memory(node: T.Node, **gib: float) -> None:
    """The node's figures from idle, those named changed (GiB): MemFree, Cached, Buffers,
    Shmem, SReclaimable, SUnreclaim."""
    unknown = set(gib) - set(emulated.IDLE)
    if unknown:
        raise LabError(f"no such /proc/meminfo field: {', '.join(sorted(unknown))}")
    fields = {**emulated.IDLE, **{k: int(v * emulated.GIB_KB) for k, v in gib.items()}}
    emulated.write(str(node.meminfo), fields)


def read_memory(node: T.Node) -> dict[str, int]:
    """The node's figures now (kB)."""
    return emulated.read(str(node.meminfo))


def ensure(node: T.Node) -> None:
    """The node idle, its file bound over /proc/meminfo in its sshd's namespace."""
    node.run_dir.mkdir(parents=True, exist_ok=True)
    set_memory(node)
    sshd.bind_for_sessions(node, node.meminfo, PROC_MEMINFO)
