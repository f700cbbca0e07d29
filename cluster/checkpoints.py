"""The verification checkpoints of a launch, in order, as data: what proves each one.

A checkpoint with a `pattern` is proven by a container log line; the others by a command or an
API answer. `phase` names the timeout (cluster.config.Timeouts) that bounds reaching it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from cluster.config import ClusterConfig

Backend = Literal["ray", "mp"]


@dataclass(frozen=True)
class Checkpoint:
    id: str
    title: str
    phase: str
    pattern: re.Pattern[str] | None = None
    per_rank: bool = False
    backends: frozenset[Backend] = frozenset({"ray", "mp"})
    needs_nccl_debug: bool = False


CHECKPOINTS: tuple[Checkpoint, ...] = (
    Checkpoint("ssh", "SSH to every node", "preflight"),
    Checkpoint("docker", "Docker engine on every node", "preflight"),
    Checkpoint("image", "Same image on every node", "preflight"),
    Checkpoint("interfaces", "RoCE and fabric interfaces", "preflight"),
    Checkpoint("memory", "Free memory for the model", "preflight"),
    Checkpoint("no_stale_container", "No leftover container", "preflight"),
    Checkpoint("api_port", "API and cluster ports free on the head", "preflight"),
    Checkpoint("containers", "Containers started", "containers"),
    Checkpoint("ray_cluster", "Ray sees every node and GPU", "ray", backends=frozenset({"ray"})),
    Checkpoint(
        "nccl",
        "NCCL over RDMA",
        "weights",
        re.compile(r"via NET/IB|NET/IB : Made virtual device|via NET/Socket"),
        needs_nccl_debug=True,
    ),
    Checkpoint(
        "weights",
        "Weights loaded on every rank",
        "weights",
        re.compile(r"Loading weights took (?P<seconds>[\d.]+) seconds"),
        per_rank=True,
    ),
    Checkpoint(
        "kv_cache",
        "KV cache sized",
        "engine",
        re.compile(r"GPU KV cache size: (?P<tokens>[\d,]+) tokens"),
    ),
    Checkpoint(
        "engine",
        "Engine initialised",
        "engine",
        re.compile(r"init engine \(profile, create kv cache, warmup model\) took (?P<seconds>[\d.]+) seconds"),
    ),
    Checkpoint("api_server", "API server started", "api", re.compile(r"Application startup complete\.")),
    Checkpoint("health", "GET /health answers 200", "api"),
    Checkpoint("models", "GET /v1/models lists the model", "api"),
    Checkpoint("sample", "Sample completion", "api"),
)

# Each Ray container's own proof that `ray start` worked (head and workers alike).
RAY_RUNTIME_STARTED = re.compile(r"Ray runtime started\.")

# What `watch` and `bench` report against: one checkpoint each.
SERVING = Checkpoint("serving", "Serving", "watch")
BENCH = Checkpoint("bench", "Benchmark", "bench")

BY_ID = {checkpoint.id: checkpoint for checkpoint in CHECKPOINTS}

PREFLIGHT = tuple(c for c in CHECKPOINTS if c.phase == "preflight")

VERIFY: tuple[Checkpoint, ...] = (
    Checkpoint("containers", "Containers running on every node", "verify"),
    Checkpoint("image", "Same image on every node", "verify"),
    Checkpoint("ray_cluster", "Ray sees every node and GPU", "verify", backends=frozenset({"ray"})),
    BY_ID["health"],
    BY_ID["models"],
    Checkpoint("sample", "Test completion", "verify"),
)


def _applies(checkpoint: Checkpoint, config: ClusterConfig) -> bool:
    if config.serve.backend not in checkpoint.backends:
        return False
    if checkpoint.needs_nccl_debug:
        return config.container.env.get("NCCL_DEBUG", "").upper() == "INFO"
    return True


def launch_plan(config: ClusterConfig) -> list[Checkpoint]:
    """The checkpoints `up` will report for this config, in order (for live checklists)."""
    return [c for c in CHECKPOINTS if _applies(c, config)]


def verify_plan(config: ClusterConfig) -> list[Checkpoint]:
    return [c for c in VERIFY if _applies(c, config)]
