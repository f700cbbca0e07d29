"""The model's own files, when the Hugging Face cache in the container has them: the weights'
size (the safetensors index's total_size) and the KV cache a token takes, so the emulator's
"Model loading took X GiB" and "KV cache size: N tokens" follow the model as vLLM's do.

vLLM's arithmetic, per rank: weights = total_size / (TP x PP); KV a token = 2 (K and V) x the
rank's KV heads (a replica when TP exceeds them) x head size x 2 bytes (bf16; 1 with an fp8 KV
cache) x the rank's full-attention layers. Without the files the profile's figures stand.
"""

import json
import os

HF_HOME = "/root/.cache/huggingface"


def _snapshot(model):
    if model.startswith("/"):
        return model
    home = os.environ.get("HF_HOME") or HF_HOME
    repo = os.path.join(home, "hub", "models--" + model.replace("/", "--"))
    try:
        with open(os.path.join(repo, "refs", "main")) as handle:
            ref = handle.read().strip()
    except OSError:
        return None
    return os.path.join(repo, "snapshots", ref)


def load(model):
    """{"weights_bytes", "config"} from the model's files in the cache, or None."""
    snapshot = _snapshot(model)
    if snapshot is None:
        return None
    try:
        with open(os.path.join(snapshot, "config.json")) as handle:
            config = json.load(handle)
        with open(os.path.join(snapshot, "model.safetensors.index.json")) as handle:
            total = json.load(handle)["metadata"]["total_size"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    text = config.get("text_config")
    if isinstance(text, dict):
        config = dict(config, **text)
    return {"weights_bytes": int(total), "config": config}


def kv_bytes_per_token(files, tp, pp, kv_cache_dtype="auto"):
    """One rank's KV cache for one token, over the layers that keep every token."""
    c = files["config"]
    layers = c["num_hidden_layers"]
    heads = c["num_attention_heads"]
    kv_heads = c.get("num_key_value_heads") or heads
    head_dim = c.get("head_dim") or c["hidden_size"] // heads
    types = c.get("layer_types")
    if isinstance(types, list) and c.get("sliding_window"):
        full = sum(1 for t in types if t not in ("sliding_attention", "linear_attention"))
    elif isinstance(types, list):
        full = sum(1 for t in types if t != "linear_attention")
    elif c.get("full_attention_interval"):
        full = layers // c["full_attention_interval"]
    else:
        full = layers
    size = 1 if str(kv_cache_dtype).startswith("fp8") else 2
    on_rank = -(-full // max(1, pp))
    return 2 * max(1, kv_heads // max(1, tp)) * head_dim * size * on_rank
