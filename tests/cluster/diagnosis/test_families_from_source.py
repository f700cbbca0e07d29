"""A failure no row knows still gets its family: from the texts, types and raising files the
projects' own sources raise (cluster/diagnosis/exception_classes.py), read through the whole
exception chain and the traceback's source line. Every text below is the project's own
wording (the release named beside it), with the values it formats filled in."""

from __future__ import annotations

import pytest

from cluster.diagnosis.engine import LogDiagnoser
from cluster.diagnosis.exception_classes import EXCEPTION_CLASSES, SOURCES
from cluster.diagnosis.explain import explain
from cluster.diagnosis.failures import SIGNATURES
from cluster.diagnosis.families import family_of_exception
from cluster.diagnosis.family_ids import FAMILY_IDS
from cluster.diagnosis.tracebacks import raised_exception
from cluster.logs.logtext import strip_prefixes

ENGINE = "(EngineCore_DP0 pid=89) "


def vllm(level: str, msg: str, file: str = "core.py:1199") -> str:
    return f"{ENGINE}{level} 11-30 05:42:03 [{file}] {msg}"


# (exception line as printed, family): texts no row of the table matches
UNKNOWN_MEMBERS = [
    # Ray 2.55+ (doc/source/ray-core/scheduling/ray-oom-prevention.rst): the host's memory, not
    # the GPU's, though the type says OutOfMemoryError
    (
        "ray.exceptions.OutOfMemoryError: 1 worker(s) were killed due to the node running low "
        "on memory.",
        "memory_host",
    ),
    # vLLM 0.32.0 v1/core/kv_cache_utils.py, worded without the row's `max seq len`
    (
        "ValueError: Based on the available memory, the estimated maximum model length is 8192.",
        "kv_cache",
    ),
    # vLLM 0.32.0 config/model.py (the long form)
    (
        "ValueError: To allow overriding this maximum, set the env var "
        "VLLM_ALLOW_LONG_MAX_MODEL_LEN=1.",
        "context_length",
    ),
    # vLLM 0.32.0 v1/attention/backends: reasons other than the capability are the configuration
    (
        "ValueError: No valid attention backend found for cuda with AttentionSelectorConfig("
        "head_size=256). Reasons: {FLASH_ATTN: [kv_cache_dtype not supported], TRITON_ATTN: "
        "[kv_cache_dtype not supported]}.",
        "config_invalid",
    ),
    (
        "ValueError: Selected backend AttentionBackendEnum.FLASH_ATTN is not valid for this "
        "configuration. Reason: ['compute capability not supported']",
        "gpu_arch",
    ),
    # vLLM 0.32.0 model_executor/layers/quantization, v1/attention/backends/mla
    (
        "RuntimeError: Quantization scheme is not supported for the current GPU. Min capability: "
        "90. Current capability: 121.",
        "gpu_arch",
    ),
    ("ValueError: TurboMLA requires an SM100-class GPU.", "gpu_arch"),
    # a kernel's own dispatch check (flashinfer's prefill.cuh)
    (
        "RuntimeError: Error in function 'BatchPrefillWithPagedKVCacheDispatched' at "
        "/usr/local/lib/python3.12/dist-packages/flashinfer/data/include/flashinfer/attention/"
        "prefill.cuh:2964: Unsupported max_mma_kv: 0",
        "gpu_arch",
    ),
    # vLLM 0.32.0 v1/worker/utils.py
    (
        "ValueError: Free memory on device cuda:0 (10.1/119.7 GiB) on startup is less than the "
        "engine's budget after excluding external process's weights (0.9, 107.7 GiB).",
        "memory_gpu",
    ),
    # CUDA runtime (cudaErrorCompatNotSupportedOnDevice, 804) through torch
    (
        "RuntimeError: Unexpected error from cudaGetDeviceCount(). Did you run some cuda "
        "functions before calling NumCudaDevices() that might have already set an error? Error "
        "804: forward compatibility was attempted on non supported HW",
        "cuda_runtime",
    ),
    ("RuntimeError: CUDART error: invalid device ordinal", "cuda_runtime"),
    # vLLM 0.32.0 model_executor/models/registry.py
    (
        "ValueError: Model architecture MptForCausalLM was supported in vLLM until v0.11.0, and "
        "is not supported anymore.",
        "model_arch",
    ),
    # vLLM 0.32.0 model_executor/model_loader/weight_utils.py
    (
        "FileNotFoundError: Weight files referenced in index but missing: "
        "['model-00002-of-00004.safetensors']",
        "model_files",
    ),
    # vLLM 0.32.0 utils/flashinfer.py, model_executor/model_loader/weight_utils.py
    (
        "RuntimeError: FlashInfer backend is not available. Please install the package to enable "
        "FlashInfer kernels: https://github.com/flashinfer-ai/flashinfer",
        "package_version",
    ),
    (
        "ValueError: Please use torchao version >= 0.15.0 to load torchao safetensors checkpoint",
        "package_version",
    ),
    # NCCL's ncclGetErrorString (src/init.cc) through vLLM's pynccl_wrapper.py
    (
        "RuntimeError: NCCL error: remote process exited or there was a network error",
        "nccl",
    ),
    (
        "RuntimeError: failed to load the NCCL library for unique-id rendezvous",
        "nccl",
    ),
    # Ray 2.60.0 python/ray/exceptions.py
    (
        "ray.exceptions.LocalRayletDiedError: The task's local raylet died. Check raylet.out "
        "for more information.",
        "ray_cluster",
    ),
    # vLLM 0.32.0 distributed/device_communicators/shm_broadcast.py
    (
        "RuntimeError: Insufficient space in /dev/shm for the broadcast buffer: 512 MiB "
        "required, 64 MiB free. Increase /dev/shm (e.g. --shm-size or --ipc=host).",
        "memory_host",
    ),
    # vLLM 0.32.0 utils/network_utils.py
    (
        "RuntimeError: Could not find open port after 10 attempts starting from port 29500",
        "port_in_use",
    ),
]


def test_a_config_the_model_code_cannot_read_is_a_model_newer_than_this_vllm():
    # vLLM 0.5.x model_executor/layers/rotary_embedding.py read `rope_scaling["type"]`, a key
    # Llama 3.1's config no longer has: Python echoes the source line under the raising frame
    log = [
        "Traceback (most recent call last):",
        '  File "/usr/lib/python3/vllm/model_executor/layers/rotary_embedding.py", line 7, in get_rope',
        '    if rope_scaling["type"] == "yarn":',
        "       ~~~~~~~~~~~~^^^^^^^^",
        "KeyError: 'type'",
    ]
    found = explain(log).diagnosis
    assert found is not None and found.family == "model_arch"
    # a KeyError elsewhere says nothing of the kind
    other = [*log[:2], "    weights[name].copy_(tensor)", "KeyError: 'layers.1.mlp.experts.w13'"]
    found = explain(other).diagnosis
    assert found is not None and found.family == "other"


def test_docker_compose_prefixes_are_peeled_and_keep_the_traceback():
    # docker/compose cmd/formatter/logs.go: the name padded to the widest, ` | `, the line
    lines = [
        "backend-vllm-openai-1  | Traceback (most recent call last):",
        'backend-vllm-openai-1  |   File "/usr/local/lib/python3.10/dist-packages/torch/cuda/__init__.py", line 293, in _lazy_init',
        "backend-vllm-openai-1  |     torch._C._cuda_init()",
        "backend-vllm-openai-1  | RuntimeError: Unexpected error from cudaGetDeviceCount(). "
        "Error 804: forward compatibility was attempted on non supported HW",
        "ray_head_1    | INFO 06-14 07:04:12 worker.py:1] Started",
    ]
    assert strip_prefixes(lines[2]) == "    torch._C._cuda_init()"
    assert strip_prefixes(lines[4]) == "Started"
    explained = explain(lines)
    assert explained.verdict == "failed"
    assert explained.diagnosis is not None and explained.diagnosis.family == "cuda_runtime"
    assert explained.diagnosis.line_number == 4


def test_a_worker_that_dies_after_the_start_up_completed_fails_the_log():
    log = [
        vllm("INFO", "Application startup complete.", "launcher.py:46"),
        vllm(
            "ERROR",
            "Worker proc VllmWorker-1 died unexpectedly (exit code: -9), shutting down executor.",
            "multiproc_executor.py:316",
        ),
    ]
    explained = explain(log)
    assert explained.verdict == "failed" and explained.ready_line == 1
    assert explained.diagnosis is not None
    assert explained.diagnosis.signature_id == "executor_worker_died"
    ld = LogDiagnoser()
    assert ld.feed(log[0]) is None
    assert ld.feed(log[1]) is not None  # the stream reports it as it arrives


def test_every_class_names_a_known_source_and_family():
    assert {kind.source for kind in EXCEPTION_CLASSES} <= set(SOURCES)
    assert {kind.family for kind in EXCEPTION_CLASSES} <= set(FAMILY_IDS)
    for kind in EXCEPTION_CLASSES:
        assert kind.message or kind.frame or kind.code
    # a survived row is never fatal (the table refuses one)
    assert all(not sig.fatal for sig in SIGNATURES if sig.survived)


def test_a_device_side_assert_fails_the_log_at_once():
    # the device's own assert line (CUDA's `__assert_fail` output), here torch inductor's
    line = (
        "/x/torch/_inductor/runtime/compile_tasks.py:45: <module>: block: [337,0,0], thread: "
        "[112,0,0] Assertion `index out of bounds: 0 <= tmp10 < 4096` failed."
    )
    ld = LogDiagnoser()
    found = ld.feed(line)
    assert found is not None and found.signature_id == "cuda_device_assert"
    assert found.family == "cuda_runtime"


def test_a_traceback_cut_before_its_exception_line_is_a_failure_of_its_frames_family():
    log = [
        vllm("INFO", "Initializing a V1 LLM engine (v0.32.0)", "core.py:133"),
        "Traceback (most recent call last):",
        '  File "/usr/lib/python3/vllm/v1/executor/ray_utils.py", line 9, in initialize_ray_cluster',
        "    ray.init(address=ray_address)",
    ]
    explained = explain(log)
    assert explained.verdict == "failed"
    assert explained.diagnosis is not None and explained.diagnosis.line_number == 3
    assert explained.diagnosis.family == "ray_cluster"
    # a traceback that ends in its exception is read as before; one followed by more output
    # is no cut traceback
    assert explain([*log, "ValueError: nope"]).diagnosis.line_number == 5
    assert explain([*log, vllm("INFO", "Loading weights took 3.1 seconds")]).verdict == "incomplete"


def test_an_exception_cpython_reports_as_ignored_is_no_root():
    # CPython's unraisable hook (Python/errors.c): printed, ignored, the process goes on
    log = [
        "Exception ignored in: <function Pool.__del__ at 0x7f1c2c0b8ea0>",
        "Traceback (most recent call last):",
        '  File "/usr/lib/python3.12/multiprocessing/pool.py", line 268, in __del__',
        "AttributeError: 'NoneType' object has no attribute 'dumps'",
        vllm("ERROR", "EngineCore failed to start.", "core.py:1510"),
        vllm("ERROR", "Traceback (most recent call last):"),
        vllm("ERROR", "ValueError: TurboMLA requires an SM100-class GPU."),
    ]
    found = explain(log).diagnosis
    assert found is not None and found.signature_id == "engine_start_failed"
    assert found.family == "gpu_arch" and found.line_number == 7
    # not ignored, the first exception is the root
    found = explain(log[1:]).diagnosis
    assert found is not None and found.line_number == 3


def test_a_stop_that_ends_a_hang_is_a_failure_not_a_clean_stop():
    log = [
        vllm("INFO", "Application startup complete.", "launcher.py:46"),
        vllm(
            "WARNING",
            "No available shared memory broadcast block found in 60 seconds. This typically "
            "happens when some processes are hanging or doing some time-consuming work.",
            "shm_broadcast.py:466",
        ),
        vllm("INFO", "Received KeyboardInterrupt, shutting down", "utils.py:1"),
    ]
    explained = explain(log)
    assert explained.verdict == "failed", explained.why
    assert explained.diagnosis is not None and explained.diagnosis.family == "engine_hang"
    assert explain([log[0], log[2]]).verdict == "stopped"  # without the hang: a clean stop


MORE_MEMBERS = [
    # triton-lang/triton python/triton/runtime/errors.py: a kernel needs more than this GPU has
    (
        "triton.runtime.errors.OutOfResources: out of resource: shared memory, Required: 98304, "
        "Hardware limit: 65536. Reducing block sizes or `num_stages` may help.",
        "gpu_arch",
    ),
    # vLLM 0.32.0 v1/worker/gpu_worker.py
    (
        "AssertionError: Error in memory profiling. Initial free memory 22.0 GiB, current free "
        "memory 22.1 GiB.",
        "memory_gpu",
    ),
    # huggingface_hub 2.4.0 utils/_http.py
    (
        "OSError: You are trying to access a gated repo. Cannot access gated repo for url "
        "https://huggingface.co/m/resolve/main/config.json.",
        "model_access",
    ),
    (
        "RuntimeError: PytorchStreamReader failed reading zip archive: failed finding central "
        "directory",
        "model_files",
    ),
    (
        "RuntimeError: Failed to connect to GCS. Please check if the GCS server is running.",
        "ray_cluster",
    ),
    # torch c10/cuda: cuDNN's and cuBLAS's statuses
    ("RuntimeError: cuDNN error: CUDNN_STATUS_NOT_INITIALIZED", "cuda_runtime"),
    # torch ProcessGroupNCCL
    ("RuntimeError: NCCL communicator was aborted on rank 1.", "nccl"),
    # torch's dispatcher, for a torchvision built against another torch
    ("RuntimeError: operator torchvision::nms does not exist", "package_version"),
    # the dynamic loader
    (
        "ImportError: /lib/x86_64-linux-gnu/libstdc++.so.6: version `GLIBCXX_3.4.32' not found",
        "package_version",
    ),
    # the OS's errno text, through torch.distributed's TCPStore client
    (
        "RuntimeError: [c10d] connect() to 198.18.1.10:29500 failed: Connection refused",
        "distributed_init",
    ),
    ("ConnectionRefusedError: [Errno 111] Connection refused", "distributed_init"),
    # transformers modeling_utils
    (
        "OSError: Error no file named pytorch_model.bin, model.safetensors found in directory "
        "/models/m.",
        "model_files",
    ),
]


def test_an_assert_that_the_parallel_size_divides_the_model_is_the_configuration():
    log = [
        "Traceback (most recent call last):",
        '  File "/usr/lib/python3/vllm/model_executor/models/llama.py", line 9, in __init__',
        "    assert self.total_num_kv_heads % tp_size == 0",
        "AssertionError",
    ]
    found = explain(log).diagnosis
    assert found is not None and found.family == "config_invalid"
    # another assert on the sizes (a vLLM bug counting devices) says nothing of the kind
    other = [*log[:2], "    assert self.parallel_config.local_world_size <= count", log[3]]
    found = explain(other).diagnosis
    assert found is not None and found.family == "other"


@pytest.mark.parametrize("line,family", MORE_MEMBERS)
def test_more_unknown_members_from_their_sources(line, family):
    raised = raised_exception(line)
    assert raised is not None and family_of_exception(raised) == family


def test_a_log_that_ends_with_vllm_waiting_on_its_workers_is_a_hung_engine():
    # vLLM 0.32.0 distributed/device_communicators/shm_broadcast.py logs it while a reader
    # waits; idle workers wait without it (v1/executor/multiproc_executor.py, indefinite=True)
    waiting = vllm(
        "WARNING",
        "No available shared memory broadcast block found in 60 seconds. This typically happens "
        "when some processes are hanging or doing some time-consuming work (e.g. compilation, "
        "weight/kv cache quantization).",
        "shm_broadcast.py:466",
    )
    ready = vllm("INFO", "Application startup complete.", "launcher.py:46")
    explained = explain([ready, waiting])
    assert explained.verdict == "failed", explained.why
    assert explained.diagnosis is not None and explained.diagnosis.family == "engine_hang"
    # the engine answered again after it: healthy by its end
    served = vllm("INFO", "Avg prompt throughput: 12.0 tokens/s", "loggers.py:1")
    assert explain([ready, waiting, served]).verdict == "healthy"


# Texts the projects raise at start-up, quoted from the release named beside each (the values they
# format filled in), that no row of the table names: each class of exception_classes.py that
# reads them is tested by its source's own words.
SOURCE_TEXTS = [
    # ray 2.60.0 python/ray/_private/utils.py check_version_info
    (
        "RuntimeError: Version mismatch: The cluster was started with:",
        "ray_cluster",
    ),
    # ray 2.60.0 python/ray/_private/services.py
    (
        "ConnectionError: Could not find any running Ray instance. Please specify the one to "
        "connect to by setting `--address` flag or `RAY_ADDRESS` environment variable.",
        "ray_cluster",
    ),
    # ray 2.60.0 python/ray/autoscaler/_private/autoscaler.py
    (
        "Error: No available node types can fulfill resource request {'GPU': 1.0}. Add suitable "
        "node types to this cluster to resolve this issue.",
        "ray_cluster",
    ),
    # vLLM 0.32.0 v1/core/kv_cache_utils.py (a line cut before its `KV cache is needed`)
    (
        "ValueError: To serve at least one request with the model's max seq len (100000), "
        "(4.26 GiB KV",
        "kv_cache",
    ),
    # vLLM 0.32.0 model_executor/kernels/linear/__init__.py choose_scaled_mm_linear_kernel
    (
        "ValueError: Failed to find a kernel that can implement the ScaledMM linear layer. "
        "Reasons:",
        "gpu_arch",
    ),
    # triton-lang/triton@053af4e9f8f0 python/triton/compiler/errors.py: `at L:C:`, the cause
    # printed under the kernel's source
    ("triton.compiler.errors.CompilationError: at 1:0:", "gpu_arch"),
    # triton python/triton/language/semantic.py, as a message
    (
        "ValueError: type fp8e4nv not supported in this architecture. The supported fp8 dtypes "
        "are ('fp8e4b15', 'fp8e5')",
        "gpu_arch",
    ),
    # triton python/triton/runtime/driver.py _create_driver: no GPU the driver sees
    ("RuntimeError: 0 active drivers ([]). There should only be one.", "cuda_runtime"),
    # torch 2.13.0 torch/cuda/__init__.py: a CPU wheel
    ("AssertionError: Torch not compiled with CUDA enabled", "package_version"),
    # torch 2.13.0 torch/_ops.py _OpNamespace.__getattr__: an extension's op not registered
    (
        "AttributeError: '_OpNamespace' '_C' object has no attribute 'rms_norm'",
        "package_version",
    ),
    # torch's custom classes (torch/_classes.py through torch::class_)
    (
        "RuntimeError: Tried to instantiate class '_core_C.ScalarType', but it does not exist! "
        "Ensure that it is registered via torch::class_",
        "package_version",
    ),
    # CPython Objects/abstract.c (3.9+) and before; Objects/typeobject.c for PEP 604 before 3.10
    ("TypeError: type 'array.array' is not subscriptable", "package_version"),
    ("TypeError: 'type' object is not subscriptable", "package_version"),
    (
        "TypeError: unsupported operand type(s) for |: 'type' and 'NoneType'",
        "package_version",
    ),
    # oss_harmony 0.0.11 openai_harmony/__init__.py (load_harmony_encoding)
    (
        "openai_harmony.HarmonyError: invalid tiktoken vocab file: expected token and rank, "
        "could not split on ' ' at line 1",
        "tokenizer",
    ),
    # huggingface_hub 2.4.0 utils/_validators.py: a local path that is not there
    (
        "huggingface_hub.errors.HFValidationError: Repo id must be in the form 'repo_name' or "
        "'namespace/repo_name': '/models/Qwen3-8B'. Use `repo_type` argument if needed.",
        "model_access",
    ),
    # huggingface_hub 2.4.0 utils/_http.py hf_raise_for_status
    (
        "huggingface_hub.errors.RevisionNotFoundError: 404 Client Error. Revision Not Found for "
        "url: https://huggingface.co/m/resolve/v2/config.json.",
        "model_access",
    ),
    (
        "huggingface_hub.errors.RemoteEntryNotFoundError: 404 Client Error. Entry Not Found for "
        "url: https://huggingface.co/m/resolve/main/tokenizer.json.",
        "model_files",
    ),
    # transformers 5.19.0 configuration_utils.py
    (
        "OSError: It looks like the config file at '/models/m/config.json' is not a valid JSON "
        "file.",
        "model_files",
    ),
    # pytorch/pytorch@0007e752d518 torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp
    (
        "RuntimeError: [Rank 0] Watchdog caught collective operation timeout: "
        "WorkNCCL(SeqNum=1, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran "
        "for 600081 milliseconds before timing out.",
        "nccl",
    ),
    (
        "RuntimeError: Some NCCL operations have failed or timed out. Due to the asynchronous "
        "nature of CUDA kernels, subsequent GPU operations might run on corrupted/incomplete "
        "data.",
        "nccl",
    ),
    # pytorch/pytorch@8cf1b8e39425 torch/csrc/distributed/c10d/socket.cpp
    (
        "RuntimeError: The client socket has failed to connect to any network address of "
        "(10.0.0.2, 29500).",
        "distributed_init",
    ),
    # the same file's server socket: errno 98 is a port taken, not a rendezvous failure
    (
        "torch.distributed.DistNetworkError: The server socket has failed to listen on any local "
        "network address. port: 29500, useIpv6: false, code: -98, name: EADDRINUSE, message: "
        "address already in use",
        "port_in_use",
    ),
    (
        "RuntimeError: The server socket has failed to listen on any local network address. The "
        "server socket has failed to bind to [::]:29500 (errno: 98 - Address already in use).",
        "port_in_use",
    ),
]


@pytest.mark.parametrize("line,family", [*UNKNOWN_MEMBERS, *SOURCE_TEXTS])
def test_an_unknown_member_gets_its_family_from_the_text_it_raises(line, family):
    raised = raised_exception(line)
    assert raised is not None, line
    assert family_of_exception(raised) == family


@pytest.mark.parametrize("line,family", [*UNKNOWN_MEMBERS, *SOURCE_TEXTS])
def test_a_log_ending_in_it_is_failed_and_quotes_it(line, family):
    log = [
        vllm(
            "INFO", "Initializing a V1 LLM engine (v0.32.0) with config: model='m'", "core.py:133"
        ),
        vllm("ERROR", "EngineCore failed to start.", "core.py:1510"),
        vllm("ERROR", "Traceback (most recent call last):"),
        vllm("ERROR", '  File "/usr/lib/python3.12/site-packages/vllm/v1/engine/core.py", line 9'),
        vllm("ERROR", "    raise X"),
        vllm("ERROR", line),
    ]
    explained = explain(log)
    assert explained.verdict == "failed"
    found = explained.diagnosis
    assert found is not None and found.family == family, explained.why
    assert found.evidence.endswith(line) and found.line_number == 6


SITE = "/usr/local/lib/python3.12/dist-packages"
# The raising module, for a text no class names: (innermost frame, exception line, family). The
# areas are the packages' own layout (triton 3.x python/triton/{compiler,backends,language};
# flashinfer's jit/; torch 2.13 torch/_ops.py, torch/_classes.py, torch/cuda/; huggingface_hub
# 2.4.0; safetensors 0.8.0; transformers 5.19.0's tokenization files; vLLM 0.32.0's pynccl,
# model registry and quantization layers).
RAISING_MODULES = [
    (f"{SITE}/triton/backends/nvidia/compiler.py", "make_llir", "RuntimeError: boom", "gpu_arch"),
    (f"{SITE}/flashinfer/jit/core.py", "build", "RuntimeError: boom", "gpu_arch"),
    (f"{SITE}/torch/_ops.py", "__getattr__", "AttributeError: boom", "package_version"),
    (f"{SITE}/torch/cuda/__init__.py", "_lazy_init", "RuntimeError: boom", "cuda_runtime"),
    (
        f"{SITE}/huggingface_hub/file_download.py",
        "hf_hub_download",
        "OSError: boom",
        "model_access",
    ),
    (f"{SITE}/safetensors/torch.py", "load_file", "RuntimeError: boom", "model_files"),
    (
        f"{SITE}/transformers/tokenization_utils_base.py",
        "from_pretrained",
        "KeyError: 'boom'",
        "tokenizer",
    ),
    (
        f"{SITE}/vllm/distributed/device_communicators/pynccl.py",
        "__init__",
        "RuntimeError: boom",
        "nccl",
    ),
    (
        f"{SITE}/vllm/model_executor/models/registry.py",
        "inspect_model_cls",
        "RuntimeError: boom",
        "model_arch",
    ),
    # vLLM 0.32.0 quantization/utils/marlin_utils_fp8.py: a scheme the kernels do not take
    (
        f"{SITE}/vllm/model_executor/layers/quantization/utils/marlin_utils_fp8.py",
        "prepare_fp8_layer_for_marlin",
        "RuntimeError: Marlin W8A8 is not supported.",
        "config_invalid",
    ),
]


@pytest.mark.parametrize("file,function,line,family", RAISING_MODULES)
def test_the_raising_module_gives_the_family_when_no_text_does(file, function, line, family):
    log = [
        "Traceback (most recent call last):",
        f'  File "{file}", line 42, in {function}',
        "    do_it()",
        line,
    ]
    found = explain(log).diagnosis
    assert found is not None and found.family == family, explain(log).why
    # the same exception raised elsewhere: no text names a family
    elsewhere = [log[0], '  File "/srv/app/main.py", line 3, in main', log[2], line]
    found = explain(elsewhere).diagnosis
    assert found is not None and found.family == "other"


def test_a_module_does_not_override_a_text_that_names_its_family():
    # a CUDA error surfacing in torch/cuda is the GPU's memory when its text says so
    log = [
        "Traceback (most recent call last):",
        f'  File "{SITE}/torch/cuda/memory.py", line 7, in mem_get_info',
        "    return torch.cuda.cudart().cudaMemGetInfo(device)",
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
    ]
    found = explain(log).diagnosis
    assert found is not None and found.family == "memory_gpu"


def test_torchs_warnings_of_a_retried_connect_fail_no_healthy_start_up():
    # c10d logs a connect it retries at WARNING (`[W...] socket.cpp`), and ProcessGroupNCCL's
    # exit warning: neither is an error, and the start-up reached its end
    log = [
        "[W420 19:27:52.000000000 socket.cpp:764] [c10d] The client socket has failed to connect "
        "to [node1]:55240 (errno: 111 - Connection refused).",
        vllm("INFO", "Application startup complete.", "launcher.py:46"),
        "[rank0]:[W610 10:12:02.613147412 ProcessGroupNCCL.cpp:1575] Warning: WARNING: "
        "destroy_process_group() was not called before program exit, which can leak resources.",
    ]
    assert explain(log).verdict == "healthy", explain(log).why


# Texts older releases raise at start-up (vLLM 0.6 to 0.11 in the V0 layout, transformers 4.45 /
# 4.51, Ray 2.40, torch's ProcessGroupNCCL of its time), quoted from the release and file named
# beside each (read from their PyPI sdists and wheels), the values they format filled in.
OLD_RELEASE_TEXTS = [
    # vLLM 0.6.3.post1 vllm/executor/ray_gpu_executor.py (0.7-0.10: ray_distributed_executor.py)
    (
        "RuntimeError: Every node should have a unique IP address. Got 2 nodes with node ids "
        "['a1', 'b2'] and 1 unique IP addresses ['10.0.0.1']. Please check your network "
        "configuration. If you set `VLLM_HOST_IP` or `HOST_IP` environment variable, make sure "
        "it is unique for each node.",
        "ray_cluster",
    ),
    # vLLM 0.6.3.post1 vllm/executor/ray_utils.py _verify_bundles / initialize_ray_cluster
    (
        "ValueError: Current node has no GPU available. current_node_resource={'CPU': 20.0}. "
        "vLLM engine cannot start without GPU. Make sure you have at least 1 GPU available in a "
        "node current_node_id='a1' current_ip='10.0.0.1'.",
        "ray_cluster",
    ),
    (
        "AssertionError: Ray is not initialized although distributed-executor-backend is ray.",
        "ray_cluster",
    ),
    ("ValueError: Placement group bundle cannot have more than 1 GPU.", "ray_cluster"),
    # vLLM 0.6.3.post1 vllm/executor/ray_gpu_executor.py (the compiled DAG's pinned Ray)
    ("ValueError: Ray version 2.35 is required, but found 2.40.0", "package_version"),
    # vLLM 0.6.3.post1 vllm/executor/multiproc_gpu_executor.py (an assert) and 0.7.3
    # vllm/executor/mp_distributed_executor.py (a RuntimeError): more ranks than this node's GPUs
    (
        "AssertionError: please set tensor_parallel_size (2) to less than max local gpu count (1)",
        "config_invalid",
    ),
    (
        "RuntimeError: please ensure that world_size (2) is less than than max local gpu count (1)",
        "config_invalid",
    ),
    # vLLM 0.6.3.post1 vllm/distributed/parallel_state.py initialize_model_parallel
    (
        "RuntimeError: world_size (1) is not equal to tensor_model_parallel_size (2) x "
        "pipeline_model_parallel_size (1)",
        "config_invalid",
    ),
    # vLLM 0.9.2 vllm/v1/executor/multiproc_executor.py
    (
        "AssertionError: world_size (2) must be equal to the tensor_parallel_size (2) x "
        "pipeline_parallel_size (2).",  # the source ends in a space, which the log strips
        "config_invalid",
    ),
    # vLLM 0.11.0 vllm/platforms/cuda.py get_attn_backend_cls
    (
        "RuntimeError: V0 attention backends have been removed. Set VLLM_USE_V1=1 to select a "
        "supported backend.",
        "config_invalid",
    ),
    # vLLM 0.6.3.post1 vllm/model_executor/model_loader/loader.py BitsAndBytesModelLoader
    (
        "AttributeError: Model Gemma2ForCausalLM does not support BitsAndBytes quantization yet.",
        "config_invalid",
    ),
    # vLLM 0.7.3 vllm/entrypoints/openai/api_server.py validate_api_server_args (a KeyError)
    (
        "KeyError: 'invalid tool call parser: hermes2 (chose from { hermes,mistral })'",
        "config_invalid",
    ),
    # vLLM 0.6.3.post1 vllm/platforms/cuda.py device_id_to_physical_device_id
    (
        "RuntimeError: CUDA_VISIBLE_DEVICES is set to empty string, which means GPU support is "
        "disabled.",
        "cuda_runtime",
    ),
    # vLLM 0.7.3 vllm/distributed/device_communicators/cuda_wrapper.py
    (
        "AssertionError: libcudart is not loaded in the current process, try setting "
        "VLLM_CUDART_SO_PATH",
        "cuda_runtime",
    ),
    # pytorch/pytorch@0007e752d518 torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp (a ValueError)
    (
        "ValueError: ProcessGroupNCCL is only supported with GPUs, no GPUs found!",
        "cuda_runtime",
    ),
    # vLLM 0.6.6.post1 vllm/utils.py direct_register_custom_op
    (
        "AssertionError: cuda platform needs torch>=2.4 to support custom op, chances are you "
        "are using an old version of pytorch or a custom build of pytorch. It is recommended to "
        "use vLLM in a fresh new environment and let it install the required dependencies.",
        "package_version",
    ),
    # vLLM 0.9.2 vllm/distributed/device_communicators/all2all.py
    (
        "AssertionError: pplx_kernels not found. Please follow https://github.com/vllm-project/"
        "vllm/blob/main/tools/ep_kernels/README.md to install pplx_kernels.",
        "package_version",
    ),
    # vLLM 0.6.3.post1 vllm/model_executor/model_loader/loader.py _prepare_weights
    ("RuntimeError: No model weights found in: `/models/m`", "model_files"),
    # transformers 4.45.2 configuration_utils.py _get_config_dict
    (
        "OSError: Can't load the configuration of 'org/m'. If you were trying to load it from "
        "'https://huggingface.co/models', make sure you don't have a local directory with the "
        "same name. Otherwise, make sure 'org/m' is the correct path to a directory containing a "
        "config.json file",
        "model_access",
    ),
    # transformers 4.45.2 utils/hub.py cached_file
    (
        "OSError: v9 is not a valid git identifier (branch name, tag name or commit id) that "
        "exists for this model name. Check the model page at 'https://huggingface.co/org/m' for "
        "available revisions.",
        "model_access",
    ),
    ("OSError: There was a specific connection error when trying to load org/m:", "model_access"),
    (
        "OSError: Incorrect path_or_model_id: '/models/m'. Please provide either the path to a "
        "local folder or the repo_id of a model on the Hub.",
        "model_access",
    ),
    ("OSError: Could not locate model-00002-of-00004.safetensors inside /models/m.", "model_files"),
    # transformers 4.51.3 utils/hub.py cached_files (the endpoint a mirror, HF_ENDPOINT)
    (
        "OSError: We couldn't connect to 'https://hf-mirror.com' to load the files, and couldn't "
        "find them in the cached files.",
        "model_access",
    ),
    # transformers 4.45.2 modeling_utils.py load_state_dict
    (
        "OSError: The safetensors archive passed at /models/m/model.safetensors does not contain "
        "the valid metadata. Make sure you save your model with the `save_pretrained` method.",
        "model_files",
    ),
    # transformers 4.45.2 utils/import_utils.py _LazyModule._get_module
    (
        "RuntimeError: Failed to import transformers.models.qwen2.modeling_qwen2 because of the "
        "following error (look up to see its traceback):",
        "package_version",
    ),
    # ray 2.40.0 python/ray/_private/node.py _wait_and_get_for_node_address
    (
        "ValueError: Can't find a `node_ip_address.json` file from /tmp/ray/session_1. for 60 "
        "seconds. A ray instance hasn't started. Did you do `ray start` or `ray.init` on this "
        "host?",
        "ray_cluster",
    ),
    # ray 2.40.0 python/ray/_private/services.py, _private/worker.py
    (
        "ConnectionError: Found multiple active Ray instances: {'10.0.0.1:6379', "
        "'10.0.0.2:6379'}. Please specify the one to connect to by setting the `--address` flag "
        "or `RAY_ADDRESS` environment variable.",
        "ray_cluster",
    ),
    (
        "RuntimeError: Maybe you called ray.init twice by accident? This error can be suppressed "
        "by passing in 'ignore_reinit_error=True' or by calling 'ray.shutdown()' prior to "
        "'ray.init()'.",
        "ray_cluster",
    ),
    (
        "ValueError: Failed to bind to 0.0.0.0:8265 because it's already occupied. You can use "
        "`ray start --dashboard-port ...` or `ray.init(dashboard_port=...)` to select a "
        "different port.",
        "port_in_use",
    ),
    # ray 2.40.0 python/ray/_private/services.py, _private/resource_spec.py: the host's memory
    (
        "ValueError: The requested object store memory size is greater than the total available "
        "memory.",
        "memory_host",
    ),
    (
        "ValueError: After taking into account object store and redis memory usage, the amount "
        "of memory on this node available for tasks and actors (0.05 GB) is less than 1% of "
        "total. You can adjust these settings with ray.init(memory=<bytes>, "
        "object_store_memory=<bytes>).",
        "memory_host",
    ),
]


def v0(level: str, msg: str, file: str = "llm_engine.py:237") -> str:
    """A line as vLLM 0.6's logger printed it (no process prefix, the V0 engine)."""
    return f"{level} 10-16 05:42:03 {file}] {msg}"


@pytest.mark.parametrize("line,family", OLD_RELEASE_TEXTS)
def test_a_text_an_older_release_raises_gets_its_family(line, family):
    raised = raised_exception(line)
    assert raised is not None, line
    assert family_of_exception(raised) == family


@pytest.mark.parametrize("line,family", OLD_RELEASE_TEXTS)
def test_a_v0_log_ending_in_an_older_releases_text_is_failed_and_quotes_it(line, family):
    log = [
        v0("INFO", "Initializing an LLM engine (v0.6.3.post1) with config: model='m'"),
        "Traceback (most recent call last):",
        '  File "/usr/local/lib/python3.12/dist-packages/vllm/engine/llm_engine.py", line 9',
        "    raise X",
        line,
    ]
    explained = explain(log)
    assert explained.verdict == "failed"
    found = explained.diagnosis
    assert found is not None and found.family == family, explained.why
    assert found.evidence.endswith(line) and found.line_number == 5


def test_the_v0_ray_executor_is_ray_when_no_text_names_the_error():
    # vLLM 0.6.3.post1 vllm/executor/ray_gpu_executor.py (before ray_distributed_executor.py)
    log = [
        "Traceback (most recent call last):",
        f'  File "{SITE}/vllm/executor/ray_gpu_executor.py", line 42, in _init_workers_ray',
        "    ray.get(worker.get_node_ip.remote())",
        "RuntimeError: boom",
    ]
    found = explain(log).diagnosis
    assert found is not None and found.family == "ray_cluster", explain(log).why


def test_the_v0_worker_monitors_death_line_is_the_worker_died_symptom():
    # vLLM 0.6.3.post1-0.10.2 vllm/executor/multiproc_worker_utils.py WorkerMonitor.run:
    # `Worker %s pid %s died, exit code: %s`, logged only for a non-zero exit code; the root is
    # the traceback before it
    died = v0(
        "ERROR",
        "Worker VllmWorkerProcess pid 1234 died, exit code: -9",
        "multiproc_worker_utils.py:116",
    )
    ld = LogDiagnoser()
    found = ld.feed(died)
    assert found is not None and found.signature_id == "executor_worker_died"
    log = [
        "Traceback (most recent call last):",
        f'  File "{SITE}/vllm/platforms/cuda.py", line 95, in device_id_to_physical_device_id',
        "    raise RuntimeError(",
        "RuntimeError: CUDA_VISIBLE_DEVICES is set to empty string, which means GPU support is "
        "disabled.",
        died,
    ]
    found = explain(log).diagnosis
    assert found is not None and found.family == "cuda_runtime" and found.line_number == 4
    # an exit code 0 is never logged by it; a line with one is no death
    assert LogDiagnoser().feed(died.replace("-9", "0")) is None
