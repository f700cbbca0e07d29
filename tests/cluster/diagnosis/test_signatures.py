"""Failure knowledge and diagnosis: cluster/logs/logtext.py, cluster/diagnosis/failures.py and cluster/diagnosis/engine.py."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from cluster.diagnosis.engine import (
    ROOT_AFTER_LINES,
    Diagnosis,
    LogDiagnoser,
    diagnose,
    diagnosis_of,
    match_line,
    unrecognised,
)
from cluster.diagnosis.failures import NCCL_INIT_HANG, SIGNATURES, FailureSignature, cluster_words
from cluster.logs.logtext import clean_line, is_nccl_line, strip_prefixes

LOGS = Path(__file__).resolve().parents[2] / "data" / "logs"
E = "\x1b"
RAY = "(EngineCore_DP0 pid=89) (RayWorkerWrapper pid=4009, ip=10.0.0.2) "
ENGINE = "(EngineCore_DP0 pid=89) "
API = "(APIServer pid=1) "


def vllm(level: str, msg: str, file: str = "core.py:708") -> str:
    return f"{level} 11-30 05:42:03 [{file}] {msg}"


def read_log(name: str) -> list[str]:
    # newline="" keeps bare \r inside a line (progress bars), as a stream reader sees them
    with open(LOGS / name, encoding="utf-8", newline="") as f:
        return f.read().split("\n")


# One realistic sample per signature: a line, or lines whose LAST line is the evidence.
SAMPLES: dict[str, str | list[str]] = {
    "docker_image_mismatch": f"{E}[0;31mError: Docker image mismatch on worker node 10.0.0.2{E}[0m",
    "ray_gcs_connect_failed": "[2025-11-30 05:40:12,345 W 77 77] gcs_rpc_client.h:151: "
    "Failed to connect to GCS at address 10.0.0.1:6379 within 5 seconds.",
    "ray_version_mismatch": ENGINE + "RuntimeError: Version mismatch: The cluster was started "
    "with:\\n    Ray: 2.49.1\\n    Python: 3.12.3\\nThis process on node 10.0.0.2 was started with:",
    "dist_store_timeout": "[rank0]: torch.distributed.DistStoreError: Timed out after 601 "
    "seconds waiting for clients. 1/2 clients joined.",
    "ray_no_node_types": "(autoscaler +1m12s) Error: No available node types can fulfill "
    "resource request {'node:10.0.0.1': 0.001, 'GPU': 1.0}. Add suitable node types to this "
    "cluster to resolve this issue.",
    "ray_placement_group_timeout": ENGINE
    + vllm(
        "ERROR",
        "ValueError: Cannot provide a placement group of placement_group_specs=[{'GPU': 1.0, "
        "'node:10.0.0.1': 0.001}, {'GPU': 1.0}] within 1800 seconds. See `ray status` and "
        "`ray list nodes` to make sure the cluster has enough resources.",
    ),
    "ray_placement_group_waiting": ENGINE
    + vllm(
        "INFO",
        "Waiting for creating a placement group of specs for 10 seconds. specs=[{'GPU': 1.0}, "
        "{'GPU': 1.0}]. Check `ray status` and `ray list nodes` to see if you have enough "
        "resources.",
        "ray_utils.py:254",
    ),
    "vllm_unrecognized_arguments": "vllm: error: unrecognized arguments: --reasoning-parser-x qwen3",
    "vllm_invalid_argument": "vllm serve: error: argument --tensor-parallel-size/-tp: "
    "invalid int value: 'two'",
    "tp_not_divisible": API
    + vllm(
        "ERROR",
        "ValueError: Total number of attention heads (64) must be divisible by tensor "
        "parallel size (3).",
    ),
    "model_arch_unsupported": API
    + "ValueError: Model architectures ['Qwen3_5MoeForConditionalGeneration'] are not "
    "supported for now. Supported architectures: dict_keys(['AquilaModel', 'LlamaForCausalLM'])",
    "hf_gated_repo": API
    + "huggingface_hub.errors.GatedRepoError: 403 Client Error. Cannot access gated repo for "
    "url https://huggingface.co/meta-llama/Llama-3.1-8B/resolve/main/config.json.",
    "hf_repo_not_found": API
    + "huggingface_hub.errors.RepositoryNotFoundError: 401 Client Error. (Request ID: "
    "Root=1-abc) Repository Not Found for url: https://huggingface.co/api/models/Qwen/Nope.",
    "hf_unauthorized": API
    + "requests.exceptions.HTTPError: 401 Client Error: Unauthorized for url: "
    "https://huggingface.co/api/models/Qwen/Qwen3.5-122B-A10B-FP8",
    "hf_bad_repo_id": API
    + "huggingface_hub.errors.HFValidationError: Repo id must be in the form 'repo_name' or "
    "'namespace/repo_name': '/models/qwen35/'. Use `repo_type` argument if needed.",
    "free_memory_below_utilization": ENGINE
    + vllm(
        "ERROR",
        "ValueError: Free memory on device cuda:0 (98.4/121.63 GiB) on startup is less than "
        "desired GPU memory utilization (0.9, 109.47 GiB). Decrease GPU memory utilization "
        "or reduce GPU memory used by other processes.",
    ),
    "cuda_oom": RAY
    + f"{E}[1;31m"
    + vllm(
        "ERROR",
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.50 GiB. GPU 0 has a "
        "total capacity of 119.70 GiB of which 812.00 MiB is free.",
        "worker_base.py:620",
    )
    + f"{E}[0m",
    "host_oom_killed": "[123456.789012] Out of memory: Killed process 4009 (ray::RayWorkerW) "
    "total-vm:150000000kB, anon-rss:110000000kB",
    "kv_cache_too_small": ENGINE
    + vllm(
        "ERROR",
        "ValueError: The model's max seq len (262144) is larger than the maximum number of "
        "tokens that can be stored in KV cache (166528). Try increasing "
        "`gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine.",
    ),
    "ibv_modify_qp_no_device": RAY
    + "spark2:4009:4102 [0] transport/net_ib.cc:1112 NCCL WARN NET/IB : ibv_modify_qp failed "
    "with error No such device errno 19",
    "ibv_modify_qp_timeout": "spark1:89:120 [0] misc/ibvwrap.cc:312 NCCL WARN "
    "ibv_modify_qp failed with 110 Connection timed out, QP 0x1a2",
    "nccl_unhandled_system_error": RAY
    + vllm(
        "ERROR",
        "RuntimeError: NCCL error: unhandled system error (run with NCCL_DEBUG=INFO for details)",
        "worker_base.py:620",
    ),
    "nccl_watchdog_timeout": RAY
    + "[rank1]:[E1130 07:44:10.512345 ProcessGroupNCCL.cpp:632] [Rank 1] Watchdog caught "
    "collective operation timeout: WorkNCCL(SeqNum=48213, OpType=_ALLGATHER_BASE, "
    "NumelIn=8192, NumelOut=16384, Timeout(ms)=600000) ran for 600060 milliseconds before "
    "timing out.",
    "nccl_error": "[rank0]: torch.distributed.DistBackendError: NCCL error in: "
    "/pytorch/torch/csrc/distributed/c10d/NCCLUtils.cpp:77, remote process exited or there "
    "was a network error, NCCL version 2.28.3",
    "gloo_interface_missing": "(Worker pid=19) ERROR 12-01 07:05:35 [multiproc_executor.py:953] RuntimeError: "
    "[enforce fail at /__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/device.cc:84] ifa != nullptr. "
    "Unable to find address for: eth9",
    "gloo_connect_failed": "[rank1]: RuntimeError: Gloo connectFullMesh failed with "
    "[../third_party/gloo/gloo/transport/tcp/pair.cc:144] no error",
    "gloo_hostname_unresolved": "[W1130 05:41:00.123456 socket.cpp:759] [c10d] Unable to "
    "resolve hostname to a (local) address. Using the loopback address as fallback. "
    "Manually set the network interface to bind to with GLOO_SOCKET_IFNAME.",
    "nccl_ib_no_device": RAY + "spark2:4009:4102 [0] NCCL INFO NET/IB : No device found.",
    "nccl_net_socket": "spark1:89:120 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[0] [send] "
    "via NET/Socket/0",
    "mp_semlock_across_nodes": [
        "(Worker_TP1 pid=77) Traceback (most recent call last):",
        '(Worker_TP1 pid=77)   File "/usr/lib/python3.12/multiprocessing/synchronize.py", '
        "line 57, in __init__",
        "(Worker_TP1 pid=77)     sl = self._semlock = _multiprocessing.SemLock(",
        "(Worker_TP1 pid=77)                          ^^^^^^^^^^^^^^^^^^^^^^^^^",
        "(Worker_TP1 pid=77) FileNotFoundError: [Errno 2] No such file or directory",
    ],
    "docker_caps_refused": "docker: Error response from daemon: failed to create shim task: OCI "
    "runtime create failed: runc create failed: unable to start container process: unable to "
    "apply caps: operation not permitted: unknown",
    "docker_run_refused": "docker: Error response from daemon: Conflict. The container name "
    '"/vllm_node" is already in use by container "5f1c". You have to remove (or rename) that '
    "container to be able to reuse that name.",
    "cpu_shm_group_spans_nodes": ENGINE
    + vllm("ERROR", "RuntimeError: open shm in SHMManager failed. errno: 2", "core.py:1510"),
    "workerproc_init_failed": ENGINE
    + vllm(
        "ERROR",
        "Exception: WorkerProc initialization failed due to an exception in a background "
        "process. See stack trace for root cause.",
        "multiproc_executor.py:585",
    ),
    "port_in_use": API
    + "ERROR:    [Errno 98] error while attempting to bind on address ('0.0.0.0', 8000): "
    "address already in use",
    "shm_broadcast_timeout": [
        ENGINE + vllm("ERROR", "Traceback (most recent call last):"),
        ENGINE
        + vllm(
            "ERROR",
            '  File "/usr/local/lib/python3.12/dist-packages/vllm/distributed/'
            'device_communicators/shm_broadcast.py", line 507, in acquire_read',
        ),
        ENGINE + vllm("ERROR", "    raise TimeoutError"),
        ENGINE + vllm("ERROR", "TimeoutError"),
    ],
    "shm_broadcast_timeout_rpc": ENGINE
    + vllm(
        "ERROR", "TimeoutError: RPC call to execute_model timed out.", "multiproc_executor.py:240"
    ),
    "shm_broadcast_waiting": ENGINE
    + vllm(
        "WARNING",
        "No available shared memory broadcast block found in 60 seconds. This typically "
        "happens when some processes are hanging.",
        "shm_broadcast.py:466",
    ),
    "ray_worker_crashed": RAY + "*** SIGBUS received at time=1796022252 on cpu 7 ***",
    "ray_subprocesses_exited": "Some Ray subprocesses exited unexpectedly:",
    "ray_actor_died": ENGINE
    + vllm(
        "ERROR",
        "ray.exceptions.ActorDiedError: The actor died unexpectedly before finishing this task.",
    ),
    "engine_start_failed": ENGINE
    + f"{E}[31m"
    + vllm("ERROR", "EngineCore failed to start.")
    + f"{E}[0m",
    "ray_no_gpu_on_driver": vllm(
        "ERROR",
        "Ray does not allocate any GPUs on the driver node. Consider adjusting the Ray placement "
        "group or running the driver on a GPU node.",
    ),
    "ray_platform_unsupported": "(EngineCore pid=13420) ERROR 12-04 18:34:53 [core.py:1510] "
    "ValueError: current platform cpu does not support ray.",
    "kv_cache_no_memory": ENGINE
    + vllm(
        "ERROR",
        "ValueError: No available memory for the cache blocks. Try increasing "
        "`gpu_memory_utilization` when initializing the engine.",
    ),
    "nvrm_no_memory": "NVRM: nvCheckOkFailedNoLog: Check failed: Out of memory [NV_ERR_NO_MEMORY]",
    "nccl_ibv_call_failed": "spark01:2683:2826 [0] misc/ibvwrap.cc:268 NCCL WARN Call to "
    "ibv_create_cq failed",
    "cuda_no_kernel_image": vllm(
        "ERROR",
        "RuntimeError: CUDA error: no kernel image is available for execution on the device",
    ),
    "ray_node_marked_dead": "(raylet) The node with node id: 0f219779261fab027e79667e6451e061ded81c7"
    "6f07d05584652d818 and address: 10.0.0.51 and node name: 10.0.0.51 has been marked dead "
    "because the detector has missed too many heartbeats from it.",
    "ray_not_on_a_node": "2025-03-19 14:58:50,134\tINFO node.py:1084 -- Can't find a "
    "`node_ip_address.json` file from /tmp/ray/session_2025-03-19_14-26-07_915096_1. Have you "
    "started Ray instance using `ray start` or `ray.init`?",
    "max_model_len_over_model": "Value error, User-specified max_model_len (131072) is greater "
    "than the derived max_model_len (max_position_embeddings=32768.0 or model_max_length=None in "
    "model's config.json).",
    "request_too_long": "ValueError: The decoder prompt (length 3353) is longer than the maximum "
    "model length of 2560. Make sure that max_model_len is no smaller than the number of text "
    "tokens.",
    "model_arch_not_inspected": "Error msg: `ValueError: Model architectures "
    "['Qwen2_5_VLForConditionalGeneration'] failed to be inspected. Please check the logs for "
    "more details.`",
    "transformers_unknown_model_type": "> Value error, The checkpoint you are trying to load has "
    "model type `gemma4` but Transformers does not recognize this architecture.",
    "ray_memory_monitor_killed": "Memory on the node (IP: 169.254.181.2, ID: 708c7baf) where the "
    "task (actor ID: 0dab4ab4, name=RayWorkerVllm.__init__, pid=308, memory used=11.15GB) was "
    "running was 12.49GB / 13.15GB (0.950003), which exceeds the memory usage threshold of 0.95. "
    "Ray killed this worker (ID: 79a553ea) because it was the most recently scheduled task",
    "shm_no_space": "aa30811e22aa:1:114 [2] misc/shmutils.cc:128 NCCL WARN Error while creating "
    "shared memory segment /dev/shm/nccl-97p6hH (size 9637888), error: No space left on device "
    "(28)",
    "torch_arch_not_supported": "NVIDIA GeForce RTX 5070 Ti with CUDA capability sm_120 is not "
    "compatible with the current PyTorch installation.",
    "no_gpu_platform": "INFO 04-03 09:29:49 [__init__.py:243] No platform detected, vLLM is "
    "running on UnspecifiedPlatform",
    "c10d_connect_timeout": "[E socket.cpp:957] [c10d] The client socket has timed out after 60s "
    "while trying to connect to (10.1.16.222, 29400).",
    "nccl_warn": "[2026-04-06 23:02:12] gx10-9eba:158:188 [0] transport/net_ib/p2p.cc:786 NCCL "
    "WARN NET/IB: ncclIbTest: Got CQE with error (devIndex=0, req=0xe51690018018, comm=0xe516900"
    "18000 (send), wr_id=2, qp_num=1104)",
    "model_no_implementation": "ERROR 05-21 18:19:15 [engine.py:448] ValueError: "
    "Qwen2_5OmniForConditionalGeneration has no vLLM implementation and the Transformers "
    "implementation is not compatible with vLLM. Try setting VLLM_USE_V1=0.",
    "model_weights_not_found": "(RayWorkerVllm pid=1842765) ERROR 04-24 09:33:04 ray_utils.py:44] "
    "RuntimeError: Cannot find any model weights with 'meta-llama/CodeLlama-7b-Instruct-hf'",
    "quantization_not_on_this_gpu": "ValueError: The quantization method fp8 is not supported "
    "for the current GPU. Minimum capability: 89. Current capability: 86.",
    "bf16_not_on_this_gpu": "ValueError: Bfloat16 is only supported on GPUs with compute "
    "capability of at least 8.0.",
    "worker_crashed_signal": RAY + "*** SIGSEGV received at time=1796022252 on cpu 7 ***",
    "engine_dead": API
    + "vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue. See stack "
    "trace (above) for the root cause.",
    # vLLM 0.32.0 v1/executor/multiproc_executor.py
    "executor_worker_died": ENGINE
    + vllm(
        "ERROR",
        "Worker proc VllmWorker-1 died unexpectedly (exit code: -9), shutting down executor.",
        "multiproc_executor.py:316",
    ),
    # the CUDA runtime's sticky errors, through torch (c10/cuda/CUDAException)
    "cuda_sticky_error": ENGINE
    + "RuntimeError: CUDA error: an illegal memory access was encountered",
    "native_abort": "terminate called after throwing an instance of 'c10::Error'",
    # bash, for a command SIGKILLed in a script
    "process_killed": "/entrypoint.sh: line 12:    57 Killed                  vllm serve m",
    # moby's answer to `--gpus all` without the NVIDIA runtime
    "docker_gpu_runtime_missing": "docker: Error response from daemon: could not select device "
    'driver "" with capabilities: [[gpu]].',
    # ERROR lines vLLM goes on from (vLLM 0.32.0, the file and line that log them)
    "nvlink_detection_failed": ENGINE
    + vllm(
        "ERROR",
        "NVLink detection failed. This is normal if your machine has no NVLink equipped.",
        "cuda.py:823",
    ),
    "plugin_load_failed": API
    + vllm("ERROR", "Failed to load plugin lora_filesystem_resolver", "__init__.py:72"),
    "flash_attn_version_unusable": ENGINE
    + vllm(
        "ERROR",
        "Cannot use FA version 3 is not supported due to FA3 is only supported on devices with "
        "compute capability 9.x",
        "fa_utils.py:212",
    ),
    "triton_kernels_import_failed": ENGINE
    + vllm(
        "ERROR",
        "Failed to import Triton kernels. Please make sure your triton version is compatible. "
        "Error: cannot import name 'PrecisionConfig' from 'triton_kernels.matmul_ogs'",
        "config.py:35",
    ),
    "same_node_check_failed": RAY
    + vllm(
        "ERROR",
        "Error ignored in is_in_the_same_node: [Errno 2] No such file or directory: '/psm_4f1c2a'",
        "parallel_state.py:2630",
    ),
    # vLLM 0.32.0 repo_utils.py with_retry: logger.error before each retry
    "hub_lookup_retried": API
    + vllm(
        "ERROR",
        "Error retrieving safetensors: Repo id must be in the form 'repo_name' or "
        "'namespace/repo_name': '/data0/huggingface/MiniMax-M2.5'. Use `repo_type` argument if "
        "needed., retrying 1 of 2",
        "repo_utils.py:47",
    ),
    # vLLM 0.32.0 flashinfer_all_reduce.py: logger.warning_once, then `return None`
    "flashinfer_allreduce_workspace_failed": "(Worker_TP0 pid=3438584) "
    + vllm(
        "WARNING",
        "Failed to initialize FlashInfer All Reduce workspace: Ninja build failed. Ninja output:",
        "flashinfer_all_reduce.py:72",
    ),
    # Ray 2.60.0's raylet (the actor's death as the driver reports it)
    "ray_worker_exited_unexpectedly": RAY + "ray.exceptions.ActorDiedError: The actor died "
    "because its worker process has died. Worker exit type: SYSTEM_ERROR Worker exit detail: "
    "Worker unexpectedly exits with a connection error code 2. End of file. Some common causes "
    "include: (1) the process was killed by the OOM killer due to high memory usage, (2) ray "
    "stop --force was called, or (3) the worker crashed unexpectedly due to SIGSEGV or another "
    "unexpected error.",
    # the corpus rows (cluster/diagnosis/failures.py, the block from the real logs)
    "ray_gcs_lost": "[2025-12-19 15:55:39,521 E 3044 30260] gcs_rpc_client.h:552: Failed to "
    "connect to GCS within 60 seconds. GCS may have been killed. It's either GCS is terminated "
    "by `ray stop` or is killed unexpectedly.",
    "ray_oom_killer_summary": "(raylet) [2023-04-09 07:23:59,445 E 395 395] (raylet) "
    "node_manager.cc:3049: 10 Workers (tasks / actors) killed due to memory pressure (OOM), 0 "
    "Workers crashed due to other reasons at node (ID: e5d953ef, IP: 10.0.62.231) over the "
    "last time period.",
    "kv_cache_one_request": [
        ENGINE + "    raise ValueError(",
        ENGINE + "ValueError: To serve at least one request with the model's max seq len "
        "(100000), (4.26 GiB KV cach",
    ],
    "max_model_len_over_device_limit": "ValueError: TT-LLama8B and TT-Llama11B do not support "
    "max_model_len greater than 32768 on N150 (received 65536). Set --max_model_len to 32768 "
    "or lower in vLLM.",
    "no_quant_kernel_for_gpu": ENGINE + "ERROR 08-14 08:00:55 [core.py:1330] ValueError: Failed "
    "to find a kernel that can implement the ScaledMM linear layer. Reasons:",
    "flashinfer_smem_dispatch": ENGINE + "RuntimeError: Error in function "
    "'BatchPrefillWithPagedKVCacheDispatched' at /usr/local/lib/python3.12/dist-packages/"
    "flashinfer/data/include/flashinfer/attention/prefill.cuh:2964: Unsupported max_mma_kv: 0",
    "triton_compile_failed": ENGINE + "ERROR 07-31 15:57:54 [core.py:710] RuntimeError: "
    "PassManager::run failed",
    "jit_kernel_build_failed": ENGINE + "ERROR 06-13 11:28:14 [core.py:1199] RuntimeError: "
    "Ninja build failed. Ninja output:",
    "python_too_old": ENGINE + "ERROR 08-12 04:47:25 [core.py:1349] TypeError: type "
    "'array.array' is not subscriptable",
    "torch_extension_not_loaded": ENGINE + "ERROR 09-18 10:34:29 [core.py:718] AttributeError: "
    "'_OpNamespace' '_C_ascend' object has no attribute 'weak_ref_tensor'",
    "harmony_vocab_invalid": "(APIServer pid=21) openai_harmony.HarmonyError: invalid tiktoken "
    "vocab file: expected token and rank, could not split on ' ' at line 1",
    "cuda_device_assert": "/venv/lib/python3.12/site-packages/torch/_inductor/runtime/"
    "compile_tasks.py:45: <module>: block: [337,0,0], thread: [112,0,0] Assertion `index out of "
    "bounds: 0 <= tl.broadcast_to(tmp10, [XBLOCK]) < 4096` failed.",
    "rope_scaling_key_unknown": [
        '    if rope_scaling["type"] == "yarn":',
        "       ~~~~~~~~~~~~^^^^^^^^",
        "KeyError: 'type'",
    ],
}

# Further spellings a signature must also recognise: (signature id, line).
VARIANTS = [
    ("engine_dead", ENGINE + vllm("ERROR", "EngineCore encountered a fatal error.", "core.py:720")),
    ("engine_dead", API + vllm("ERROR", "AsyncLLM output_handler failed.", "async_llm.py:480")),
    (
        "engine_start_failed",
        API + "RuntimeError: Engine core initialization failed. See root cause above.",
    ),
    ("ray_actor_died", RAY + "The actor died unexpectedly before finishing this task."),
    (
        "ray_worker_crashed",
        "(raylet, ip=10.0.0.2) A worker died or was killed while executing a task by an unexpected system error.",
    ),
    (
        "cuda_oom",
        "[rank0]: torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
    ),
    (
        "hf_gated_repo",
        API + "OSError: You are trying to access a gated repo.\\nCannot access gated repo for url",
    ),
    ("nccl_net_socket", "spark1:89:120 [0] NCCL INFO Using network Socket"),
    (
        "dist_store_timeout",
        "ERROR:root:Timed out after 600 seconds waiting for clients. 1/2 clients joined.",
    ),
    (
        "kv_cache_too_small",
        ENGINE
        + vllm(
            "ERROR",
            "ValueError: To serve at least one request with the models's max seq "
            "len (32768), (4.00 GiB KV cache is needed, which is larger than the available "
            "KV cache memory (2.10 GiB).",
        ),
    ),
    ("port_in_use", ENGINE + "OSError: [Errno 98] Address already in use"),
    (
        "ray_placement_group_timeout",
        ENGINE
        + "ValueError: The number of required GPUs exceeds the total number of available GPUs in the placement group.",
    ),
    (
        "nccl_unhandled_system_error",
        "[rank0]: torch.distributed.DistBackendError: NCCL error in: ../NCCLUtils.hpp:317, unhandled system error (run with NCCL_DEBUG=INFO for details), NCCL version 2.21.5",
    ),
]

_PLACEHOLDER = re.compile(r"\{\w+\}")


def _lines(sample: str | list[str]) -> list[str]:
    return [sample] if isinstance(sample, str) else sample


# --- the table --------------------------------------------------------------------------------


def test_every_signature_has_a_sample_and_ids_are_unique():
    ids = [s.id for s in SIGNATURES]
    assert len(ids) == len(set(ids))
    assert set(ids) == set(SAMPLES)
    assert NCCL_INIT_HANG.id not in ids


def test_table_rows_are_complete():
    for sig in SIGNATURES:
        assert isinstance(sig, FailureSignature)
        assert sig.role in ("cause", "symptom")
        assert sig.title and sig.cause and sig.fix, sig.id
        assert isinstance(sig.pattern, re.Pattern)


def test_reference_rows_are_covered():
    # the exact strings of the reference table each map to a signature
    wanted = {
        "Failed to connect to GCS at address 10.0.0.1:6379 within 5 seconds": "ray_gcs_connect_failed",
        "DistStoreError: Timed out after 600 seconds waiting for clients. 1/2 clients joined": "dist_store_timeout",
        "RuntimeError: Version mismatch: The cluster was started with:": "ray_version_mismatch",
        "Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1, OpType=_ALLGATHER_BASE)": "nccl_watchdog_timeout",
        "ValueError: Free memory on device cuda:0 (90/121.63 GiB) on startup is less than desired GPU memory utilization (0.9, 109 GiB)": "free_memory_below_utilization",
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1 GiB": "cuda_oom",
        "The model's max seq len (32768) is larger than the maximum number of tokens that can be stored in KV cache (1000)": "kv_cache_too_small",
        "Total number of attention heads (64) must be divisible by tensor parallel size (3)": "tp_not_divisible",
        "Model architectures ['X'] are not supported for now": "model_arch_unsupported",
        "Cannot access gated repo for url": "hf_gated_repo",
        "401 Client Error": "hf_unauthorized",
        "Repository Not Found for url": "hf_repo_not_found",
        "Repo id must be in the form 'repo_name'": "hf_bad_repo_id",
        "WorkerProc initialization failed": "workerproc_init_failed",
        "No available node types can fulfill resource request": "ray_no_node_types",
        "Cannot provide a placement group requiring 2.0 GPUs within 1800 seconds": "ray_placement_group_timeout",
        "Gloo connectFullMesh failed": "gloo_connect_failed",
        "ibv_modify_qp failed with 110 (Connection timed out)": "ibv_modify_qp_timeout",
        "ibv_modify_qp failed with error No such device errno 19": "ibv_modify_qp_no_device",
        "RuntimeError: NCCL error: unhandled system error": "nccl_unhandled_system_error",
        "NET/IB : No device found": "nccl_ib_no_device",
        "[send] via NET/Socket": "nccl_net_socket",
        "vllm: error: unrecognized arguments: --foo": "vllm_unrecognized_arguments",
        "OSError: [Errno 98] Address already in use": "port_in_use",
        "No available shared memory broadcast block found in 60 seconds": "shm_broadcast_waiting",
        "EngineDeadError": "engine_dead",
        "EngineCore encountered a fatal error": "engine_dead",
        "AsyncLLM output_handler failed": "engine_dead",
        "ray.exceptions.ActorDiedError": "ray_actor_died",
    }
    for line, sig_id in wanted.items():
        found = match_line(line)
        assert found is not None, line
        assert found[0].id == sig_id, (line, found[0].id)


def test_roles_and_fatality():
    by_id = {s.id: s for s in SIGNATURES}
    for sym in ("engine_dead", "shm_broadcast_timeout", "ray_actor_died", "engine_start_failed"):
        assert by_id[sym].role == "symptom" and by_id[sym].fatal
    for finding in ("nccl_net_socket", "nccl_ib_no_device", "shm_broadcast_waiting"):
        assert not by_id[finding].fatal
    for cause in ("cuda_oom", "nccl_watchdog_timeout", "ray_gcs_connect_failed", "port_in_use"):
        assert by_id[cause].role == "cause" and by_id[cause].fatal


@pytest.mark.parametrize("sig_id", sorted(SAMPLES))
def test_each_signature_matches_its_realistic_line(sig_id):
    sig = next(s for s in SIGNATURES if s.id == sig_id)
    lines = _lines(SAMPLES[sig_id])
    if sig.survived:
        assert diagnose(lines) is None, sig_id
        found = match_line(strip_prefixes(clean_line(lines[-1])), table=(sig,))
        assert found is not None, sig_id
        context = [clean_line(x) for x in lines[:-1]][-5:]
        words = {**cluster_words(), **found[1].groupdict()}
        d = diagnosis_of(sig, clean_line(lines[-1]), len(lines), context, words)
    else:
        d = diagnose(lines)
    assert d is not None, sig_id
    assert d.signature_id == sig_id
    assert d.role == sig.role and d.fatal == sig.fatal
    assert d.evidence == clean_line(lines[-1])  # prefix kept: the operator sees rank/node
    assert E not in d.evidence
    assert d.line_number == len(lines)
    assert d.context == [clean_line(x) for x in lines[:-1]][-5:]
    assert d.cause and d.fix and d.title
    assert not _PLACEHOLDER.search(d.title + d.cause + d.fix), d
    if "{" not in sig.cause:
        assert d.cause == sig.cause
    if "{" not in sig.fix:
        assert d.fix == sig.fix
    # streaming: a fatal line returns a diagnosis when it arrives, a finding does not
    ld = LogDiagnoser()
    results = [ld.feed(x) for x in lines]
    assert all(r is None for r in results[:-1])
    if sig.survived:  # shown by --explain, but neither a failure nor a finding
        assert results[-1] is None and ld.findings == []
        assert [(m.row, m.fatal) for m in ld.matches] == [(sig_id, False)]
    elif sig.fatal:
        assert results[-1] == d
        assert ld.findings == []
    else:
        assert results[-1] is None
        assert [f.signature_id for f in ld.findings] == [sig_id]


@pytest.mark.parametrize("sig_id,line", VARIANTS)
def test_variants(sig_id, line):
    d = diagnose([line])
    assert d is not None and d.signature_id == sig_id, (line, d)


def test_groups_fill_the_text():
    d = diagnose([SAMPLES["vllm_unrecognized_arguments"]])
    assert "--reasoning-parser-x qwen3" in d.fix and "Remove" in d.fix
    d = diagnose([SAMPLES["tp_not_divisible"]])
    assert "(64)" not in d.fix and "divisor of 64" in d.fix
    d = diagnose([SAMPLES["ray_gcs_connect_failed"]])
    assert "10.0.0.1:6379" in d.title and "10.0.0.1:6379" in d.fix
    d = diagnose([SAMPLES["model_arch_unsupported"]])
    assert "Qwen3_5MoeForConditionalGeneration" in d.title


def test_after_rows_need_their_context():
    # a bare TimeoutError / FileNotFoundError elsewhere is not an shm_broadcast / SemLock failure
    assert diagnose([ENGINE + "TimeoutError"]) is None
    assert diagnose(["FileNotFoundError: [Errno 2] No such file or directory: 'x.json'"]) is None
    # the context may also be on the same line
    d = diagnose(["OSError: SemLock failed: [Errno 2] No such file or directory"])
    assert d.signature_id == "mp_semlock_across_nodes"


def test_traceback_source_lines_are_not_evidence():
    lines = [
        "Traceback (most recent call last):",
        '  File "/x/pynccl_wrapper.py", line 356, in NCCL_CHECK',
        '    raise RuntimeError(f"NCCL error: {error_str}")',
        "KeyboardInterrupt",
    ]
    assert diagnose(lines) is None


# --- whole logs ---------------------------------------------------------------------------------


def test_oom_then_engine_dead_is_an_oom():
    lines = read_log("oom_then_engine_dead.log")
    d = diagnose(lines)
    assert d.signature_id == "cuda_oom"
    assert d.role == "cause"
    assert "--gpu-memory-utilization" in d.fix
    assert d.evidence.startswith("(EngineCore_DP0 pid=89) (RayWorkerWrapper pid=4009, ip=10.0.0.2)")
    assert "torch.OutOfMemoryError" in d.evidence
    assert lines[d.line_number - 1].endswith(d.evidence.split("]")[-1])
    assert len(d.context) == 5 and "create_weights" in d.context[3]


def test_nccl_error_with_traceback():
    lines = read_log("nccl_error_traceback.log")
    d = diagnose(lines)
    # the traceback's source line `raise RuntimeError(f"NCCL error: ...")` is not evidence
    assert d.signature_id == "nccl_unhandled_system_error"
    assert "RuntimeError: NCCL error: unhandled system error" in d.evidence
    assert "IPC_LOCK" in d.fix and "NCCL_IB_GID_INDEX" in d.fix


def test_watchdog_then_engine_dead():
    lines = read_log("watchdog_then_engine_dead.log")
    d = diagnose(lines)
    assert d.signature_id == "nccl_watchdog_timeout"
    assert "[rank1]" in d.evidence and "ip=10.0.0.2" in d.evidence
    # the log shows neither NCCL's version nor the CPU: the fix names no NCCL release
    assert "2.29.3" not in d.fix and "NCCL_DEBUG=INFO" in d.fix
    ld = LogDiagnoser()
    out = [ld.feed(x) for x in lines]
    first = next(i for i, r in enumerate(out) if r is not None)
    assert first + 1 == d.line_number
    # every later fatal line (ActorDiedError, EngineDeadError) still reports the first cause
    later = [r for r in out[first:] if r is not None]
    assert len(later) >= 3 and all(r == d for r in later)
    assert [f.signature_id for f in ld.findings] == ["shm_broadcast_waiting"]


def test_healthy_startup_has_no_diagnosis_and_no_false_positives():
    lines = read_log("healthy_startup.log")
    assert diagnose(lines) is None
    for line in lines:
        assert match_line(strip_prefixes(clean_line(line))) is None, line
    ld = LogDiagnoser()
    assert all(ld.feed(x) is None for x in lines)
    assert ld.findings == [] and not ld.failed


def test_symptom_alone_is_reported_when_no_cause():
    lines = [
        API
        + vllm("INFO", "Starting vLLM API server 0 on http://0.0.0.0:8000", "api_server.py:1634"),
        API + "Traceback (most recent call last):",
        API + "vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue.",
    ]
    d = diagnose(lines)
    assert d.signature_id == "engine_dead" and d.role == "symptom" and d.line_number == 3


def test_finding_reported_when_nothing_fatal():
    lines = [SAMPLES["nccl_net_socket"], vllm("INFO", "Loading weights took 123.45 seconds")]
    d = diagnose(lines)
    assert d.signature_id == "nccl_net_socket" and not d.fatal
    assert "IPC_LOCK" in d.fix


def test_fatal_cause_beats_earlier_symptom_and_finding():
    lines = [SAMPLES["nccl_ib_no_device"], SAMPLES["engine_dead"], SAMPLES["cuda_oom"]]
    assert diagnose(lines).signature_id == "cuda_oom"
    ld = LogDiagnoser()
    out = [ld.feed(x) for x in lines]
    assert out[0] is None
    assert out[1].signature_id == "engine_dead"
    assert out[2].signature_id == "cuda_oom"


def test_empty_log():
    assert diagnose([]) is None
    assert diagnose(["", "   ", "\x1b[0m"]) is None


# --- streams and stalls ---------------------------------------------------------------------------

NCCL_TAIL = [
    ENGINE + vllm("INFO", "vLLM is using nccl==2.28.3", "pynccl.py:104"),
    "spark1:89:89 [0] NCCL INFO Bootstrap : Using enp1s0f1np1:10.0.0.1<0>",
    "spark1:89:89 [0] NCCL INFO NCCL version 2.28.3+cuda13.0",
    RAY
    + "spark2:4009:4102 [0] NCCL INFO NET/IB : Using [0]rocep1s0f1:1/RoCE; OOB enp1s0f1np1:10.0.0.2<0>",
    "spark1:89:120 [0] NCCL INFO NET/IB : Made virtual device [0] name=rocep1s0f1 speed=200000",
    "spark1:89:120 [0] NCCL INFO ncclCommInitRank comm 0xaaab1234 rank 0 nranks 2 cudaDev 0 - Init START",
    "",
]


def test_stall_after_nccl_lines_is_nccl_init_hang():
    ld = LogDiagnoser()
    for line in NCCL_TAIL:
        assert ld.feed(line) is None
    d = ld.diagnose_stall("model loading", 600)
    assert isinstance(d, Diagnosis)
    assert d.signature_id == "nccl_init_hang" == NCCL_INIT_HANG.id
    assert d.role == "cause" and d.fatal
    assert "ncclCommInitRank" in d.evidence and d.line_number == 6
    for word in ("RoCE", "NCCL_IB_HCA", "NCCL_SOCKET_IFNAME", "NCCL_DEBUG=INFO", "GID"):
        assert word in d.fix
    assert "10 min" in d.title and "model loading" in d.title
    assert d.context[-1].endswith("speed=200000")


def test_stall_otherwise_is_generic():
    ld = LogDiagnoser()
    for line in [
        *NCCL_TAIL,
        ENGINE
        + vllm(
            "INFO",
            "Starting to load model Qwen/Qwen3.5-122B-A10B-FP8...",
            "gpu_model_runner.py:1890",
        ),
    ]:
        ld.feed(line)
    d = ld.diagnose_stall("weight loading", 90)
    assert d.signature_id == "stalled" and d.role == "symptom"
    assert "weight loading" in d.title and "90 s" in d.cause
    assert "Starting to load model" in d.evidence and d.line_number == 8
    assert "stall timeout" in d.fix and "tail" in d.fix
    assert not _PLACEHOLDER.search(d.title + d.cause + d.fix)


def test_stall_with_no_output():
    d = LogDiagnoser().diagnose_stall("container start", 300)
    assert d.signature_id == "stalled" and d.line_number is None and d.context == []


def test_streaming_returns_none_until_the_fatal_line():
    lines = read_log("oom_then_engine_dead.log")
    ld = LogDiagnoser()
    out = [ld.feed(x) for x in lines]
    first = next(i for i, r in enumerate(out) if r is not None)
    assert all(r is None for r in out[:first])
    assert out[first].signature_id == "cuda_oom" and out[first].line_number == first + 1
    assert ld.failed and ld.diagnosis == diagnose(lines)
    assert ld.line_count == len(lines)


def test_memory_is_bounded_for_long_logs():
    ld = LogDiagnoser(keep_lines=300)
    info = ENGINE + vllm(
        "INFO", "Engine 000: Avg prompt throughput: 0.0 tokens/s", "loggers.py:123"
    )
    for _i in range(20_000):
        ld.feed(info)
        ld.feed(SAMPLES["nccl_net_socket"])  # repeated findings are kept once
    assert len(ld._recent) <= 300
    assert len(ld.findings) == 1 and ld.findings[0].line_number == 2
    assert len(ld.tail(10_000)) == 300
    assert ld.feed(SAMPLES["cuda_oom"]).line_number == 40_001


# --- unrecognised ----------------------------------------------------------------------------------


def test_unrecognised_says_where_and_attaches_last_lines():
    lines = [f"line {i}" for i in range(1, 51)] + ["Segmentation fault (core dumped)", ""]
    d = unrecognised(lines, "vLLM on the head node (spark1)")
    assert d.signature_id == "unrecognised"
    assert "vLLM on the head node (spark1)" in d.title
    assert "no known failure signature" in d.cause and "the last line is attached" in d.cause
    assert "failures.py" not in d.fix and "spark-bot diagnose FILE" in d.fix, (
        "never: edit the source"
    )
    assert d.evidence == "Segmentation fault (core dumped)" and d.line_number == 51
    assert d.context == [f"line {i}" for i in range(31, 51)]
    assert unrecognised([], "ray start").line_number is None


def test_unrecognised_names_the_first_exception_line_as_the_likely_cause():
    lines = [
        "INFO starting",
        "(Worker pid=3) WARNING 12-01 06:15:21 [x.py:1] slow",
        "(Worker pid=3) ERROR 12-01 06:15:22 [y.py:9] Traceback (most recent call last):",
        '(Worker pid=3) ERROR 12-01 06:15:22 [y.py:9]   File "a.py", line 3, in f',
        "(Worker pid=3) ERROR 12-01 06:15:22 [y.py:9]     raise ValueError('not this')",
        "(Worker pid=3) ERROR 12-01 06:15:22 [y.py:9] torch._inductor.exc.InductorError: "
        "InvalidCxxCompiler: No working C++ compiler found",
        "json.decoder.JSONDecodeError: later, not first",
        "exit",
    ]
    d = unrecognised(lines, "weights on spark-lab-0")
    assert d.line_number == 6 and "InvalidCxxCompiler" in d.evidence
    assert "Likely cause" in d.cause and "No working C++ compiler found` (line 6)" in d.cause
    only_error_level = unrecognised(
        ["ok", "2026-12-01 06:18:28,593\tERROR worker.py:1 -- the GCS died", "bye"], "x"
    )
    assert only_error_level.line_number == 2


# A real Ray launch on the lab (vLLM 0.32 CPU, TP=2 over two nodes, an AVX-512 CPU): the head
# logs "EngineCore failed to start." first, the traceback's root 74 lines later, then Ray's
# clean-up errors (ActorHandleNotFoundError) to the end.
SHM_ACROSS_NODES = "real-vllm-0.32-cpu-ray-shm-across-nodes.log"
SHM_ROOT = "RuntimeError: open shm in SHMManager failed. errno: 2"


def test_a_real_cpu_shm_group_across_nodes_is_named_by_its_root_line():
    d = diagnose(read_log(SHM_ACROSS_NODES))
    assert d is not None and d.signature_id == "cpu_shm_group_spans_nodes", d
    assert d.evidence.endswith(SHM_ROOT) and "VLLM_DIST_IDENT" in d.cause
    assert any("join_shm_manager" in line for line in d.context), d.context


def test_a_symptom_with_no_error_before_it_quotes_the_root_of_the_traceback_it_heads():
    """The same real log with no row for its root: the symptom names the traceback's first
    exception, not the clean-up errors after it nor nothing."""
    table = tuple(s for s in SIGNATURES if s.id != "cpu_shm_group_spans_nodes")
    d = diagnose(read_log(SHM_ACROSS_NODES), table=table)
    assert d is not None and d.signature_id == "engine_start_failed", d
    assert f"the root exception in its traceback: `{SHM_ROOT}`" in d.cause, d.cause
    assert "ActorHandleNotFoundError" not in d.cause
    assert d.evidence.endswith(SHM_ROOT) and d.search == SHM_ROOT


def test_a_symptom_explained_before_it_keeps_that_error_and_its_own_line():
    lines = [
        ENGINE + vllm("ERROR", "ValueError: the first error"),
        ENGINE + vllm("ERROR", "EngineCore failed to start."),
        ENGINE + vllm("ERROR", "KeyError: a later one"),
    ]
    d = diagnose(lines)
    assert (
        d is not None and "the root exception before it: `ValueError: the first error`" in d.cause
    )
    assert "later one" not in d.cause and d.search == "ValueError: the first error"


def test_an_exception_long_after_a_symptom_is_not_its_root():
    far = ["INFO nothing to see"] * (ROOT_AFTER_LINES + 50)
    d = diagnose(
        [ENGINE + vllm("ERROR", "EngineCore failed to start."), *far, "KeyError: unrelated"]
    )
    assert d is not None and "unrelated" not in d.cause and "Likely cause" not in d.cause


# --- logtext ---------------------------------------------------------------------------------------


def test_clean_line():
    assert clean_line(f"{E}[1;31mERROR{E}[0m boom  \r\n") == "ERROR boom"
    assert clean_line("a 10%\rb 20%\r") == "b 20%"
    assert clean_line(f"{E}]0;title\x07text\t") == "text"
    assert clean_line("x" * 100_000) == "x" * 8192


@pytest.mark.parametrize(
    "line,message",
    [
        ("(RayWorkerWrapper pid=4009, ip=10.0.0.2) hello", "hello"),
        ("(EngineCore_DP0 pid=89) hello", "hello"),
        ("(VllmWorker rank=0 pid=12) hello", "hello"),
        ("(pid=3) hello [repeated 4x across cluster]", "hello"),
        ("(raylet, ip=10.0.0.2) hello", "hello"),
        ("(autoscaler +1m2s) hello", "hello"),
        ("[rank1]: hello", "hello"),
        ("[rank1]:[E1130 07:44:10.512345 ProcessGroupNCCL.cpp:632] hello", "hello"),
        ("INFO 11-30 05:42:03 [gpu_model_runner.py:1890] hello", "hello"),
        ("WARNING 11-30 05:42:03.123456 [x.py:1] hello", "hello"),
        ("CRITICAL 11-30 05:42:03 [x.py:1] hello", "hello"),
        ("ERROR:root:hello", "hello"),
        ("INFO:     hello", "hello"),
        ("2025-11-30T05:42:03.123456789Z hello", "hello"),
        (
            "(EngineCore_DP0 pid=89) (RayWorkerWrapper pid=4009, ip=10.0.0.2) [rank1]: "
            "ERROR 11-30 05:42:03 [worker_base.py:620] hello",
            "hello",
        ),
        ('(APIServer pid=1)   File "x.py", line 3, in f', '  File "x.py", line 3, in f'),
        ("(not a prefix) hello", "(not a prefix) hello"),
        # Docker Compose's `<name padded> | ` (docker/compose cmd/formatter/logs.go)
        ("backend-vllm-openai-1  | RuntimeError: boom", "RuntimeError: boom"),
        (
            "vllm-1 | (RayWorkerWrapper pid=643) ERROR 06-14 07:04:12 worker_base.py:148] hello",
            "hello",
        ),
        (
            "vllm-1  |     prop = get_device_properties(device)",
            "    prop = get_device_properties(device)",
        ),
        ("INFO 11-30 05:42:03 [x.py:1] a | b", "a | b"),
        ("Detected IB_IF: rocep1s0f1", "Detected IB_IF: rocep1s0f1"),
    ],
)
def test_strip_prefixes(line, message):
    assert strip_prefixes(line) == message


def test_is_nccl_line():
    for line in [*NCCL_TAIL[1:-1], SAMPLES["nccl_net_socket"], SAMPLES["nccl_ib_no_device"]]:
        assert is_nccl_line(line), line
    for line in (
        ENGINE + vllm("INFO", "Loading weights took 123.45 seconds"),
        "CustomAllreduce is disabled because this process group spans across nodes.",
        "",
    ):
        assert not is_nccl_line(line), line


def test_texts_speak_of_this_clusters_nodes_and_gpus():
    line = "ValueError: Cannot provide a placement group of placement_group_specs=[{'GPU': 1.0}] within 1800 seconds."
    three = diagnose([line], words=cluster_words(3, 3))
    assert "it must list 3 nodes and 3.0 GPU" in three.fix and "TP x PP (3)" in three.cause
    general = diagnose([line])
    assert "it must list every node and TP x PP GPUs" in general.fix
    assert "{" not in general.fix + general.cause
    hca = diagnose(
        ["ibv_modify_qp failed with 110 (Connection timed out)"], words=cluster_words(3, 3)
    )
    assert "all 3 nodes" in hca.fix and "both nodes" not in hca.fix
