"""A stand-in model in a Hugging Face cache, in the hub's own layout (blobs named by their
sha256, snapshot symlinks into them, refs/main), with small but real safetensors shards: what
preflight's model check and `sync-model` read."""

from __future__ import annotations

import hashlib
import json
import os
import struct
from pathlib import Path

COMMIT = "5d0b7c4e6f0e9a1f33c0d2b415d0b7c4e6f0e9a1"
TINY_CONFIG = {
    "architectures": ["LlamaForCausalLM"],
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "hidden_size": 256,
    "torch_dtype": "bfloat16",
    "max_position_embeddings": 4096,
}


def safetensors_file(tensors: dict[str, int]) -> bytes:
    """A safetensors file of U8 tensors of the given byte counts."""
    header, offset = {}, 0
    for name, count in tensors.items():
        header[name] = {"dtype": "U8", "shape": [count], "data_offsets": [offset, offset + count]}
        offset += count
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)  # safetensors pads its header to 8 bytes
    return struct.pack("<Q", len(text)) + text + bytes(i % 251 for i in range(offset))


def shard_names(count: int) -> list[str]:
    if count == 1:
        return ["model.safetensors"]
    return [f"model-{i:05d}-of-{count:05d}.safetensors" for i in range(1, count + 1)]


def repo_folder(cache: Path, model: str) -> Path:
    return cache / "hub" / ("models--" + model.replace("/", "--"))


def lay_out_model(
    cache: Path,
    model: str,
    *,
    shards: int = 2,
    shard_bytes: int = 4096,
    config: dict | None = None,
    total_size: int | None = None,
) -> Path:
    """The model complete in `cache` (an HF_HOME); returns its snapshot folder. `total_size` is
    what the index claims (the fit check's figure), the shards' own size by default."""
    repo = repo_folder(cache, model)
    snapshot = repo / "snapshots" / COMMIT
    (repo / "blobs").mkdir(parents=True, exist_ok=True)
    snapshot.mkdir(parents=True, exist_ok=True)
    (repo / "refs").mkdir(exist_ok=True)
    files: dict[str, bytes] = {"config.json": json.dumps(config or TINY_CONFIG).encode()}
    weight_map = {}
    for number, name in enumerate(shard_names(shards)):
        files[name] = safetensors_file({f"layers.{number}.weight": shard_bytes})
        weight_map[f"layers.{number}.weight"] = name
    if shards > 1:
        index = {
            "metadata": {"total_size": total_size or shards * shard_bytes},
            "weight_map": weight_map,
        }
        files["model.safetensors.index.json"] = json.dumps(index).encode()
    for name, data in files.items():
        blob = hashlib.sha256(data).hexdigest()
        (repo / "blobs" / blob).write_bytes(data)
        link = snapshot / name
        link.unlink(missing_ok=True)
        link.symlink_to(f"../../blobs/{blob}")
    (repo / "refs" / "main").write_text(COMMIT)
    return snapshot


def cut_short(snapshot: Path, name: str, keep: int) -> None:
    """Leave only the first `keep` bytes of a file of the snapshot (an interrupted download)."""
    target = (snapshot / name).resolve()
    target.write_bytes(target.read_bytes()[:keep])


def lay_out_big_model(cache: Path, model: str, size: int) -> Path:
    """A single-shard model of `size` bytes of tensor data (random: nothing to compress), written
    a MiB at a time; returns its snapshot folder."""
    repo = repo_folder(cache, model)
    snapshot = repo / "snapshots" / COMMIT
    for folder in (repo / "blobs", snapshot, repo / "refs"):
        folder.mkdir(parents=True, exist_ok=True)
    header = json.dumps({"w": {"dtype": "U8", "shape": [size], "data_offsets": [0, size]}})
    text = header.encode() + b" " * (-len(header) % 8)
    chunk = os.urandom(1 << 20)
    with open(repo / "blobs" / "big", "wb") as blob:
        blob.write(struct.pack("<Q", len(text)) + text)
        for start in range(0, size, len(chunk)):
            blob.write(chunk[: size - start])
    (snapshot / "config.json").write_text(json.dumps(TINY_CONFIG))
    (snapshot / "model.safetensors").unlink(missing_ok=True)
    (snapshot / "model.safetensors").symlink_to("../../blobs/big")
    (repo / "refs" / "main").write_text(COMMIT)
    return snapshot
