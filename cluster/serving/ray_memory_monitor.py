"""Ray's memory monitor on unified memory: off, or a warning before the load.

Ray kills a worker when its node's memory use crosses RAY_memory_usage_threshold (0.95 by
default), checked every RAY_memory_monitor_refresh_ms. On a GB10 the model's weights and KV
cache are the node's memory, so a ~120 GB model on 128 GB crosses it by design and Ray kills a
rank mid-load or mid-answer. NVIDIA's two-Spark vLLM playbook starts Ray with the monitor off
(RAY_memory_monitor_refresh_ms=0); spark-bot's own containers get it (cluster/serving/containers.py)
unless container.env says otherwise. An operator's launcher starts its own containers: its argv
and its script (read on the head, bounded) must set it.
"""

from __future__ import annotations

import posixpath
import re

from cluster.config import ClusterConfig
from cluster.errors import FileUnreadable
from cluster.nodes import NodeConnection
from cluster.serving.containers import expand_home

VARIABLE = "RAY_memory_monitor_refresh_ms"
_OFF = re.compile(rf"{VARIABLE}\s*[=:]?\s*[\"']?0\b")
SCRIPT_READ_BYTES = 262_144
_WHY = (
    "Ray's memory monitor kills a worker once the node's memory use crosses 95 %, which a model "
    "filling a GB10's unified memory reaches by design"
)


def env_warning(config: ClusterConfig) -> str | None:
    """What our own containers' environment says (container.env may turn it back on)."""
    value = config.container.env.get(VARIABLE, "0")
    if config.serve.backend != "ray" or value == "0":
        return None
    return f"container.env sets {VARIABLE}={value}: {_WHY}; set it to 0 (or remove it)"


async def launcher_warning(config: ClusterConfig, head: NodeConnection, home: str) -> str | None:
    """The operator's launcher with Ray and no sign of the monitor off, in its argv or script."""
    launcher = config.launcher
    if launcher is None or config.serve.backend != "ray":
        return None
    if any(_OFF.search(arg) for arg in launcher.command):
        return None
    cwd = expand_home(launcher.cwd or "~", home)
    script = posixpath.join(cwd, launcher.command[0])
    try:
        text = await head.read_file(
            script, timeout=config.timeouts.preflight, limit=SCRIPT_READ_BYTES
        )
    except FileUnreadable:
        return (
            f"cannot read the launcher's script {script} on {head.name} to see whether it sets "
            f"{VARIABLE}=0: {_WHY}"
        )
    if _OFF.search(text):
        return None
    return (
        f"the launcher (`{' '.join(launcher.command[:1])}`) does not set {VARIABLE}=0, in its "
        f"arguments or its script: {_WHY}; pass it to the containers (e.g. `-e {VARIABLE}=0`) "
        "or set it in the script"
    )
