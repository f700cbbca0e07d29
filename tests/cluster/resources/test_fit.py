"""The fit arithmetic against figures computed by hand from known models' config.json, and the
reading of a model's files from a Hugging Face cache (real files, real `head` and `stat`)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cluster.config import Mount, NodeConfig, ServeConfig
from cluster.logs.container_stream import LogLine
from cluster.nodes.local import LocalNode
from cluster.resources.fit import (
    MemoryLogged,
    ModelFilesProblem,
    compare_with_logged,
    estimate,
    model_facts,
    parse_index_total,
    read_model_facts,
)
from lab.api import LAB_MODEL_CONFIG
from testkit.doubles import CLUSTER

GIB = 2**30
GB10 = 121.63  # what vLLM sees on a DGX Spark

# meta-llama/Llama-3.1-8B-Instruct's config.json (the figures the arithmetic reads) and index
LLAMA_8B = {
    "architectures": ["LlamaForCausalLM"],
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "hidden_size": 4096,
    "torch_dtype": "bfloat16",
    "max_position_embeddings": 131072,
}
LLAMA_8B_BYTES = 16_060_522_496
# openai/gpt-oss-120b: alternating sliding-window (128 tokens) and full attention layers
GPT_OSS_120B = {
    "num_hidden_layers": 36,
    "num_attention_heads": 64,
    "num_key_value_heads": 8,
    "head_dim": 64,
    "hidden_size": 2880,
    "sliding_window": 128,
    "layer_types": ["sliding_attention", "full_attention"] * 18,
    "torch_dtype": "bfloat16",
    "max_position_embeddings": 131072,
}
# a Qwen3-Next-shaped hybrid (under text_config, as Qwen3.5's multimodal config has it): the
# lab's own model
HYBRID = LAB_MODEL_CONFIG
# DeepSeek-V2-Lite: multi-head latent attention
MLA = {
    "num_hidden_layers": 27,
    "num_attention_heads": 16,
    "hidden_size": 2048,
    "kv_lora_rank": 512,
    "qk_rope_head_dim": 64,
    "torch_dtype": "bfloat16",
}


def serve(**values) -> ServeConfig:
    return ServeConfig(model="m", **values)


def test_a_dense_model_on_one_spark_by_hand():
    fit = estimate(
        model_facts(LLAMA_8B, LLAMA_8B_BYTES),
        serve(tensor_parallel_size=1, max_model_len=32768),
        GB10,
    )
    # 16,060,522,496 B = 14.9575 GiB; 0.9 x 121.63 = 109.467; 109.467 - 14.9575 - 5.2 = 89.3095
    assert fit.weights_gib == pytest.approx(14.9575, abs=1e-4)
    assert fit.kv_budget_gib == pytest.approx(89.3095, abs=1e-4)
    # 2 (K, V) x 8 heads x 128 x 2 bytes x 32 layers = 131,072 B a token: 4 GiB for 32768 tokens
    assert fit.kv_bytes_per_token == 131_072 and fit.need_gib == 4.0
    # 89.3095 GiB / 128 KiB = 731,623.x tokens, in whole blocks of 16
    assert fit.kv_tokens == 731_616 and fit.fits and fit.sequences_at_full_length == 22
    assert "0.9 x 121.63 GiB = 109.47 GiB; weights 14.96 GiB" in fit.arithmetic()
    assert "KV cache 128.0 KiB a token" in fit.arithmetic()


def test_tensor_parallelism_splits_the_weights_and_the_kv_heads():
    fit = estimate(
        model_facts(LLAMA_8B, LLAMA_8B_BYTES),
        serve(tensor_parallel_size=2, max_model_len=32768),
        GB10,
    )
    assert fit.weights_gib == pytest.approx(7.4788, abs=1e-4)
    assert fit.kv_bytes_per_token == 65_536  # 4 of the 8 KV heads on each rank


def test_an_fp8_kv_cache_halves_the_kv_a_token():
    fit = estimate(
        model_facts(LLAMA_8B, LLAMA_8B_BYTES),
        serve(tensor_parallel_size=1, max_model_len=32768, extra_args=["--kv-cache-dtype=fp8"]),
        GB10,
    )
    assert fit.kv_bytes_per_token == 65_536


def test_a_model_that_does_not_fit_names_the_longest_context_and_the_utilization_that_would():
    fit = estimate(
        model_facts(LLAMA_8B, 110_000_000_000),
        serve(tensor_parallel_size=1, max_model_len=32768),
        GB10,
    )
    # weights 102.445 GiB: 109.467 - 102.445 - 5.2 = 1.8215 GiB left, 4 GiB needed
    assert not fit.fits and fit.kv_budget_gib == pytest.approx(1.8215, abs=1e-4)
    # 1.8215 GiB / 128 KiB = 14,924.x -> 14,912 (blocks of 16)
    assert fit.largest_max_model_len() == 14_912
    # (102.445 + 5.2 + 4) / 121.63 = 0.9179 -> 0.92
    assert fit.utilization_that_fits() == 0.92


def test_weights_larger_than_the_node_leave_no_utilization_that_fits():
    fit = estimate(model_facts(LLAMA_8B, 240_000_000_000), serve(tensor_parallel_size=1), GB10)
    assert fit.max_model_len == 131072  # max_model_len unset: the model's own maximum
    assert not fit.fits and fit.utilization_that_fits() is None
    assert fit.largest_max_model_len() == 0


def test_sliding_window_layers_keep_a_window_a_sequence_not_every_token():
    fit = estimate(
        model_facts(GPT_OSS_120B, 65_249_902_592),
        serve(tensor_parallel_size=1, max_model_len=64000, gpu_memory_utilization=0.75),
        GB10,
    )
    # 2 x 8 x 64 x 2 = 2,048 B a layer and token; 18 full layers a token, 18 sliding x 128
    assert fit.kv_bytes_per_token == 18 * 2048
    assert fit.fixed_bytes_per_sequence == 18 * 2048 * 128
    assert fit.fits and fit.kv_tokens == 735_568


def test_linear_attention_layers_hold_a_state_a_sequence_split_by_tensor_parallelism():
    facts = model_facts(HYBRID, 119_000_000_000)
    assert (facts.full_layers, facts.linear_layers) == (12, 36)
    # conv: 3 x (2 x 16 x 128 + 64 x 128) = 36,864; recurrent: 64 x 128 x 128 = 1,048,576; bf16
    assert facts.linear_state_bytes == (36_864 + 1_048_576) * 2
    fit = estimate(facts, serve(tensor_parallel_size=2, max_model_len=32768), GB10)
    # 2 KV heads over 2 ranks: one each; 2 x 1 x 256 x 2 = 1,024 B x 12 full layers
    assert fit.kv_bytes_per_token == 12 * 1024
    assert fit.fixed_bytes_per_sequence == 36 * (36_864 + 1_048_576)
    assert fit.fits


def test_mla_keeps_one_latent_a_token_on_every_rank():
    facts = model_facts(MLA, 31_000_000_000)
    fit = estimate(facts, serve(tensor_parallel_size=2, max_model_len=4096), GB10)
    assert fit.kv_bytes_per_token == 27 * (512 + 64) * 2


def test_pipeline_stages_split_the_layers():
    fit = estimate(
        model_facts(LLAMA_8B, LLAMA_8B_BYTES),
        serve(tensor_parallel_size=1, pipeline_parallel_size=2, max_model_len=8192),
        GB10,
    )
    assert fit.kv_bytes_per_token == 131_072 // 2


def test_a_config_without_layers_cannot_be_estimated():
    with pytest.raises(ModelFilesProblem, match="num_hidden_layers"):
        model_facts({"hidden_size": 8}, 1)


def test_the_index_total_survives_a_bounded_read_that_cut_the_weight_map():
    cut = '{"metadata": {"total_size": 1234567}, "weight_map": {"a": "model-00001-of-'
    assert parse_index_total(cut) == 1234567
    assert parse_index_total('{"metadata": {}, "weight_map": {}}') is None


def test_the_ready_message_figures_set_the_estimate_beside_what_vllm_logged():
    fit = estimate(
        model_facts(LLAMA_8B, LLAMA_8B_BYTES),
        serve(tensor_parallel_size=1, max_model_len=32768),
        GB10,
    )
    logged = MemoryLogged()
    for text in [
        "(RayWorkerWrapper pid=1, ip=x) INFO 01-01 00:00:00 [gpu_model_runner.py:1] Model loading "
        "took 14.9576 GiB memory and 30.1 seconds",
        "INFO 01-01 00:00:00 [default_loader.py:1] Loading weights took 29.00 seconds",
        "(EngineCore_DP0 pid=89) INFO 01-01 00:00:00 [kv_cache_utils.py:1] GPU KV cache size: "
        "731,616 tokens",
    ]:
        logged.observe(LogLine(node="spark-head", text=text))
    assert compare_with_logged(fit, logged) == (
        "estimated 14.96 GiB of weights a rank, ~731,616 KV cache tokens; "
        "vLLM logged 14.96 GiB of weights, 731,616 KV cache tokens"
    )
    assert compare_with_logged(None, MemoryLogged()) is None


def write_model(cache: Path, model: str, config: dict, total: int | None) -> Path:
    repo = cache / "hub" / ("models--" + model.replace("/", "--"))
    snapshot = repo / "snapshots" / "abc123"
    snapshot.mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("abc123")
    (snapshot / "config.json").write_text(json.dumps(config))
    if total is not None:
        weight_map = {
            f"model.layers.{i}.w": "model-00001-of-00002.safetensors" for i in range(5000)
        }
        index = {"metadata": {"total_size": total}, "weight_map": weight_map}
        (snapshot / "model.safetensors.index.json").write_text(json.dumps(index))
    return snapshot


def local_node() -> LocalNode:
    config = NodeConfig(name="spark-head", driver="local", fabric_ip="127.0.0.1")
    return LocalNode(config, None, 0.0)  # type: ignore[arg-type]  # no Docker: files only


def with_cache(cache: Path):
    container = CLUSTER.container.model_copy(
        update={"mounts": [Mount(source="~/hf", target="/root/.cache/huggingface")]}
    )
    return CLUSTER.model_copy(update={"container": container})


async def test_the_model_files_are_read_from_the_mounted_cache_on_the_node(tmp_path):
    write_model(tmp_path / "hf", CLUSTER.serve.model, LLAMA_8B, LLAMA_8B_BYTES)
    facts = await read_model_facts(with_cache(tmp_path), local_node(), str(tmp_path))
    assert facts.weights_bytes == LLAMA_8B_BYTES and facts.full_layers == 32


async def test_a_single_file_model_is_sized_by_its_file(tmp_path):
    snapshot = write_model(tmp_path / "hf", CLUSTER.serve.model, LLAMA_8B, None)
    (snapshot / "model.safetensors").write_bytes(b"\0" * 4096)
    facts = await read_model_facts(with_cache(tmp_path), local_node(), str(tmp_path))
    assert facts.weights_bytes == 4096


async def test_a_model_missing_from_the_cache_says_where_it_looked(tmp_path):
    with pytest.raises(ModelFilesProblem) as problem:
        await read_model_facts(with_cache(tmp_path), local_node(), str(tmp_path))
    assert f"{tmp_path}/hf/hub/models--Qwen--Qwen3.5-122B-A10B-FP8/refs/main" in str(problem.value)


async def test_no_mount_for_the_cache_is_said_so():
    with pytest.raises(ModelFilesProblem, match="no container mount holds the Hugging Face cache"):
        await read_model_facts(
            CLUSTER.model_copy(
                update={"container": CLUSTER.container.model_copy(update={"mounts": []})}
            ),
            local_node(),
            "/root",
        )


def test_the_emulator_logs_the_figures_the_fit_check_estimates():
    """lab/emulator/model_files.py is the emulator's own reading of the same files: for the
    same settings its weights and KV tokens are the fit check's."""
    from lab.emulator import model_files
    from lab.emulator import profiles as P

    for config, total, tp, gmu, length in [
        (LLAMA_8B, LLAMA_8B_BYTES, 1, 0.9, 32768),
        (GPT_OSS_120B, 65_249_902_592, 1, 0.75, 64000),
        (HYBRID, 119_000_000_000, 2, 0.9, 32768),
    ]:
        fit = estimate(
            model_facts(config, total),
            serve(tensor_parallel_size=tp, gpu_memory_utilization=gmu, max_model_len=length),
            P.GPU_TOTAL_GIB,
        )
        files = {"weights_bytes": total, "config": {**config, **config.get("text_config", {})}}
        profile = dict(P.get_profile("lab"), weights_gb=total / 1e9)
        per_token = model_files.kv_bytes_per_token(files, tp, 1)
        _, tokens = P.kv_cache(profile, gmu, tp, 1, per_token_bytes=per_token)
        assert P.weights_gib(profile, tp, 1) == pytest.approx(fit.weights_gib)
        assert per_token == fit.kv_bytes_per_token and tokens == fit.kv_tokens
