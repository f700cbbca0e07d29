"""Each node's tool dir (/var/lib/spark-lab/node<i>/bin): nvidia-smi, ibdev2netdev, dmesg and
journalctl run the emulator from this repo (a copy in the node's state dir: the repo may be under /tmp,
which a node has of its own); `docker` points at the node's own engine; the stand-in
NVIDIA container runtime hook lets the node's dockerd accept GPU requests."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from . import topology as T
from .preflight import SBIN_PATH

REPO_LAB_DIR = Path(__file__).resolve().parent  # contains the `emulator` package


def _emulator_wrapper(node: T.Node, name: str) -> str:
    return f"""#!/bin/sh
# spark-lab {node.name}: emulated {name}
export SPARK_LAB_NODE={node.index}
export SPARK_LAB_MEMINFO={node.meminfo}
export SPARK_LAB_GPU_STATE={node.gpu_state_file}
export SPARK_LAB_KERNEL_LOG={node.kernel_log_file}
export SPARK_LAB_KERNEL_LOG_RESTRICTED={node.kernel_log_restricted}
export PYTHONPATH="{node.lib_dir}${{PYTHONPATH:+:$PYTHONPATH}}"
exec python3 -m emulator {name} "$@"
"""


def _docker_wrapper(node: T.Node) -> str:
    real = shutil.which("docker", path=SBIN_PATH) or "/usr/bin/docker"
    return f"""#!/bin/sh
# spark-lab {node.name}: the docker CLI against this node's engine
export DOCKER_HOST="${{DOCKER_HOST:-{node.docker_host}}}"
exec {real} "$@"
"""


def _nvidia_hook(node: T.Node) -> str:
    # runc runs it as an OCI prestart hook (`nvidia-container-runtime-hook prestart`, the
    # container's state JSON on stdin). The real one mounts the GPU devices and driver
    # libraries; the lab has none to mount, and the emulator's tools stand in for them.
    return f"""#!/bin/sh
# spark-lab {node.name}: stand-in NVIDIA container runtime hook
cat >/dev/null
exit 0
"""


def _copy_emulator(node: T.Node) -> None:
    source, target = REPO_LAB_DIR / "emulator", node.lib_dir / "emulator"
    target.mkdir(parents=True, exist_ok=True)
    wanted = {p.name: p.read_bytes() for p in source.glob("*.py")}
    for old in target.glob("*.py"):
        if old.name not in wanted:
            old.unlink()
    for name, data in wanted.items():
        p = target / name
        if not p.exists() or p.read_bytes() != data:
            p.write_bytes(data)


def ensure(node: T.Node) -> None:
    _copy_emulator(node)
    node.bin_dir.mkdir(parents=True, exist_ok=True)
    files = {name: _emulator_wrapper(node, name) for name in T.EMULATED_TOOLS}
    files["docker"] = _docker_wrapper(node)
    files[T.NVIDIA_HOOK] = _nvidia_hook(node)
    for name, text in files.items():
        p = node.bin_dir / name
        if not p.exists() or p.read_text() != text:
            p.write_text(text)
        os.chmod(p, 0o755)
