"""Performance profiles (data) and their truth.

Every profile: ttft_s, decode_tok_s (single stream), aggregate curve (concurrency ->
aggregate output tok/s, interpolated linearly in log2(concurrency), flat beyond the last
point), tokens_per_chunk, weights, KV cache reference and the startup phase durations in
nominal (real-hardware) seconds; SPARK_EMU_TIME_SCALE multiplies the phase durations only.

Depth: a prompt of p tokens is prefilled at `prefill_tok_s` on top of `ttft_s` (the TTFT of an
empty prompt), so TTFT(p) = ttft_s + p / prefill_tok_s; decoding p tokens deep runs at the
shallow rate / (1 + p / decode_half_depth) (attention reads a KV cache that grows with p). The
Spark figures for both are assumptions of the right order, not measurements.
"""

import itertools
import math
import os

_SPARK_PHASES = {
    "startup": 8.0,  # process start -> engine core config
    "dist_init": 4.0,  # placement group / TCP store / process groups
    "nccl_init": 6.0,  # ncclCommInitRank
    "load_weights": 540.0,  # 119 GB from the HF cache, per rank in parallel
    "post_load": 12.0,
    "compile": 70.0,  # torch.compile (skipped with --enforce-eager)
    "profile": 18.0,  # memory profiling, KV cache allocation
    "cuda_graphs": 28.0,  # CUDA graph capture (skipped with --enforce-eager)
    "api_start": 3.0,
}

# A startup of seconds once scaled, for tests and the lab.
_QUICK_PHASES = {
    "startup": 2.0,
    "dist_init": 1.0,
    "nccl_init": 1.0,
    "load_weights": 30.0,
    "post_load": 2.0,
    "compile": 8.0,
    "profile": 3.0,
    "cuda_graphs": 4.0,
    "api_start": 1.0,
}

PROFILES = {
    "spark-pair-qwen35": {
        "description": "The seed: Qwen3.5-122B-A10B-FP8, TP 2 over two DGX Sparks, ~27 tok/s single stream",
        "ttft_s": 2.3,
        "decode_tok_s": 27.0,
        "aggregate": [[1, 27.0], [2, 36.3], [4, 51.2], [8, 69.4], [16, 90.9], [32, 115.7]],
        "prefill_tok_s": 2600.0,
        "decode_half_depth": 65536,
        "tokens_per_chunk": 1,
        "weights_gb": 119.0,
        "phases": dict(_SPARK_PHASES),
    },
    "spark-pair-public": {
        "description": "Public report: same model family, TP 2, Ray: 31.5 / 42.4 @2 / 59.7 @4 tok/s, TTFT 1989 ms",
        "ttft_s": 1.989,
        "decode_tok_s": 31.5,
        "aggregate": [[1, 31.5], [2, 42.4], [4, 59.7], [8, 81.0], [16, 106.0], [32, 135.0]],
        "prefill_tok_s": 2600.0,
        "decode_half_depth": 65536,
        "tokens_per_chunk": 1,
        "weights_gb": 119.0,
        "phases": dict(_SPARK_PHASES, load_weights=480.0),
    },
    "multi-token-chunks": {
        "description": "Speculative decoding (MTP): 4 tokens per SSE chunk",
        "ttft_s": 2.1,
        "decode_tok_s": 44.0,
        "aggregate": [[1, 44.0], [2, 58.0], [4, 79.0], [8, 104.0], [16, 131.0], [32, 160.0]],
        "prefill_tok_s": 2600.0,
        "decode_half_depth": 65536,
        "tokens_per_chunk": 4,
        "weights_gb": 119.0,
        "phases": dict(_SPARK_PHASES),
    },
    "fast-test": {
        "description": "Quick tests: 400 tok/s single stream, short TTFT, short startup",
        "ttft_s": 0.05,
        "decode_tok_s": 400.0,
        "aggregate": [[1, 400.0], [2, 640.0], [4, 960.0], [8, 1360.0], [16, 1800.0], [32, 2400.0]],
        "prefill_tok_s": 8192.0,
        "decode_half_depth": 65536,
        "tokens_per_chunk": 1,
        "weights_gb": 119.0,
        "phases": dict(_QUICK_PHASES),
    },
    "lab": {
        "description": "The lab: quick to start, paced slowly enough (100 tok/s) for a 2-core machine "
        "to keep exact time with several streams through SSH",
        "ttft_s": 0.2,
        "decode_tok_s": 100.0,
        "aggregate": [[1, 100.0], [2, 160.0], [4, 240.0], [8, 340.0], [16, 450.0], [32, 600.0]],
        "prefill_tok_s": 8192.0,
        "decode_half_depth": 65536,
        "tokens_per_chunk": 1,
        "weights_gb": 119.0,
        "phases": dict(_QUICK_PHASES),
    },
}

DEFAULT_PROFILE = "spark-pair-qwen35"

# Hardware / model constants shared by the profiles (GB10, Qwen3.5-122B-A10B-FP8).
GPU_TOTAL_GIB = 121.63
NON_KV_OVERHEAD_GIB = 5.2  # activations, CUDA graphs, NCCL buffers per rank
KV_REF_TOKENS = 839488  # at --gpu-memory-utilization 0.9, TP 2
KV_REF_GMU = 0.9
KV_REF_TP = 2
NUM_ATTENTION_HEADS = 32
NATIVE_MAX_MODEL_LEN = 262144
KV_BLOCK = 16


def get_profile(name=None):
    name = name or os.environ.get("SPARK_EMU_PROFILE") or DEFAULT_PROFILE
    if name not in PROFILES:
        raise KeyError("unknown SPARK_EMU_PROFILE %r (known: %s)" % (name, ", ".join(PROFILES)))
    p = dict(PROFILES[name])
    p["name"] = name
    return p


def _prof(profile):
    return get_profile(profile) if isinstance(profile, str) or profile is None else profile


def aggregate_tok_s(profile, concurrency):
    """Aggregate output tok/s with `concurrency` requests running (interpolated)."""
    pts = _prof(profile)["aggregate"]
    c = max(1.0, float(concurrency))
    if c <= pts[0][0]:
        return float(pts[0][1])
    for (c0, a0), (c1, a1) in itertools.pairwise(pts):
        if c <= c1:
            f = (math.log2(c) - math.log2(c0)) / (math.log2(c1) - math.log2(c0))
            return a0 + f * (a1 - a0)
    return float(pts[-1][1])


def per_stream_tok_s(profile, concurrency):
    c = max(1.0, float(concurrency))
    return aggregate_tok_s(profile, c) / c


def ttft_at(profile, prompt_tokens):
    """TTFT of a request whose prompt is `prompt_tokens` long: the fixed part plus its prefill."""
    p = _prof(profile)
    return p["ttft_s"] + max(0, prompt_tokens) / p["prefill_tok_s"]


def depth_factor(profile, prompt_tokens):
    """How much slower decoding runs `prompt_tokens` deep than with an empty context (<= 1)."""
    return 1.0 / (1.0 + max(0, prompt_tokens) / _prof(profile)["decode_half_depth"])


def truth(profile, concurrency=1, prompt_tokens=0):
    """What a correct benchmark must measure against this profile at `concurrency`
    simultaneous streams (steady state) with prompts `prompt_tokens` long: TTFT, prefill tok/s
    (prompt tokens / TTFT), per-stream decode tok/s (=1/TPOT) and the aggregate decode tok/s."""
    p = _prof(profile)
    per = per_stream_tok_s(p, concurrency) * depth_factor(p, prompt_tokens)
    ttft = ttft_at(p, prompt_tokens)
    return {
        "profile": p.get("name"),
        "concurrency": concurrency,
        "prompt_tokens": prompt_tokens,
        "ttft_s": ttft,
        "prefill_tok_s": prompt_tokens / ttft,
        "per_stream_tok_s": per,
        "tpot_s": 1.0 / per,
        "aggregate_tok_s": per * concurrency,
        "tokens_per_chunk": p["tokens_per_chunk"],
    }


def weights_gib(profile, tp=1, pp=1):
    return _prof(profile)["weights_gb"] * 1e9 / 2**30 / max(1, tp * pp)


def kv_cache(profile, gmu, tp, pp=1, per_token_bytes=None):
    """(available KV GiB per rank, KV cache tokens) for the given settings; with the model's
    files (`per_token_bytes`, lab/emulator/model_files.py) the tokens follow from them."""
    if per_token_bytes:
        a = gmu * GPU_TOTAL_GIB - weights_gib(profile, tp, pp) - NON_KV_OVERHEAD_GIB
        if a <= 0:
            return a, 0
        return a, int(a * 2**30 // per_token_bytes) // KV_BLOCK * KV_BLOCK

    def avail(g, t):
        return (
            g * GPU_TOTAL_GIB - weights_gib(profile, t, pp if t == tp else 1) - NON_KV_OVERHEAD_GIB
        )

    ref = KV_REF_GMU * GPU_TOTAL_GIB - weights_gib(profile, KV_REF_TP, 1) - NON_KV_OVERHEAD_GIB
    a = avail(gmu, tp)
    if a <= 0:
        return a, 0
    # KV per token per rank shrinks with TP: the pair holds tokens = per-rank bytes * tp.
    tokens = KV_REF_TOKENS * (a / ref) * (tp * pp / float(KV_REF_TP))
    if abs(a - ref) < 1e-9 and tp * pp == KV_REF_TP:
        tokens = KV_REF_TOKENS
    return a, int(tokens) // KV_BLOCK * KV_BLOCK
