"""A model in a Hugging Face cache, laid out as the hub's client leaves it, with small but real
files: `hub/models--ORG--NAME/blobs/<hash>` (sha256 for the weights, as LFS names them; the git
blob hash for the JSON files), `snapshots/<commit>/<file>` symlinks to them, `refs/main` holding
the commit. The weights are safetensors shards (8-byte little-endian header length, a JSON header
with each tensor's dtype, shape and data_offsets, then the data), listed by
`model.safetensors.index.json` (`weight_map`, `metadata.total_size`).

A download cut short leaves a model partial in one of the ways this can make it:
- `missing`: a shard never started (no blob, no snapshot link);
- `incomplete`: a shard still downloading (`blobs/<sha256>.incomplete` holding its first
  bytes, no snapshot link), as huggingface_hub leaves it when interrupted;
- `truncated`: a shard whose blob is linked but shorter than its header says (a copy that died).

Pure file work on a cache directory (the host path of a node's `~/.cache/huggingface`).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import struct
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path

DTYPE_BYTES = {"F64": 8, "F32": 4, "BF16": 2, "F16": 2, "F8_E4M3": 1, "I64": 8, "I32": 4, "U8": 1}

# A tiny Llama: real names, dtypes and shapes (a few KB); any config.json may stand beside them
# (a big model's, for the fit check), as the tensors are never loaded.
TINY_CONFIG = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 16,
    "intermediate_size": 32,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
    "head_dim": 8,
    "vocab_size": 64,
    "max_position_embeddings": 4096,
    "torch_dtype": "bfloat16",
}
TINY_TENSORS: list[tuple[str, str, tuple[int, ...]]] = [
    ("model.embed_tokens.weight", "BF16", (64, 16)),
    *(
        (f"model.layers.{layer}.{name}", "BF16", shape)
        for layer in range(2)
        for name, shape in (
            ("input_layernorm.weight", (16,)),
            ("self_attn.q_proj.weight", (16, 16)),
            ("self_attn.k_proj.weight", (8, 16)),
            ("self_attn.v_proj.weight", (8, 16)),
            ("self_attn.o_proj.weight", (16, 16)),
            ("post_attention_layernorm.weight", (16,)),
            ("mlp.gate_proj.weight", (32, 16)),
            ("mlp.up_proj.weight", (32, 16)),
            ("mlp.down_proj.weight", (16, 32)),
        )
    ),
    ("model.norm.weight", "BF16", (16,)),
    ("lm_head.weight", "BF16", (64, 16)),
]
INDEX = "model.safetensors.index.json"


@dataclass(frozen=True)
class CachedModel:
    """What `write_model` left in the cache."""

    model: str
    repo: Path  # hub/models--ORG--NAME
    commit: str
    shards: dict[str, str]  # shard file -> "complete" | "missing" | "incomplete" | "truncated"
    sizes: dict[str, int]  # shard file -> its full size in bytes

    @property
    def snapshot(self) -> Path:
        return self.repo / "snapshots" / self.commit

    @property
    def complete(self) -> bool:
        return all(state == "complete" for state in self.shards.values())


def repo_dir(cache: Path, model: str) -> Path:
    return cache / "hub" / ("models--" + model.replace("/", "--"))


def nbytes(dtype: str, shape: tuple[int, ...]) -> int:
    size = DTYPE_BYTES[dtype]
    for dim in shape:
        size *= dim
    return size


def _git_blob_hash(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def _tensor_bytes(name: str, size: int) -> bytes:
    """Deterministic contents, different per tensor."""
    seed = hashlib.sha256(name.encode()).digest()
    return (seed * (size // len(seed) + 1))[:size]


def safetensors_file(tensors: list[tuple[str, str, tuple[int, ...]]]) -> bytes:
    header: dict[str, object] = {"__metadata__": {"format": "pt"}}
    data = b""
    for name, dtype, shape in tensors:
        size = nbytes(dtype, shape)
        header[name] = {
            "dtype": dtype,
            "shape": list(shape),
            "data_offsets": [len(data), len(data) + size],
        }
        data += _tensor_bytes(name, size)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)  # the data starts 8-byte aligned, as safetensors writes it
    return struct.pack("<Q", len(text)) + text + data


def write_model(
    cache: Path,
    model: str,
    *,
    config: dict | None = None,
    shards: int = 2,
    commit: str | None = None,
    missing: Collection[int] = (),
    incomplete: Collection[int] = (),
    truncated: Collection[int] = (),
    total_size: int | None = None,
) -> CachedModel:
    """Lay out `model` (replacing what the cache held of it). Shards are numbered from 1 as in
    their names (`model-00001-of-00002.safetensors`). `total_size`: the index's
    metadata.total_size when it should claim a big model's weights (the fit check reads it);
    by default the shards' tensor bytes, as a real index says."""
    if not 1 <= shards <= len(TINY_TENSORS):
        raise ValueError(f"shards must be 1..{len(TINY_TENSORS)}, got {shards}")
    faulty = {"missing": set(missing), "incomplete": set(incomplete), "truncated": set(truncated)}
    for kind, numbers in faulty.items():
        if not numbers <= set(range(1, shards + 1)):
            raise ValueError(f"{kind} shards must be among 1..{shards}, got {sorted(numbers)}")
    commit = commit or hashlib.sha1(model.encode()).hexdigest()
    repo = repo_dir(cache, model)
    shutil.rmtree(repo, ignore_errors=True)
    snapshot = repo / "snapshots" / commit
    (repo / "blobs").mkdir(parents=True)
    snapshot.mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(commit)

    def link(name: str, blob: str) -> None:
        os.symlink(os.path.join("..", "..", "blobs", blob), snapshot / name)

    names = [f"model-{i:05d}-of-{shards:05d}.safetensors" for i in range(1, shards + 1)]
    weight_map, states, sizes, tensor_bytes = {}, {}, {}, 0
    for number, name in enumerate(names, 1):
        tensors = TINY_TENSORS[number - 1 :: shards]
        data = safetensors_file(tensors)
        for tensor, dtype, shape in tensors:
            weight_map[tensor] = name
            tensor_bytes += nbytes(dtype, shape)
        sha = hashlib.sha256(data).hexdigest()
        state = next((kind for kind, numbers in faulty.items() if number in numbers), "complete")
        if state in ("complete", "truncated"):
            (repo / "blobs" / sha).write_bytes(
                data if state == "complete" else data[: len(data) // 2]
            )
            link(name, sha)
        elif state == "incomplete":
            (repo / "blobs" / f"{sha}.incomplete").write_bytes(data[: len(data) // 2])
        states[name], sizes[name] = state, len(data)
    index = {
        "metadata": {"total_size": total_size or tensor_bytes},
        "weight_map": dict(sorted(weight_map.items())),
    }
    for name, content in (
        ("config.json", json.dumps(config or TINY_CONFIG, indent=2) + "\n"),
        (INDEX, json.dumps(index, indent=2) + "\n"),
    ):
        data = content.encode()
        blob = _git_blob_hash(data)
        (repo / "blobs" / blob).write_bytes(data)
        link(name, blob)
    return CachedModel(model, repo, commit, states, sizes)


def remove_model(cache: Path, model: str) -> None:
    shutil.rmtree(repo_dir(cache, model), ignore_errors=True)
