"""How each emulated vLLM release words its startup lines: `SPARK_EMU_VLLM_DIALECT`.

vLLM rewords these lines from release to release and per platform; the controller must
recognise every wording, so the emulator speaks more than one. Each dialect maps a line key to
(the `[file:line]` vLLM prints, the message template), or None where that release prints no
such line. Templates are filled with str.format.

- "0.17": vLLM 0.17.1rc1 on the GB10 (the seed's image): the default.
- "0.32": vLLM 0.32.0's CPU build with dummy weights, as the lab's real engine printed it
  (tests/data/logs/real-vllm-0.32-*.log; the lab's fidelity test keeps the two in step).
"""

from .common import env_str

DEFAULT = "0.17"

DIALECTS = {
    "0.17": {
        "version": "0.17.1rc1",
        "version_line": ("api_server.py:1839", "vLLM API server version {version}"),
        "weights": ("default_loader.py:267", "Loading weights took {seconds:.2f} seconds"),
        "model_loading": (
            "gpu_model_runner.py:2653",
            "Model loading took {gib:.4f} GiB and {seconds:.6f} seconds",
        ),
        "kv_cache": ("kv_cache_utils.py:1087", "GPU KV cache size: {tokens:,} tokens"),
        "max_concurrency": (
            "kv_cache_utils.py:1091",
            "Maximum concurrency for {max_model_len:,} tokens per request: {concurrency:.2f}x",
        ),
        "engine": (
            "core.py:210",
            "init engine (profile, create kv cache, warmup model) took {seconds:.2f} seconds",
        ),
        "api_server": ("api_server.py:1912", "Starting vLLM API server 0 on http://{host}:{port}"),
        # no source of 0.17.1rc1 at hand: as vLLM 0.10 printed it (every rank, pynccl.py:70)
        "pynccl": ("pynccl.py:70", "vLLM is using nccl=={nccl}"),
        "pynccl_every_rank": True,
    },
    "0.32": {
        "version": "0.32.0",
        "version_line": ("api_utils.py:347", " ▄▄ ▄█ █     █     █ ▀▄▀ █  version {version}"),
        "weights": ("base_loader.py:82", "Initializing model took {seconds:.6f} seconds"),
        "model_loading": None,
        "kv_cache": (
            "kv_cache_utils.py:2327",
            "CPU KV cache size: {tokens:,} tokens, Maximum concurrency for "
            "{max_model_len:,} tokens per request: {concurrency:.2f}x",
        ),
        "max_concurrency": None,
        "engine": (
            "core.py:402",
            "init engine (profile, create kv cache, warmup model) took {seconds:.2f} s",
        ),
        "api_server": ("entry.py:140", "Starting vLLM server on http://{host}:{port}"),
        # distributed/device_communicators/pynccl.py: `logger.info_once` under `if self.rank == 0`
        "pynccl": ("pynccl.py:148", "vLLM is using nccl=={nccl}"),
        "pynccl_every_rank": False,
    },
}


def current():
    """The dialect named by SPARK_EMU_VLLM_DIALECT (an unknown name falls back to the default)."""
    return DIALECTS.get(env_str("SPARK_EMU_VLLM_DIALECT", DEFAULT), DIALECTS[DEFAULT])


def omitted(key):
    """SPARK_EMU_OMIT_LINES=key,...: lines this run does not print (a release that words them
    so differently that nothing recognises them, or prints none)."""
    return key in env_str("SPARK_EMU_OMIT_LINES", "").split(",")


def line(key, **values):
    """(file:line, message) of `key` in the current dialect, or None where it prints none."""
    entry = current().get(key)
    if entry is None or omitted(key):
        return None
    where, template = entry
    return where, template.format(version=current()["version"], **values)


def version():
    return current()["version"]
