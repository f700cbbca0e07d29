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


def shortfall(state: RayClusterState, nodes: int, gpus: int) -> dict[str, str] | None:
    """What Ray lacks for `nodes` nodes and `gpus` GPUs, as the values of the failure rows that
    say so (`cluster.diagnosis.failures.RAY_INCOMPLETE`), or None when it has them all."""
    if state.active_nodes >= nodes and state.gpus_total >= gpus:
        return None
    return {
        "active_nodes": str(state.active_nodes),
        "want_nodes": str(nodes),
        "ray_gpus": f"{state.gpus_total:g}",
        "want_gpus": str(gpus),
    }
