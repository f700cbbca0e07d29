"""The emulator meets the model's files in its container's Hugging Face cache as vLLM 0.32 does
(the lines were taken from the real engine's venv: vLLM 0.32.0, huggingface_hub 2.4.0,
safetensors 0.8.0): offline without a snapshot it refuses at once; offline without a shard the
index lists, or with a shard not the size its header says, the load fails; online, a missing
model is the emulated hub's download, as before."""

from pathlib import Path

import pytest

from testkit.model_cache import cut_short, lay_out_model
from tests.lab.emulator.conftest import free_port

MODEL = "Qwen/Qwen3.5-122B-A10B-FP8"
SHARD_2 = "model-00002-of-00002.safetensors"
pytestmark = pytest.mark.timeout(60)


def serve(spawn, cache: Path, offline: bool):
    env = {"HF_HOME": str(cache), "SPARK_EMU_GPUS": "2"}
    if offline:
        env["HF_HUB_OFFLINE"] = "1"
    return spawn(
        ["vllm", "serve", MODEL, "-tp", "2", "--port", str(free_port())], env=env, name="serve"
    )


def test_offline_without_a_snapshot_refuses_before_anything_loads(spawn, tmp_path):
    p = serve(spawn, tmp_path / "hf", offline=True)
    assert p.wait_exit() == 1
    assert p.lines[-1] == (
        "huggingface_hub.errors.LocalEntryNotFoundError: Cannot find an appropriate cached "
        "snapshot folder for the specified revision on the local disk and outgoing traffic has "
        "been disabled. To enable repo look-ups and downloads online, pass "
        "'local_files_only=False' as input."
    )
    assert "get_model_path" in p.text and "Loading weights" not in p.text


def test_offline_without_a_shard_the_load_fails_naming_it(spawn, tmp_path):
    snapshot = lay_out_model(tmp_path / "hf", MODEL)
    (snapshot / SHARD_2).unlink()
    p = serve(spawn, tmp_path / "hf", offline=True)
    p.wait_for(
        f"FileNotFoundError: Weight files referenced in index but missing: {{'{tmp_path}/hf/hub/"
        f"models--Qwen--Qwen3.5-122B-A10B-FP8/snapshots/",
    )
    assert p.wait_exit() == 1
    assert SHARD_2 + "'}" in p.text and "Loading weights took" not in p.text


def test_a_short_shard_fails_the_load_as_safetensors_says_online_too(spawn, tmp_path):
    snapshot = lay_out_model(tmp_path / "hf", MODEL, shard_bytes=4096)
    cut_short(snapshot, SHARD_2, 2000)
    p = serve(spawn, tmp_path / "hf", offline=False)
    p.wait_for(
        "safetensors._safetensors_rust.SafetensorError: Error while deserializing header: "
        "incomplete metadata, file not fully covered"
    )
    assert p.wait_exit() == 1
    assert "Engine core initialization failed" in p.text or "EngineCore failed to start" in p.text


def test_a_complete_model_offline_and_no_model_online_both_serve(spawn, tmp_path):
    lay_out_model(tmp_path / "hf", MODEL, total_size=8_000_000_000)
    p = serve(spawn, tmp_path / "hf", offline=True)
    p.wait_for("Application startup complete.", 30)
    assert "Model loading took 3.7253 GiB" in p.text  # the index's total_size / TP, as before
    p.kill()
    q = serve(spawn, tmp_path / "empty", offline=False)  # the emulated hub downloads it
    q.wait_for("Application startup complete.", 30)
