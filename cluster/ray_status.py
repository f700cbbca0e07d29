"""Reading `ray status`: how many nodes are active and how many GPUs the cluster holds."""

from __future__ import annotations

import re
from dataclasses import dataclass

_ACTIVE_NODE = re.compile(r"^\s*\d+\s+node_\S+")
_GPU_USAGE = re.compile(r"^\s*(?P<used>[\d.]+)/(?P<total>[\d.]+)\s+GPU\b")


@dataclass(frozen=True)
class RayClusterState:
    active_nodes: int
    gpus_total: float
    gpu_line: str

    def describe(self) -> str:
        return f"ray status: {self.active_nodes} active node(s), {self.gpu_line.strip() or 'no GPU line'}"


def parse_ray_status(text: str) -> RayClusterState:
    active = 0
    in_active = False
    gpus = 0.0
    gpu_line = ""
    for line in text.splitlines():
        stripped = line.strip()
        if stripped == "Active:":
            in_active = True
            continue
        if stripped.endswith(":") and stripped != "Active:":
            in_active = False
        if in_active and _ACTIVE_NODE.match(line):
            active += 1
        match = _GPU_USAGE.match(line)
        if match:
            gpus = float(match["total"])
            gpu_line = stripped
    return RayClusterState(active, gpus, gpu_line)


INCOMPLETE_CAUSE = "a worker did not join the Ray cluster, or its GPU is not exposed"
INCOMPLETE_FIX = (
    "check the worker's log (`logs worker`), the fabric link and IPs; "
    "`--gpus all` (container.gpus: true) on every node"
)


def shortfall(state: RayClusterState, nodes: int, gpus: int) -> str | None:
    """What Ray lacks for `nodes` nodes and `gpus` GPUs, or None when it has them all."""
    if state.active_nodes >= nodes and state.gpus_total >= gpus:
        return None
    return f"Ray shows {state.active_nodes}/{nodes} nodes and {state.gpus_total:g}/{gpus} GPUs"
