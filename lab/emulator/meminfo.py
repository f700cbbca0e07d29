"""A lab node's /proc/meminfo: a GB10's unified memory as a file the lab binds over the node's
own (`lab/meminfo.py`), and `drop-caches`, which does to it what `sync; echo 3 >
/proc/sys/vm/drop_caches` does to a real node's (the page cache, buffers and reclaimable slab
become free; shared memory stays).

The file is rewritten in place at a fixed length (every field always present, every figure
padded to the same width), so a reader sees the old text or the new, never a short one.
"""

from __future__ import annotations

import os
import sys

KIB = 1024
GIB_KB = 1024 * 1024
# What a lab node shows when nothing runs: a GB10's 121.63 GiB (what vLLM sees; the configs'
# memory_gib), a little in use by the OS, a little page cache.
IDLE = {
    "MemTotal": int(121.63 * GIB_KB),
    "MemFree": int(117.0 * GIB_KB),
    "Buffers": int(0.2 * GIB_KB),
    "Cached": int(2.0 * GIB_KB),
    "Shmem": int(0.1 * GIB_KB),
    "SReclaimable": int(0.3 * GIB_KB),
    "SUnreclaim": int(0.2 * GIB_KB),
}
ORDER = (
    "MemTotal",
    "MemFree",
    "MemAvailable",
    "Buffers",
    "Cached",
    "SwapCached",
    "Shmem",
    "SReclaimable",
    "SUnreclaim",
    "SwapTotal",
    "SwapFree",
)
WIDTH = 12  # digits a figure is padded to: 999 TiB in kB


def available_kb(fields: dict[str, int]) -> int:
    """MemAvailable as the kernel estimates it, without its watermarks: free memory and what
    reclaim would give back (page cache less shared memory, buffers, reclaimable slab)."""
    reclaimable = fields["Buffers"] + fields["Cached"] - fields["Shmem"] + fields["SReclaimable"]
    return min(fields["MemTotal"], fields["MemFree"] + max(reclaimable, 0))


def render(fields: dict[str, int]) -> bytes:
    values = {"SwapCached": 0, "SwapTotal": 0, "SwapFree": 0, **fields}
    values["MemAvailable"] = available_kb(values)
    return "".join(f"{key + ':':<16}{values[key]:>{WIDTH}} kB\n" for key in ORDER).encode()


def parse(text: str) -> dict[str, int]:
    fields = {}
    for line in text.splitlines():
        key, _, rest = line.partition(":")
        if key in IDLE:
            fields[key] = int(rest.split()[0])
    return {**IDLE, **fields}


def write(path: str, fields: dict[str, int]) -> None:
    """Rewrite `path` in place (the same inode: the bind mount over /proc/meminfo follows it)."""
    data = render(fields)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        os.pwrite(fd, data, 0)
        os.ftruncate(fd, len(data))
    finally:
        os.close(fd)


def read(path: str) -> dict[str, int]:
    with open(path) as f:
        return parse(f.read())


def drop_caches(fields: dict[str, int]) -> dict[str, int]:
    """What `echo 3 > /proc/sys/vm/drop_caches` leaves: the cache freed, shared memory kept."""
    freed = fields["Buffers"] + fields["Cached"] - fields["Shmem"] + fields["SReclaimable"]
    return {
        **fields,
        "MemFree": fields["MemFree"] + max(freed, 0),
        "Buffers": 0,
        "Cached": fields["Shmem"],
        "SReclaimable": 0,
    }


def drop_caches_main(argv: list[str]) -> int:
    """`drop-caches`: the lab's stand-in for an operator's /usr/local/sbin/drop-caches."""
    path = os.environ.get("SPARK_LAB_MEMINFO")
    if argv or not path:
        sys.stderr.write("usage: drop-caches (on a lab node: SPARK_LAB_MEMINFO names its file)\n")
        return 2
    write(path, drop_caches(read(path)))
    return 0
