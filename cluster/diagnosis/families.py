"""The families of failures, as data: what a root cause of each kind is, what to do about a
member no row of cluster.diagnosis.failures knows, and how an unknown exception is put in one.

The family ids are those of the corpus of real logs (tests/data/real_logs/README.md). Every row
of the failure table names its family; an exception no row knows gets one from its type, module,
message, the files of its traceback and its source line (`cluster.diagnosis.exception_classes`,
first match wins), so an operator always reads a cause class, the root line, and the exact text
to search for.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from cluster.diagnosis.exception_classes import EXCEPTION_CLASSES, ExceptionClass
from cluster.diagnosis.family_ids import FamilyId
from cluster.diagnosis.tracebacks import RaisedException


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


def _text(raised: RaisedException) -> str:
    inner = f"({raised.inner})" if raised.inner else ""
    return f"{raised.type}{inner}: {raised.message}"


def _matches(
    kind: ExceptionClass, text: str | None, frames: Sequence[str], code: str | None
) -> bool:
    """Whether `kind` takes an error: any of its patterns, or with `all_of` every one."""
    tests: list[bool] = []
    if kind.message is not None:
        tests.append(text is not None and kind.message.search(text) is not None)
    if kind.frame is not None:  # the raising frame's file
        tests.append(bool(frames) and kind.frame.search(frames[0]) is not None)
    if kind.code is not None:
        tests.append(code is not None and kind.code.search(code) is not None)
    return all(tests) if kind.all_of else any(tests)


def family_of_exception(
    raised: RaisedException, frames: Sequence[str] = (), code: str | None = None
) -> FamilyId:
    """The family of an exception no row knows, from its type, module and message, the files
    of its traceback's frames (innermost first) and the source line that raised it; "other"
    when nothing tells."""
    text = _text(raised)
    for kind in EXCEPTION_CLASSES:
        if _matches(kind, text, frames, code):
            return kind.family
    return "other"


def family_of_frame(frame: str) -> FamilyId:
    """The family a traceback's innermost frame line (`File "...", line N, in f`) tells, when
    an excerpt ends before its exception line; "other" when nothing tells."""
    for kind in EXCEPTION_CLASSES:
        if kind.frame is not None and not kind.all_of and kind.frame.search(frame):
            return kind.family
    return "other"


def family_of_text(text: str) -> FamilyId:
    """The family of an error line that is not an exception (an ERROR-level line)."""
    for kind in EXCEPTION_CLASSES:
        if kind.message is not None and not kind.all_of and kind.message.search(text):
            return kind.family
    return "other"
