"""The lab's Hugging Face cache layout (lab/hf_cache.py): the hub's layout with real safetensors
shards, read by the emulator as vLLM's arithmetic reads it, and partial the ways an interrupted
download leaves a model."""

from __future__ import annotations

import json
import os
import struct
from pathlib import Path

import pytest

from lab import hf_cache
from lab.emulator import model_files

MODEL = "spark-lab/tiny"


def parse_shard(data: bytes) -> tuple[dict, int]:
    """(header, bytes its tensors need) of a safetensors file, as its readers parse it."""
    (length,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + length])
    header.pop("__metadata__")
    end = max(t["data_offsets"][1] for t in header.values())
    return header, 8 + length + end


def test_a_complete_model_is_in_the_hubs_layout_and_the_emulator_reads_it(tmp_path, monkeypatch):
    model = hf_cache.write_model(tmp_path, MODEL, shards=3)
    assert model.complete
    repo = tmp_path / "hub" / "models--spark-lab--tiny"
    assert (repo / "refs" / "main").read_text() == model.commit
    snapshot = repo / "snapshots" / model.commit
    index = json.loads((snapshot / "model.safetensors.index.json").read_text())
    assert sorted(set(index["weight_map"].values())) == sorted(model.shards)
    tensor_bytes = 0
    for name in model.shards:
        link = snapshot / name
        assert link.is_symlink() and os.readlink(link).startswith("../../blobs/")
        data = link.read_bytes()
        header, needed = parse_shard(data)
        assert len(data) == needed == model.sizes[name]
        for tensor, entry in header.items():
            assert index["weight_map"][tensor] == name
            begin, end = entry["data_offsets"]
            assert end - begin == hf_cache.nbytes(entry["dtype"], tuple(entry["shape"]))
            tensor_bytes += end - begin
    assert index["metadata"]["total_size"] == tensor_bytes
    assert sum(len(p.read_bytes()) for p in (repo / "blobs").iterdir()) < 64 * 1024
    monkeypatch.setenv("HF_HOME", str(tmp_path))
    files = model_files.load(MODEL)
    assert files is not None and files["weights_bytes"] == tensor_bytes
    assert files["config"]["num_hidden_layers"] == hf_cache.TINY_CONFIG["num_hidden_layers"]


def test_a_big_models_config_and_size_stand_beside_small_shards(tmp_path, monkeypatch):
    config = dict(hf_cache.TINY_CONFIG, num_hidden_layers=80)
    hf_cache.write_model(tmp_path, MODEL, config=config, total_size=200_000_000_000)
    monkeypatch.setenv("HF_HOME", str(tmp_path))
    files = model_files.load(MODEL)
    assert files is not None and files["weights_bytes"] == 200_000_000_000
    assert files["config"]["num_hidden_layers"] == 80


def test_a_partial_download_misses_a_shard_is_still_downloading_one_or_has_one_cut(
    tmp_path, monkeypatch
):
    model = hf_cache.write_model(
        tmp_path, MODEL, shards=4, missing=[1], incomplete=[2], truncated=[3]
    )
    assert not model.complete
    names = sorted(model.shards)
    assert [model.shards[n] for n in names] == ["missing", "incomplete", "truncated", "complete"]
    snapshot, blobs = model.snapshot, model.repo / "blobs"
    # missing: nothing at all; incomplete: only `<sha256>.incomplete`, half there, no link
    assert not (snapshot / names[0]).exists() and not (snapshot / names[1]).is_symlink()
    (incomplete,) = blobs.glob("*.incomplete")
    assert len(incomplete.read_bytes()) == model.sizes[names[1]] // 2
    # truncated: linked, but shorter than its own header says
    data = (snapshot / names[2]).read_bytes()
    (length,) = struct.unpack("<Q", data[:8])
    assert len(data) < model.sizes[names[2]] and len(data) > 8 + length
    assert parse_shard((snapshot / names[3]).read_bytes())[1] == model.sizes[names[3]]
    # config.json and the index are there: only the shards tell the download is not done
    monkeypatch.setenv("HF_HOME", str(tmp_path))
    assert model_files.load(MODEL) is not None
    hf_cache.remove_model(tmp_path, MODEL)
    assert not model.repo.exists() and model_files.load(MODEL) is None


@pytest.mark.parametrize(
    "options",
    [{"shards": 0}, {"shards": 2, "missing": [3]}, {"shards": 1, "truncated": [0]}],
)
def test_bad_layouts_are_refused(tmp_path, options):
    with pytest.raises(ValueError):
        hf_cache.write_model(tmp_path, MODEL, **options)
    assert not Path(tmp_path, "hub").exists()
