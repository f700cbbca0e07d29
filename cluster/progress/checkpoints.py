"""The verification checkpoints of a launch, in order, as data: what proves each one.

A checkpoint with `spellings` is proven by a container log line; the others by a command or an
API answer. `phase` names the timeout (cluster.config.Timeouts) that bounds reaching it.

vLLM rewords its lines from release to release and per platform, so a logged checkpoint lists
every spelling known, each with where it comes from (vLLM version and file, or a lab finding).
A later stage proves the earlier ones: a checkpoint whose line never comes is reported as not
seen (a warning), never as a failure (cluster.progress.checkpoint_follower).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from cluster.config import ClusterConfig, Knowledge

Backend = Literal["ray", "mp"]


@dataclass(frozen=True)
class Spelling:
    """One wording of a checkpoint's log line, and where that wording comes from.

    A `provisional` wording is printed before the stage is over (vLLM 0.32's "Initializing
    model took" precedes reading the weights): its lines are the evidence only once a later
    checkpoint proves the stage, unless a definitive wording comes first."""

    pattern: re.Pattern[str]
    source: str
    provisional: bool = False


def spelling(pattern: str, source: str, *, provisional: bool = False) -> Spelling:
    return Spelling(re.compile(pattern), source, provisional)


@dataclass(frozen=True)
class Checkpoint:
    id: str
    title: str
    phase: str
    spellings: tuple[Spelling, ...] = ()
    per_rank: bool = False
    backends: frozenset[Backend] = frozenset({"ray", "mp"})
    needs_nccl_debug: bool = False
    launcher_only: bool = False  # reported only when the operator's launcher starts the cluster

    @property
    def logged(self) -> bool:
        """Proven by a log line (else by a command or an API answer)."""
        return bool(self.spellings)


# Spellings are searched in the bare message (cluster.logs.logtext.strip_prefixes), in this order;
# per-rank lines are counted per spelling, so a rank printing two of them is not two ranks.
# Sources: each release's PyPI wheel of vLLM, 0.6.0 to 0.33.0 (file paths under vllm/), and
# the lab's real engine (vLLM 0.32.0 CPU). vLLM >= 0.11.2 logs these once per node (local
# rank 0), earlier releases once per rank: with one GPU per Spark both are one line per node.
WEIGHTS_SPELLINGS = (
    spelling(
        r"Loading weights took (?P<seconds>[\d.]+) seconds",
        "0.8.0-0.8.5 model_executor/model_loader/loader.py, 0.9.0+ model_loader/default_loader.py "
        "and sharded_state_loader.py (0.12.0+): the default loader, GPU and CPU",
    ),
    spelling(
        r"Model loading took (?P<gib>[\d.]+) ?Gi?B(?: memory)? and (?P<seconds>[\d.]+) seconds",
        "0.8.0+ v1/worker/gpu_model_runner.py (`GB` until 0.8.2, `GiB` from 0.8.3, `GiB memory` "
        "from 0.11.2), v1/worker/gpu/model_runner.py: GPU, every loader",
    ),
    spelling(
        r"Loading model weights took (?P<gib>[\d.]+) ?Gi?B",
        "0.6.0-0.7.3 worker/model_runner.py and v1/worker/gpu_model_runner.py: GPU",
    ),
    spelling(
        r"Initializing model took (?P<seconds>[\d.]+) seconds",
        "0.32.0+ model_loader/base_loader.py: every loader, BEFORE the weights are read; the only "
        "line of the dummy, bitsandbytes, gguf and runai loaders (the lab's real engine)",
        provisional=True,
    ),
)
KV_CACHE_SPELLINGS = (
    spelling(
        r"(?:[A-Z]+(?: \+ host)? )?KV cache size: (?P<tokens>[\d,]+) tokens",
        "v1/core/kv_cache_utils.py: `GPU KV cache size: N tokens` 0.8.0-0.29.0 (GPU even on CPU; "
        "one line with `Maximum concurrency` from 0.28.0), `CPU|XPU|GPU + host KV cache size` 0.30.0+",
    ),
    spelling(
        r"# (?:GPU|CPU|CUDA|cuda|cpu|[a-z]+) blocks: (?P<blocks>\d+)",
        "V0 0.6.0-0.11.0 executor/*_executor.py, executor/executor_base.py (`# cuda blocks` from "
        "0.7.3); V1 0.6.4-0.7.3 `# GPU blocks`",
    ),
)
ENGINE_SPELLINGS = (
    spelling(
        r"init engine \(profile, create kv cache, warmup model\) took (?P<seconds>[\d.]+) (?:seconds|s\b)",
        "engine/llm_engine.py (V0) 0.6.5-0.10.2 and v1/engine/core.py 0.6.5+: `took N seconds` until "
        "0.19.0, `took N s` (+ compilation times) from 0.20.0; no such line before 0.6.5",
    ),
)
API_SERVER_SPELLINGS = (
    spelling(
        r"Application startup complete\.",
        "uvicorn, in every vLLM release: the last start-up line, the API answers",
    ),
    spelling(
        r"Uvicorn running on \S+",
        "uvicorn (`Uvicorn running on http://0.0.0.0:8000 (Press CTRL+C to quit)`), printed once "
        "the application started; an excerpt may begin with it (corpus a-036)",
    ),
)
# Lines only a serving engine prints: a log that shows them has completed its start-up.
SERVING_SPELLINGS = (
    spelling(
        r"Avg prompt throughput: [\d.]+ tokens/s",
        "vLLM's stats logger: engine/metrics.py (V0, 0.4-0.10), v1/metrics/loggers.py "
        "(`Engine 000: Avg prompt throughput`, V1)",
    ),
)

CHECKPOINTS: tuple[Checkpoint, ...] = (
    Checkpoint("ssh", "SSH to every node", "preflight"),
    Checkpoint("docker", "Docker engine on every node", "preflight"),
    Checkpoint("image", "Same image on every node", "preflight"),
    Checkpoint("gpu_arch", "The image built for the GPU", "preflight"),
    Checkpoint("nccl_library", "The same NCCL on every node", "preflight"),
    Checkpoint("interfaces", "RoCE and fabric interfaces", "preflight"),
    Checkpoint("memory", "Free memory for the model", "preflight"),
    Checkpoint("model", "The model complete on every node", "preflight"),
    Checkpoint("fit", "The model fits (weights, KV cache, overhead)", "preflight"),
    Checkpoint("no_stale_container", "No leftover container", "preflight"),
    Checkpoint("api_port", "API and cluster ports free on the head", "preflight"),
    Checkpoint(
        "launcher", "The operator's launcher runs on the head", "containers", launcher_only=True
    ),
    Checkpoint("containers", "Containers started", "containers"),
    Checkpoint("ray_cluster", "Ray sees every node and GPU", "ray", backends=frozenset({"ray"})),
    Checkpoint(
        "nccl",
        "NCCL over RDMA",
        "weights",
        (
            spelling(
                r"via NET/IB|NET/IB : Made virtual device|via NET/Socket",
                "NCCL 2.x INFO lines (NCCL_DEBUG=INFO), transport/net_ib.cc",
            ),
        ),
        needs_nccl_debug=True,
    ),
    Checkpoint(
        "weights",
        "Weights loaded on every rank",
        "weights",
        WEIGHTS_SPELLINGS,
        per_rank=True,
    ),
    Checkpoint("kv_cache", "KV cache sized", "engine", KV_CACHE_SPELLINGS),
    Checkpoint("engine", "Engine initialised", "engine", ENGINE_SPELLINGS),
    Checkpoint("api_server", "API server started", "api", API_SERVER_SPELLINGS),
    Checkpoint("health", "GET /health answers 200", "api"),
    Checkpoint("models", "GET /v1/models lists the model", "api"),
    Checkpoint("sample", "Sample completion", "api"),
)

# Each Ray container's own proof that `ray start` worked (head and workers alike).
RAY_RUNTIME_STARTED = (
    spelling(r"Ray runtime started\.", "Ray 2.x python/ray/scripts/scripts.py (`ray start`)"),
)

# What `watch`, `bench` and `fabric-test` report against: one checkpoint each.
SERVING = Checkpoint("serving", "Serving", "watch")
BENCH = Checkpoint("bench", "Benchmark", "bench")
FABRIC_TEST = Checkpoint(
    "fabric_test", "Fabric bandwidth between every pair of nodes", "fabric_test"
)

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

# What `sync-image` reports against: the head's image streamed to the nodes that lack it.
SYNC_IMAGE: tuple[Checkpoint, ...] = (
    BY_ID["ssh"],
    Checkpoint("image_source", "The head has the image", "sync"),
    Checkpoint("image_copied", "Image streamed to the nodes that differ", "sync"),
    Checkpoint("image_synced", "Same image ID on every node", "sync"),
)

# What `sync-model` reports against: the model copied from a node that has it complete.
SYNC_MODEL: tuple[Checkpoint, ...] = (
    BY_ID["ssh"],
    Checkpoint("model_source", "A node has the model complete", "sync"),
    Checkpoint("model_copied", "Model copied to the nodes that lack it", "sync"),
    Checkpoint("model_synced", "The model complete on every node", "sync"),
)


# What `drop-caches` reports against: every node's page cache dropped by the config's command.
DROP_CACHES: tuple[Checkpoint, ...] = (
    BY_ID["ssh"],
    Checkpoint("caches_dropped", "Page cache dropped on every node", "preflight"),
)


def spellings_for(checkpoint: Checkpoint, knowledge: Knowledge) -> tuple[Spelling, ...]:
    """The built-in spellings, then those an operator taught in the knowledge file."""
    taught = tuple(
        Spelling(
            re.compile(extra.pattern),
            extra.source or "the operator's knowledge file",
            extra.provisional,
        )
        for extra in knowledge.checkpoints.get(checkpoint.id, ())  # type: ignore[call-overload]
    )
    return checkpoint.spellings + taught


def _applies(checkpoint: Checkpoint, config: ClusterConfig) -> bool:
    if config.serve.backend not in checkpoint.backends:
        return False
    if checkpoint.launcher_only and config.launcher is None:
        return False
    if checkpoint.needs_nccl_debug:
        return config.container.env.get("NCCL_DEBUG", "").upper() == "INFO"
    return True


def launch_plan(config: ClusterConfig) -> list[Checkpoint]:
    """The checkpoints `up` will report for this config, in order (for live checklists)."""
    return [c for c in CHECKPOINTS if _applies(c, config)]


def verify_plan(config: ClusterConfig) -> list[Checkpoint]:
    return [c for c in VERIFY if _applies(c, config)]
