"""The model's own files, when the Hugging Face cache in the container has them: the weights'
size (the safetensors index's total_size) and the KV cache a token takes, so the emulator's
"Model loading took X GiB" and "KV cache size: N tokens" follow the model as vLLM's do.

vLLM's arithmetic, per rank: weights = total_size / (TP x PP); KV a token = 2 (K and V) x the
rank's KV heads (a replica when TP exceeds them) x head size x 2 bytes (bf16; 1 with an fp8 KV
cache) x the rank's full-attention layers. Without the files the profile's figures stand.

The files are also checked as vLLM 0.32 meets them: with HF_HUB_OFFLINE set and no snapshot,
huggingface_hub's `snapshot_download` refuses before anything loads (`not_cached`); with
HF_HUB_OFFLINE, a shard the index lists but the snapshot lacks stops the load
(weight_utils.filter_duplicate_safetensors_files); a shard whose size is not what its header
says stops it online too (huggingface_hub downloads no blob again that exists; safetensors
refuses the file) (`problem`). Without HF_HUB_OFFLINE a missing model or shard is downloaded:
the emulated hub has it, as before. The lines are the real engine's (vLLM 0.32.0,
huggingface_hub 2.4.0, safetensors 0.8.0: tried in the lab's real-engine venv).
"""

import json
import os
import re
import struct

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


def offline():
    """huggingface_hub's reading of HF_HUB_OFFLINE (constants._is_true)."""
    return os.environ.get("HF_HUB_OFFLINE", "").upper() in ("1", "ON", "YES", "TRUE")


NOT_CACHED = (
    "huggingface_hub.errors.LocalEntryNotFoundError: Cannot find an appropriate cached snapshot "
    "folder for the specified revision on the local disk and outgoing traffic has been disabled. "
    "To enable repo look-ups and downloads online, pass 'local_files_only=False' as input."
)


NOT_CACHED_TB = (
    """Traceback (most recent call last):
  File "/usr/local/bin/vllm", line 10, in <module>
    sys.exit(main())
  File "$py/vllm/entrypoints/cli/main.py", line 73, in main
    args.dispatch_function(args)
  File "$py/vllm/entrypoints/cli/serve.py", line 60, in cmd
    uvloop.run(run_server(args))
  File "$py/vllm/entrypoints/launchers/api_server/entry.py", line 53, in build_async_engine_client
    engine_args = AsyncEngineArgs.from_cli_args(args)
  File "$py/vllm/engine/arg_utils.py", line 1938, in from_cli_args
    engine_args = cls(
  File "<string>", line 260, in __init__
  File "$py/vllm/engine/arg_utils.py", line 914, in __post_init__
    self.model = get_model_path(self.model, self.revision)
  File "$py/vllm/transformers_utils/repo_utils.py", line 301, in get_model_path
    return hf_api().snapshot_download(
  File "$py/huggingface_hub/_snapshot_download.py", line 382, in snapshot_download
    raise LocalEntryNotFoundError(
"""
    + NOT_CACHED
)

LOAD_TB = """
  File "$py/vllm/model_executor/model_loader/default_loader.py", line 498, in load_weights
    loaded_weights = model.load_weights(self.get_all_weights(model_config, model))
  File "$py/vllm/model_executor/model_loader/default_loader.py", line 380, in get_all_weights
    yield from self._get_weights_iterator(primary_weights)"""
MISSING_TB = (
    LOAD_TB
    + """
  File "$py/vllm/model_executor/model_loader/default_loader.py", line 271, in _get_weights_iterator
    self._prepare_weights(
  File "$py/vllm/model_executor/model_loader/default_loader.py", line 252, in _prepare_weights
    hf_weights_files = filter_duplicate_safetensors_files(
  File "$py/vllm/model_executor/model_loader/weight_utils.py", line 606, in filter_duplicate_safetensors_files
    raise FileNotFoundError(
FileNotFoundError: Weight files referenced in index but missing: %s"""
)
HEADER_TB = (
    LOAD_TB
    + """
  File "$py/vllm/model_executor/model_loader/weight_utils.py", line 1208, in safetensors_weights_iterator
    with safe_open(st_file, framework="pt") as f:
safetensors._safetensors_rust.SafetensorError: Error while deserializing header: %s"""
)


def load_error(found):
    """The tail of the traceback `problem`'s finding ends the load with."""
    if found[0] == "missing":
        return MISSING_TB % ("{" + ", ".join(repr(p) for p in sorted(found[1])) + "}")
    return HEADER_TB % found[2]


def not_cached(model):
    """HF_HUB_OFFLINE and no snapshot of a hub model: vLLM's get_model_path fails at once."""
    if model.startswith("/") or not offline():
        return False
    snapshot = _snapshot(model)
    return snapshot is None or not os.path.isdir(snapshot)


def _natural(name):
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", name)]


def _header_error(path):
    """safetensors' complaint about a file, or None when its size is what its header says."""
    try:
        with open(path, "rb") as handle:
            size = os.fstat(handle.fileno()).st_size
            if size < 8:
                return "header too small"
            (length,) = struct.unpack("<Q", handle.read(8))
            if 8 + length > size:
                return "invalid header length"
            header = json.loads(handle.read(length))
    except ValueError:
        return "invalid header deserialization"
    except OSError:
        return None
    end = max((v["data_offsets"][1] for k, v in header.items() if k != "__metadata__"), default=0)
    return None if 8 + length + end == size else "incomplete metadata, file not fully covered"


def problem(model):
    """What stops vLLM reading the weights from the cache: ("missing", {paths}) (offline only),
    ("header", path, message), or None (nothing there is read as the emulated hub's)."""
    snapshot = _snapshot(model)
    if snapshot is None or not os.path.isdir(snapshot):
        return None
    index = os.path.join(snapshot, "model.safetensors.index.json")
    try:
        with open(index) as handle:
            names = sorted(set(json.load(handle)["weight_map"].values()), key=_natural)
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        names = ["model.safetensors"]
    paths = [os.path.join(snapshot, name) for name in names]
    missing = {path for path in paths if not os.path.exists(path)}
    if missing and offline():
        return ("missing", missing)
    for path in paths:
        if path not in missing:
            error = _header_error(path)
            if error:
                return ("header", path, error)
    return None
