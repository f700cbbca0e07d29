"""The NCCL library an emulated container loads, and what NCCL prints of it at NCCL_DEBUG=INFO.

A real libnccl.so.2 carries its version as one string, `NCCL version 2.28.9+cuda13.0` (NCCL
src/init.cc VERSION_STRING, kept whole so that `strings` shows it). The lab's libraries are a
small shared object of the image's own (its libdl.so.2, so that dlopen takes them) with that
string and a build tag appended: two builds of one version are two files of one version, as the
pip wheel's NCCL and the system's were for the operators of vllm-project/vllm#42354.

Which file a process loads follows vLLM's find_nccl_library (vllm/utils/nccl.py, 0.32.0):
VLLM_NCCL_SO_PATH, else `libnccl.so.2`, the one torch loaded (its pip wheel's: BUNDLED).

`python3 -m emulator.nccl_lib PATH VERSION BUILD` writes one (the image's, the lab's tests').
"""

import glob
import os
import re
import sys

from .common import env_str

BUNDLED = "/opt/spark-emu/nvidia/nccl/lib/libnccl.so.2"  # where torch's pip wheel puts it
DEFAULT = ("2.27.7", "13.0")  # the image's: a vLLM image of 2025's
_VERSION = re.compile(rb"NCCL version (\d+)\.(\d+)\.(\d+)[\w.-]*\+cuda(\d+\.\d+)")
_GIT = re.compile(rb"NCCL git version ([\x21-\x7e]+ [\x21-\x7e]+)")

# What NCCL prints of itself, by release (NVIDIA/nccl at the tags named): every rank prints its
# version at INFO from 2.22.3 (init.cc: showVersion for `ncclDebugLevel > NCCL_LOG_WARN`),
# before only rank 0, bare on stdout (printf); the git line from 2.29.2 (misc/git_version.cc).
EVERY_RANK_SINCE = (2, 22, 3)
GIT_LINE_SINCE = (2, 29, 2)


def make(path, version, build, cuda="13.0"):
    """A library of `version` that dlopen takes, told apart from others by `build`."""
    base = sorted(glob.glob("/usr/lib/*/libdl.so.2") + glob.glob("/lib/*/libdl.so.2"))[0]
    with open(base, "rb") as f:
        body = f.read()
    tag = "\0NCCL version %s+cuda%s\0spark-lab NCCL build %s\0" % (version, cuda, build)
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path, "wb") as f:
        f.write(body + tag.encode())


def loaded_path():
    """The file vLLM's pynccl (and, without VLLM_NCCL_SO_PATH, torch) loads."""
    return env_str("VLLM_NCCL_SO_PATH", "") or BUNDLED


def identity(path=None):
    """(version tuple, cuda, git or None) of the library at `path`; the default's when it has no
    version string (or is absent)."""
    try:
        with open(path or loaded_path(), "rb") as f:
            data = f.read()
    except OSError:
        data = b""
    m = _VERSION.search(data)
    if m is None:
        major, minor, patch = (int(n) for n in DEFAULT[0].split("."))
        return (major, minor, patch), DEFAULT[1], None
    git = _GIT.search(data)
    return (
        (int(m[1]), int(m[2]), int(m[3])),
        m[4].decode(),
        git[1].decode() if git else None,
    )


def version_text(version):
    return "%d.%d.%d" % version


if __name__ == "__main__":
    make(sys.argv[1], sys.argv[2], sys.argv[3], *sys.argv[4:5])
