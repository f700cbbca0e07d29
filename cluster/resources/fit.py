"""Does the model fit, before the load: the memory arithmetic of one rank, from the model's files.

Per rank: the weights (the safetensors index's `total_size` / (TP x PP)), the engine's own
overhead, and what is left of `gpu_memory_utilization` x the node's memory for the KV cache,
against what one sequence of `max_model_len` tokens needs (vLLM refuses to start below that).
The KV cache per token comes from config.json, per kind of layer:

- full attention: 2 (K and V) x KV heads on the rank x head size x KV cache dtype, every token;
- sliding-window attention (gpt-oss's `layer_types`): the same per token, at most `sliding_window`
  tokens a sequence;
- linear attention (Qwen3-Next / Qwen3.5 `linear_attention` layers): a fixed state a sequence
  (convolution + recurrent state), whatever its length;
- MLA (DeepSeek `kv_lora_rank`): one latent of `kv_lora_rank + qk_rope_head_dim` a token and
  layer, on every rank.

Limits, said in the evidence where they apply: the weights are split evenly (replicated
embeddings and vision towers make a real rank a little heavier); the overhead is one figure
(activations at the profiling batch, CUDA graphs, NCCL buffers), not a profile; vLLM's own token
count for hybrid models is sized by its hybrid allocator and may differ from this estimate.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from cluster.config import ClusterConfig, ServeConfig
from cluster.errors import FileUnreadable
from cluster.logs.container_stream import LogLine
from cluster.logs.logtext import strip_prefixes
from cluster.nodes import NodeConnection
from cluster.progress.checkpoints import KV_CACHE_SPELLINGS, WEIGHTS_SPELLINGS, Spelling

GIB = 2**30
# Per rank: activations at the profiling batch, CUDA graphs, NCCL buffers, the CUDA context.
ENGINE_OVERHEAD_GIB = 5.2
KV_BLOCK = 16  # vLLM's default block size: token counts come in multiples of it
LOW_HEADROOM = 0.10  # less than this share of the KV budget to spare: passes with a warning
HF_HOME_IN_CONTAINER = "/root/.cache/huggingface"

_DTYPE_BYTES = {
    "float32": 4,
    "fp32": 4,
    "float": 4,
    "float16": 2,
    "fp16": 2,
    "half": 2,
    "bfloat16": 2,
    "bf16": 2,
}
_TOTAL_SIZE = re.compile(r'"total_size"\s*:\s*([0-9]+)')


class ModelFilesProblem(ValueError):
    """The model's files say too little for an estimate (what is missing, in words)."""


@dataclass(frozen=True)
class ModelFacts:
    """What the fit arithmetic needs from a model's config.json and safetensors index."""

    weights_bytes: int
    dtype_bytes: int
    kv_heads: int
    head_dim: int
    full_layers: int
    sliding_layers: int = 0
    sliding_window: int = 0
    linear_layers: int = 0
    linear_state_bytes: int = 0  # one linear-attention layer's state for one sequence, all heads
    mla_bytes_per_token: int = 0  # one MLA layer's latent for one token (replicated over TP)
    max_position_embeddings: int | None = None


def _int(config: Mapping[str, Any], key: str) -> int | None:
    value = config.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def model_facts(config: Mapping[str, Any], total_size: int) -> ModelFacts:
    """ModelFacts from a parsed config.json (a multimodal model's `text_config` first)."""
    text = config.get("text_config")
    cfg: dict[str, Any] = {**config, **text} if isinstance(text, dict) else dict(config)
    layers = _int(cfg, "num_hidden_layers")
    heads = _int(cfg, "num_attention_heads")
    if not layers or not heads:
        raise ModelFilesProblem("config.json gives no num_hidden_layers / num_attention_heads")
    kv_heads = _int(cfg, "num_key_value_heads") or heads
    hidden = _int(cfg, "hidden_size")
    head_dim = _int(cfg, "head_dim") or (hidden // heads if hidden else None)
    if not head_dim:
        raise ModelFilesProblem("config.json gives neither head_dim nor hidden_size")
    dtype = str(cfg.get("torch_dtype") or cfg.get("dtype") or "bfloat16")
    kinds = _layer_kinds(cfg, layers)
    linear_state = 0
    if kinds["linear_attention"]:
        linear_state = _linear_state_elements(cfg) * _DTYPE_BYTES.get(dtype, 2)
    mla = 0
    if _int(cfg, "kv_lora_rank"):
        mla = ((_int(cfg, "kv_lora_rank") or 0) + (_int(cfg, "qk_rope_head_dim") or 0)) * (
            _DTYPE_BYTES.get(dtype, 2)
        )
    return ModelFacts(
        weights_bytes=total_size,
        dtype_bytes=_DTYPE_BYTES.get(dtype, 2),
        kv_heads=kv_heads,
        head_dim=head_dim,
        full_layers=kinds["full_attention"],
        sliding_layers=kinds["sliding_attention"],
        sliding_window=_int(cfg, "sliding_window") or 0,
        linear_layers=kinds["linear_attention"],
        linear_state_bytes=linear_state,
        mla_bytes_per_token=mla,
        max_position_embeddings=_int(cfg, "max_position_embeddings"),
    )


def _layer_kinds(cfg: Mapping[str, Any], layers: int) -> dict[str, int]:
    kinds = {"full_attention": 0, "sliding_attention": 0, "linear_attention": 0}
    types = cfg.get("layer_types")
    interval = _int(cfg, "full_attention_interval")
    if isinstance(types, list) and len(types) == layers:
        for kind in types:
            kinds[kind if kind in kinds else "full_attention"] += 1
    elif interval:  # Qwen3-Next: every `interval`-th layer full attention, linear the others
        kinds["full_attention"] = layers // interval
        kinds["linear_attention"] = layers - layers // interval
    else:
        kinds["full_attention"] = layers
    if not kinds["sliding_attention"] or not _int(cfg, "sliding_window"):
        kinds["full_attention"] += kinds["sliding_attention"]  # no window: every token is kept
        kinds["sliding_attention"] = 0
    return kinds


def _linear_state_elements(cfg: Mapping[str, Any]) -> int:
    """A gated-delta-net layer's state for one sequence: the causal convolution's last
    (kernel - 1) inputs of q, k and v, and the recurrent state (value heads x key x value dim)."""
    key_heads = _int(cfg, "linear_num_key_heads") or 0
    value_heads = _int(cfg, "linear_num_value_heads") or 0
    key_dim = _int(cfg, "linear_key_head_dim") or 0
    value_dim = _int(cfg, "linear_value_head_dim") or 0
    kernel = _int(cfg, "linear_conv_kernel_dim") or 4
    conv = (kernel - 1) * (2 * key_heads * key_dim + value_heads * value_dim)
    return conv + value_heads * key_dim * value_dim


def kv_cache_dtype_bytes(serve: ServeConfig, facts: ModelFacts) -> int:
    """`--kv-cache-dtype fp8*` stores a byte a value; `auto` (the default) the model's dtype."""
    args = list(serve.extra_args)
    for index, arg in enumerate(args):
        value = None
        if arg.startswith("--kv-cache-dtype="):
            value = arg.partition("=")[2]
        elif arg == "--kv-cache-dtype" and index + 1 < len(args):
            value = args[index + 1]
        if value and value.startswith("fp8"):
            return 1
    return facts.dtype_bytes


@dataclass(frozen=True)
class Fit:
    """The arithmetic for one rank, and what it concludes."""

    memory_gib: float
    gpu_memory_utilization: float
    weights_gib: float
    overhead_gib: float
    kv_budget_gib: float
    kv_bytes_per_token: int  # per rank, every layer that keeps every token
    fixed_bytes_per_sequence: int  # per rank: sliding windows and linear-attention states
    max_model_len: int
    max_num_seqs: int | None
    kv_tokens: int  # what vLLM would log as the KV cache size, estimated

    @property
    def need_gib(self) -> float:
        """KV cache one sequence of max_model_len needs on a rank."""
        return (self.kv_bytes_per_token * self.max_model_len + self.fixed_bytes_per_sequence) / GIB

    @property
    def fits(self) -> bool:
        return self.kv_budget_gib >= self.need_gib

    @property
    def headroom(self) -> float:
        """The share of the KV budget left once one full-length sequence is held."""
        return 1.0 - self.need_gib / self.kv_budget_gib if self.kv_budget_gib > 0 else -1.0

    @property
    def sequences_at_full_length(self) -> int:
        need = self.need_gib
        return int(self.kv_budget_gib // need) if need > 0 and self.kv_budget_gib > 0 else 0

    def largest_max_model_len(self) -> int:
        """The longest max_model_len this budget holds one sequence of (0: none)."""
        budget = self.kv_budget_gib * GIB - self.fixed_bytes_per_sequence
        if budget <= 0:
            return 0
        if self.kv_bytes_per_token == 0:
            return self.max_model_len
        return int(budget // self.kv_bytes_per_token) // KV_BLOCK * KV_BLOCK

    def utilization_that_fits(self) -> float | None:
        """The least gpu_memory_utilization (to 0.01) that holds one full-length sequence;
        None when even all of the node's memory would not."""
        need = self.weights_gib + self.overhead_gib + self.need_gib
        share = math.ceil(need / self.memory_gib * 100) / 100
        return share if share <= 1.0 else None

    def arithmetic(self) -> str:
        """The evidence: each figure and where it comes from."""
        seqs = (
            f"; {self.sequences_at_full_length} sequence(s) of {self.max_model_len} tokens at "
            f"once" + (f" (max_num_seqs {self.max_num_seqs})" if self.max_num_seqs else "")
        )
        fixed = (
            f" + {self.fixed_bytes_per_sequence / 2**20:.1f} MiB a sequence (sliding window, "
            "linear-attention state)"
            if self.fixed_bytes_per_sequence
            else ""
        )
        return (
            f"per rank: {self.gpu_memory_utilization:g} x {self.memory_gib:.2f} GiB = "
            f"{self.gpu_memory_utilization * self.memory_gib:.2f} GiB; weights "
            f"{self.weights_gib:.2f} GiB, engine overhead {self.overhead_gib:.1f} GiB, KV cache "
            f"budget {self.kv_budget_gib:.2f} GiB. KV cache {self.kv_bytes_per_token / 1024:.1f} "
            f"KiB a token{fixed}: max_model_len {self.max_model_len} needs {self.need_gib:.2f} GiB"
            f"{seqs}; about {self.kv_tokens:,} tokens of KV cache"
        )


def estimate(
    facts: ModelFacts,
    serve: ServeConfig,
    memory_gib: float,
    overhead_gib: float = ENGINE_OVERHEAD_GIB,
) -> Fit:
    """One rank's arithmetic for `serve` on a node with `memory_gib` (the smallest node's)."""
    tp, pp = serve.tensor_parallel_size, serve.pipeline_parallel_size
    kv_bytes = kv_cache_dtype_bytes(serve, facts)
    heads_on_rank = max(1, facts.kv_heads // tp)  # fewer KV heads than ranks: replicated
    per_layer_token = 2 * heads_on_rank * facts.head_dim * kv_bytes

    def on_rank(layers: int) -> int:  # pipeline stages split the layers
        return math.ceil(layers / pp)

    max_model_len = serve.max_model_len or facts.max_position_embeddings or 0
    if not max_model_len:
        raise ModelFilesProblem("neither serve.max_model_len nor max_position_embeddings is set")
    per_token = on_rank(facts.full_layers) * (
        facts.mla_bytes_per_token if facts.mla_bytes_per_token else per_layer_token
    )
    window = min(facts.sliding_window, max_model_len)
    fixed = on_rank(facts.sliding_layers) * per_layer_token * window + on_rank(
        facts.linear_layers
    ) * math.ceil(facts.linear_state_bytes / tp)
    weights = facts.weights_bytes / (tp * pp) / GIB
    budget = serve.gpu_memory_utilization * memory_gib - weights - overhead_gib
    tokens = 0
    if budget > 0 and per_token:
        tokens = int(budget * GIB // per_token) // KV_BLOCK * KV_BLOCK
    return Fit(
        memory_gib=memory_gib,
        gpu_memory_utilization=serve.gpu_memory_utilization,
        weights_gib=weights,
        overhead_gib=overhead_gib,
        kv_budget_gib=budget,
        kv_bytes_per_token=per_token,
        fixed_bytes_per_sequence=fixed,
        max_model_len=max_model_len,
        max_num_seqs=serve.max_num_seqs,
        kv_tokens=tokens,
    )


# -- the model's files on a node -----------------------------------------------------------


@dataclass(frozen=True)
class ModelFiles:
    """Where the model's files are on a node, and what of them is already read (preflight's
    model check reads them first; the fit check then reads only what it still lacks)."""

    snapshot: str  # the folder holding config.json, on the node
    config: Mapping[str, Any] | None = None  # config.json, parsed
    weights_bytes: int | None = None  # the index's metadata.total_size, or the single file's size

    def config_json(self) -> str:
        return f"{self.snapshot}/config.json"

    def index_json(self) -> str:
        return f"{self.snapshot}/model.safetensors.index.json"

    def single_file(self) -> str:
        return f"{self.snapshot}/model.safetensors"


def hub_folder(model: str) -> str:
    """The Hugging Face cache's folder name for a hub id: Qwen/X -> models--Qwen--X."""
    return "models--" + model.replace("/", "--")


def host_path(config: ClusterConfig, container_path: str, home: str) -> str | None:
    """The node's path behind a path in the container, through the container's mounts."""
    best = None
    for mount in config.container.mounts:
        target = mount.target.rstrip("/") or "/"
        inside = container_path == target or container_path.startswith(target.rstrip("/") + "/")
        if inside and (best is None or len(target) > len(best.target)):
            best = mount
    if best is None:
        return None
    source = home + best.source[1:] if best.source.startswith("~") else best.source
    return source.rstrip("/") + container_path[len(best.target.rstrip("/")) :]


def hf_home(config: ClusterConfig) -> str:
    return config.container.env.get("HF_HOME", HF_HOME_IN_CONTAINER)


def parse_index_total(text: str) -> int | None:
    """`metadata.total_size` of a safetensors index (read from its first bytes: the metadata
    comes before the weight map, so a bounded read that cut the map still has it)."""
    try:
        data = json.loads(text)
    except ValueError:
        match = _TOTAL_SIZE.search(text)
        return int(match[1]) if match else None
    return index_total(data)


def index_total(data: Any) -> int | None:
    """`metadata.total_size` of a parsed safetensors index."""
    metadata = data.get("metadata") if isinstance(data, dict) else None
    total = metadata.get("total_size") if isinstance(metadata, dict) else None
    return int(total) if isinstance(total, int | float) and total > 0 else None


_COMMIT = re.compile(r"^[0-9A-Za-z._-]{1,100}$")
CONFIG_READ_BYTES = 262_144
INDEX_READ_BYTES = 65_536


async def read_model_facts(
    config: ClusterConfig, node: NodeConnection, home: str, found: ModelFiles | None = None
) -> ModelFacts:
    """The model's config.json and safetensors index, read from `node`'s Hugging Face cache
    (the mounted one) with bounded reads; ModelFilesProblem says what is missing. What `found`
    already holds (preflight's model check read it) is not read again."""
    timeout = config.timeouts.preflight

    async def read(path: str, limit: int) -> str | None:
        try:
            return await node.read_file(path, timeout=timeout, limit=limit)
        except FileUnreadable:
            return None

    files = found or ModelFiles(await _snapshot(config, node, home, read))
    parsed = files.config
    if parsed is None:
        text = await read(files.config_json(), CONFIG_READ_BYTES)
        if text is None:
            raise ModelFilesProblem(f"no {files.config_json()} on {node.name}")
        try:
            parsed = json.loads(text)
        except ValueError:
            raise ModelFilesProblem(f"{files.config_json()} on {node.name} is not JSON") from None
        if not isinstance(parsed, dict):
            raise ModelFilesProblem(f"{files.config_json()} on {node.name} is not a JSON object")
    total = files.weights_bytes
    if total is None:
        index = await read(files.index_json(), INDEX_READ_BYTES)
        total = parse_index_total(index) if index is not None else None
    if total is None:
        try:
            single = await node.read_bytes(files.single_file(), timeout=timeout, offset=0, length=0)
        except FileUnreadable:
            raise ModelFilesProblem(
                f"neither {files.index_json()} (with metadata.total_size) nor "
                f"{files.single_file()} on {node.name}"
            ) from None
        total = single.size
    return model_facts(parsed, total)


async def _snapshot(
    config: ClusterConfig,
    node: NodeConnection,
    home: str,
    read: Callable[[str, int], Awaitable[str | None]],
) -> str:
    """The folder on `node` that holds the model's config.json (a hub model's refs/main)."""
    model = config.serve.model
    if model.startswith("/"):
        snapshot = host_path(config, model, home)
        if snapshot is None:
            raise ModelFilesProblem(f"no container mount holds {model}")
        return snapshot
    hub = host_path(config, hf_home(config) + "/hub", home)
    if hub is None:
        raise ModelFilesProblem(
            f"no container mount holds the Hugging Face cache ({hf_home(config)})"
        )
    repo = f"{hub}/{hub_folder(model)}"
    ref = (await read(f"{repo}/refs/main", 200) or "").strip()
    if not _COMMIT.match(ref):
        raise ModelFilesProblem(f"{model} is not in {hub} on {node.name} ({repo}/refs/main)")
    return f"{repo}/snapshots/{ref}"


class MemoryLogged:
    """What vLLM logs of its memory, kept from the launch's log lines as they are read: the
    weights a rank ("Model loading took X GiB", the largest rank's) and the KV cache tokens."""

    def __init__(self) -> None:
        self.weights_gib: float | None = None
        self.kv_tokens: int | None = None

    def observe(self, line: LogLine) -> None:
        message = strip_prefixes(line.text)
        gib = _figure(message, WEIGHTS_SPELLINGS, "gib")
        if gib is not None:
            self.weights_gib = max(gib, self.weights_gib or 0.0)
        tokens = _figure(message, KV_CACHE_SPELLINGS, "tokens")
        if tokens is not None:
            self.kv_tokens = int(tokens)


def _figure(message: str, spellings: Sequence[Spelling], group: str) -> float | None:
    for item in spellings:
        if group in item.pattern.groupindex:
            match = item.pattern.search(message)
            if match:
                return float(match[group].replace(",", ""))
    return None


def compare_with_logged(fit: Fit | None, logged: MemoryLogged) -> str | None:
    """The estimate beside what vLLM logged ("Model loading took X GiB", "KV cache size: N
    tokens"), for the Ready message; None when there is neither."""
    weights, tokens = logged.weights_gib, logged.kv_tokens
    if fit is None and weights is None and tokens is None:
        return None
    estimated = (
        f"estimated {fit.weights_gib:.2f} GiB of weights a rank, ~{fit.kv_tokens:,} KV cache tokens"
        if fit
        else "no estimate (the model's files could not be read)"
    )
    logged_text = ", ".join(
        part
        for part in (
            f"{weights:.2f} GiB of weights" if weights is not None else "",
            f"{tokens:,} KV cache tokens" if tokens is not None else "",
        )
        if part
    )
    return f"{estimated}; vLLM logged {logged_text or 'neither figure'}"
