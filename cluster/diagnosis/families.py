"""The families of failures, as data: what a root cause of each kind is, what to do about a
member no row of cluster.diagnosis.failures knows, and how an unknown exception is put in one.

The family ids are those of the corpus of real logs (tests/data/real_logs/README.md). Every row
of the failure table names its family; an exception no row knows gets one from its type, module,
message and the file that raised it (`EXCEPTION_CLASSES`, first match wins), so an operator
always reads a cause class, the root line, and the exact text to search for.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal, get_args

from cluster.diagnosis.tracebacks import RaisedException

FamilyId = Literal[
    "memory_gpu",
    "kv_cache",
    "context_length",
    "memory_host",
    "gpu_arch",
    "cuda_runtime",
    "package_version",
    "model_arch",
    "model_access",
    "model_files",
    "config_invalid",
    "nccl",
    "distributed_init",
    "ray_cluster",
    "port_in_use",
    "engine_hang",
    "tokenizer",
    "node_hardware",
    "other",
]
FAMILY_IDS: tuple[FamilyId, ...] = get_args(FamilyId)


@dataclass(frozen=True)
class Family:
    """A kind of root cause; `cause` and `fix` are for a member no row knows (`{gpu}` and the
    other words are filled from what the log shows, cluster.diagnosis.platform)."""

    id: FamilyId
    title: str
    cause: str
    fix: str


# fmt: off
FAMILIES: dict[FamilyId, Family] = {f.id: f for f in (
    Family("memory_gpu", "GPU memory exhausted",
           "the accelerator's memory ran out ({gpu}): weights, activations while profiling, or "
           "the KV cache did not fit in what --gpu-memory-utilization leaves",
           "lower --gpu-memory-utilization if other processes hold memory, else --max-model-len "
           "and --max-num-seqs; free the GPU of other processes; a smaller or quantized model"),
    Family("kv_cache", "KV cache too small for --max-model-len",
           "the KV cache that fits cannot hold one sequence of --max-model-len tokens",
           "raise --gpu-memory-utilization or lower --max-model-len"),
    Family("context_length", "--max-model-len beyond the model's limit",
           "--max-model-len is larger than the model's own limit (max_position_embeddings, the "
           "derived max_model_len)",
           "lower --max-model-len to the model's limit (or set rope scaling the model supports)"),
    Family("memory_host", "the host's memory or shared memory ran out",
           "the host's memory ran out: the kernel's OOM killer, SIGKILL / exit 137, Ray's memory "
           "monitor killing a worker, or a /dev/shm too small (a bus error)",
           "give the container --ipc=host or a larger --shm-size; lower --max-model-len / "
           "--max-num-seqs; `dmesg -T | grep -i oom` names what was killed"),
    Family("gpu_arch", "the GPU's architecture against what the image was built for",
           "the software in the image was not built for this GPU's architecture ({gpu}): a "
           "kernel, compiler, attention library or quantization format it needs is missing",
           "use an image built for this GPU's compute capability (torch, vLLM, flash-attn / "
           "flashinfer, triton); or another attention backend or quantization"),
    Family("cuda_runtime", "the CUDA driver or runtime failed",
           "the CUDA driver or runtime failed ({gpu}): driver older than the CUDA of the image, "
           "no GPU visible, NVML errors, an illegal memory access or a launch failure",
           "check `nvidia-smi` in the container (--gpus all), that the host driver supports the "
           "image's CUDA, and rerun with CUDA_LAUNCH_BLOCKING=1 for the failing kernel"),
    Family("package_version", "package versions inside the image",
           "the image's packages do not fit together: a module missing or too old for the model "
           "(transformers), or libraries built against another torch (`undefined symbol`)",
           "use an image whose vLLM, torch and transformers were built together (an official "
           "image or wheel), or upgrade the named package to the version vLLM asks for"),
    Family("model_arch", "the model's architecture is not supported by this vLLM",
           "this vLLM does not know the model's architecture",
           "use a vLLM release that supports the model's architecture"),
    Family("model_access", "the model could not be fetched from the Hugging Face Hub",
           "the model id is wrong, gated or private without a token, or the hub is unreachable "
           "(offline) with no copy in the cache",
           "check the model id; set HF_TOKEN with access; or point at a local path / a mounted "
           "Hugging Face cache that holds it"),
    Family("model_files", "the model's files are corrupt or incomplete",
           "a file of the model is missing or corrupt (a shard, its safetensors header, the "
           "config or the tokenizer)",
           "download the model again completely (or copy it from a node that has it complete)"),
    Family("config_invalid", "an argument or setting is not valid",
           "an argument or setting is not valid for this model or vLLM: a flag, a value, TP not "
           "dividing the model, a dtype or quantization it does not take",
           "correct the argument the error names (`vllm serve --help` in the image)"),
    Family("nccl", "NCCL failed between the GPUs",
           "NCCL failed: its network (IB / RoCE verbs, sockets), a peer that died, or a "
           "collective that timed out",
           "relaunch with NCCL_DEBUG=INFO and read the `NCCL WARN` lines; check the RDMA devices "
           "in the container (--privileged or --device=/dev/infiniband, IPC_LOCK, ulimit -l), "
           "NCCL_IB_HCA and NCCL_SOCKET_IFNAME"),
    Family("distributed_init", "torch.distributed could not form the group",
           "torch.distributed / Gloo rendezvous failed: a store timeout, connection refused, a "
           "hostname that does not resolve, a missing interface",
           "check that every rank reaches the master address and port, GLOO_SOCKET_IFNAME / "
           "VLLM_HOST_IP name the right interface, and start the workers first"),
    Family("ray_cluster", "Ray could not run the workers",
           "Ray could not place or run vLLM's workers: GPUs missing from the cluster, a node "
           "that never joined, the GCS unreachable, versions differing between nodes",
           "check `ray status` (every node and GPU), VLLM_HOST_IP against Ray's node IPs, and "
           "the same image on every node"),
    Family("port_in_use", "a port is already in use",
           "another process holds a port the server needs (the API's, Ray's, the store's)",
           "stop the old server (`ss -ltnp` names it) or choose another port"),
    Family("engine_hang", "the engine stopped answering",
           "the engine's workers stopped answering (an RPC or shared-memory broadcast timeout): "
           "a collective that hung, a worker stuck or dead",
           "read every rank's last lines for the worker that stopped; relaunch with "
           "NCCL_DEBUG=INFO; raise VLLM_RPC_TIMEOUT only if it is a slow compile"),
    Family("tokenizer", "the tokenizer, chat template or processor failed",
           "the tokenizer, its chat template or the processor could not be loaded or used",
           "check the tokenizer files and --tokenizer / --chat-template; "
           "--trust-remote-code if the model needs it"),
    Family("node_hardware", "a node dropped out for hardware reasons",
           "a node failed under the cluster: it rebooted or lost power, its GPU fell off the "
           "bus or logged a hardware Xid, a PCIe link failed, or heat or power held its GPU back",
           "read the node's kernel log (`journalctl -k -b -1` for the boot before a reboot) and "
           "`nvidia-smi -q -d PERFORMANCE`; check its power adapter and cooling; update its "
           "firmware"),
    Family("other", "an error of its own kind",
           "an error outside the known families",
           "read the root line and search for its exact text in vLLM's issues"),
)}
# fmt: on


@dataclass(frozen=True)
class ExceptionClass:
    """Exceptions of a family: `pattern` is searched in `Type: message` (the type as printed,
    module included, and the wrapped type for `RayTaskError(X)`), `frame` in the file that
    raised it (either suffices)."""

    family: FamilyId
    pattern: re.Pattern[str] | None
    source: str
    frame: re.Pattern[str] | None = None


def _re(pattern: str, flags: int = 0) -> re.Pattern[str]:
    return re.compile(pattern, flags)


# Messages first (a RuntimeError's text says more than its type), then types and modules.
# fmt: off
EXCEPTION_CLASSES: tuple[ExceptionClass, ...] = (
    ExceptionClass("gpu_arch", _re(
        r"no kernel image is available|\bsm_?\d{2,3}a?\b|compute capability|not compiled for|"
        r"not supported on (?:this|your) (?:GPU|device)|PTXAS|ptxas|unsupported (?:GPU )?arch|"
        r"CUDA architectures|SM \d+\.x requires CUDA|is not supported for the current GPU|"
        r"Minimum capability",
        re.I), "CUDA runtime (`no kernel image is available for execution on the device`), "
        "ptxas, triton and the kernels' capability checks"),
    ExceptionClass("memory_gpu", _re(
        r"OutOfMemory|out of memory|No available memory for the cache blocks|"
        r"NV_ERR_NO_MEMORY|CUBLAS_STATUS_ALLOC_FAILED", re.I),
        "torch.OutOfMemoryError (CUDA/HIP/XPU), vLLM v1/core/kv_cache_utils.py"),
    ExceptionClass("cuda_runtime", _re(
        r"CUDA driver (?:error|version)|cudaError|CUDA error|NVML|No CUDA GPUs are available|"
        r"Found no NVIDIA driver|CUDA initiali[sz]ation|initiali[sz]e CUDA|illegal memory access|"
        r"unspecified launch failure|NVIDIA driver on your system is too old|libcuda\.so|"
        r"No CUDA runtime is found|forward compatibility was attempted|"
        r"Failed to infer device type|No platform detected", re.I),
        "torch's CUDA checks (c10/cuda), NVML, the CUDA driver API"),
    ExceptionClass("memory_host", _re(r"\bMemoryError\b|Bus error|Cannot allocate memory|"
                                      r"OutOfMemoryError: Task was killed due to the node"),
                   "Python's MemoryError, ENOMEM, SIGBUS on /dev/shm, Ray's memory monitor"),
    ExceptionClass("model_access", _re(
        r"not a valid model identifier|GatedRepoError|RepositoryNotFoundError|"
        r"LocalEntryNotFoundError|HfHubHTTPError|401 Client Error|403 Client Error|"
        r"offline mode is enabled|Cannot find the requested files in the (?:disk )?cache"),
        "huggingface_hub errors, transformers' `is not a valid model identifier`"),
    ExceptionClass("model_files", _re(
        r"SafetensorError|HeaderTooLarge|incomplete metadata|safetensors_rust|"
        r"Error while deserializing header|does not appear to have a file named"),
        "safetensors, transformers' file checks"),
    ExceptionClass("tokenizer", _re(r"\btokenizer\b|chat.?template|\bprocessor\b|sentencepiece", re.I),
                   "transformers tokenizers / processors, vLLM's chat template handling"),
    ExceptionClass("package_version", _re(
        r"(?:^|\.)(?:ImportError|ModuleNotFoundError|PackageNotFoundError)\b|undefined symbol|"
        r"^AttributeError: module '[\w.]+' has no attribute|cannot open shared object file|"
        r"Transformers does not recognize this architecture|"
        r"requires (?:transformers|torch|vllm)\s*[<>=]|Mismatched number of arguments|"
        r"got an unexpected keyword argument"),
        "Python's import machinery, the dynamic loader (`undefined symbol`), transformers' "
        "model-type check", frame=_re(r"transformers/models/auto/")),
    ExceptionClass("nccl", _re(r"\bnccl\w*Error\b|\bDistBackendError\b|NCCL error|NCCL WARN",
                               re.I), "torch.distributed (ProcessGroupNCCL), vLLM's pynccl"),
    ExceptionClass("distributed_init", _re(
        r"DistStoreError|DistNetworkError|^torch\.distributed\.|Gloo|gloo|TCPStore|\bc10d\b"),
        "torch.distributed's store and Gloo", frame=_re(r"torch/distributed/")),
    ExceptionClass("ray_cluster", _re(r"^ray\.|\bRay(?:System|Task|Actor)?Error\b|placement group"),
                   "ray.exceptions", frame=_re(r"/ray/|ray_utils\.py|ray_(?:distributed_)?executor")),
    ExceptionClass("port_in_use", _re(r"address already in use|EADDRINUSE|Errno 98", re.I),
                   "the OS's bind()"),
    ExceptionClass("engine_hang", _re(r"^TimeoutError\b|timed out|Timeout", re.I),
                   "vLLM's RPC and shm_broadcast timeouts",
                   frame=_re(r"shm_broadcast\.py.* in (?:dequeue|acquire_read)|"
                             r"multiproc_executor\.py.* in (?:get_response|collective_rpc)")),
    ExceptionClass("config_invalid", _re(r"ValidationError|^(?:\w+\.)*(?:ValueError|"
                                         r"NotImplementedError)\b|^Value error, "),
                   "vLLM's config validation (pydantic, ValueError, NotImplementedError)",
                   frame=_re(r"vllm/(?:config|engine/arg_utils)")),
)
# fmt: on


def family_of_exception(raised: RaisedException, frame: str | None = None) -> FamilyId:
    """The family of an exception no row knows, from its type, module, message and the file
    that raised it; "other" when nothing tells."""
    text = f"{raised.type}" + (f"({raised.inner})" if raised.inner else "") + f": {raised.message}"
    for kind in EXCEPTION_CLASSES:
        if kind.pattern is not None and kind.pattern.search(text):
            return kind.family
        if kind.frame is not None and frame is not None and kind.frame.search(frame):
            return kind.family
    return "other"


def family_of_frame(frame: str) -> FamilyId:
    """The family a traceback's innermost frame line (`File "...", line N, in f`) tells, when
    an excerpt ends before its exception line; "other" when nothing tells."""
    for kind in EXCEPTION_CLASSES:
        if kind.frame is not None and kind.frame.search(frame):
            return kind.family
    return "other"


def family_of_text(text: str) -> FamilyId:
    """The family of an error line that is not an exception (an ERROR-level line)."""
    for kind in EXCEPTION_CLASSES:
        if kind.pattern is not None and kind.pattern.search(text):
            return kind.family
    return "other"
