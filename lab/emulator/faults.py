"""Fault injection table (SPARK_EMU_FAULT=<name>).

Each fault: where it applies (serve / ray start), the phase where it strikes, the lines it
prints (as data: proc, level, source file, text; ``$name`` placeholders are filled from the
launch context), what happens afterwards (``action``) and its ``signature`` (the line a
diagnosis must find; it is printed verbatim, possibly with the placeholders filled).

proc: "api" = (APIServer pid=N), "engine" = (EngineCore_DP0 pid=N),
"local" = the local rank's prefix, "remote" = the remote rank's prefix as seen on this node,
"raylet" = (raylet, ip=...) Ray prefix, "plain" = no prefix.  level None = raw (traceback
text printed as is); otherwise the vLLM level+time+[file:line] prefix on every line.

actions: hang (print, then stay alive and silent), init_failed (engine core fails to start:
+ "Engine core initialization failed" tail, exit 1), engine_dead (EngineDeadError tail; /health
500 while lingering; exit 1), remote_died (the remote rank dies: Ray actor died / mp worker
lost, then engine dead, exit 1), exit1 (tool exits 1), slow (phases x time_factor),
serving_hang (generation stops, /health stays 200).
"""

ENGINE_CORE_TB_HEAD = """Traceback (most recent call last):
  File "$py/vllm/v1/engine/core.py", line 699, in run_engine_core
    engine_core = EngineCoreProc(*args, **kwargs)
  File "$py/vllm/v1/engine/core.py", line 498, in __init__
    super().__init__(vllm_config, executor_class, log_stats,
  File "$py/vllm/v1/engine/core.py", line 83, in __init__
    self.model_executor = executor_class(vllm_config)"""

NCCL_ERROR_TB = (
    ENGINE_CORE_TB_HEAD
    + """
  File "$py/vllm/executor/executor_base.py", line 54, in __init__
    self._init_executor()
  File "$py/vllm/v1/executor/ray_distributed_executor.py", line 97, in _init_executor
    self._init_workers_ray(placement_group)
  File "$py/vllm/v1/executor/ray_distributed_executor.py", line 371, in _init_workers_ray
    self._run_workers("init_device")
  File "$py/ray/_private/worker.py", line 2882, in get
    values, debugger_breakpoint = worker.get_objects(object_refs, timeout=timeout)
ray.exceptions.RayTaskError(RuntimeError): ray::RayWorkerWrapper.execute_method() (pid=$wpid, ip=$wip, actor_id=$actor, repr=<vllm.executor.ray_utils.RayWorkerWrapper object at 0xfffd2c1e5b50>)
  File "$py/vllm/worker/worker_base.py", line 628, in execute_method
    raise e
  File "$py/vllm/v1/worker/gpu_worker.py", line 190, in init_device
    init_worker_distributed_environment(self.vllm_config, self.rank,
  File "$py/vllm/distributed/parallel_state.py", line 1141, in initialize_model_parallel
    _TP = init_model_parallel_group(group_ranks,
  File "$py/vllm/distributed/device_communicators/pynccl.py", line 99, in __init__
    self.comm: ncclComm_t = self.nccl.ncclCommInitRank(
  File "$py/vllm/distributed/device_communicators/pynccl_wrapper.py", line 288, in ncclCommInitRank
    self.NCCL_CHECK(self._funcs["ncclCommInitRank"](ctypes.byref(comm),
  File "$py/vllm/distributed/device_communicators/pynccl_wrapper.py", line 264, in NCCL_CHECK
    raise RuntimeError(f"NCCL error: {error_str}")
RuntimeError: NCCL error: unhandled system error (run with NCCL_DEBUG=INFO for details)"""
)

# torch/cuda/__init__.py _check_capability, as torch 2.x words it ($archs: torch's arch list)
TORCH_INCOMPATIBLE_WARNING = """$py/torch/cuda/__init__.py:287: UserWarning:
NVIDIA GB10 with CUDA capability sm_121 is not compatible with the current PyTorch installation.
The current PyTorch install supports CUDA capabilities $archs.
If you want to use the NVIDIA GB10 GPU with PyTorch, please check the instructions at https://pytorch.org/get-started/locally/"""

NO_KERNEL_IMAGE_TB = (
    ENGINE_CORE_TB_HEAD
    + """
  File "$py/vllm/v1/engine/core.py", line 175, in _initialize_kv_caches
    available_gpu_memory = self.model_executor.determine_available_memory()
  File "$py/vllm/v1/worker/gpu_worker.py", line 263, in determine_available_memory
    self.model_runner.profile_run()
  File "$py/vllm/v1/worker/gpu_model_runner.py", line 3311, in profile_run
    hidden_states, last_hidden_states = self._dummy_run(
  File "$py/vllm/model_executor/layers/layernorm.py", line 186, in forward_cuda
    ops.fused_add_rms_norm(
  File "$py/vllm/_custom_ops.py", line 340, in fused_add_rms_norm
    torch.ops._C.fused_add_rms_norm(input, residual, weight, epsilon)
RuntimeError: CUDA error: no kernel image is available for execution on the device
CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below might be incorrect.
For debugging consider passing CUDA_LAUNCH_BLOCKING=1
Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions."""
)

LOW_MEMORY_TB = (
    ENGINE_CORE_TB_HEAD
    + """
  File "$py/vllm/v1/worker/gpu_worker.py", line 172, in init_device
    self.init_snapshot = MemorySnapshot()
  File "$py/vllm/v1/worker/gpu_worker.py", line 180, in init_device
    raise ValueError(
ValueError: Free memory on device cuda:0 ($free_gib/$total_gib GiB) on startup is less than desired GPU memory utilization ($gmu, $want_gib GiB). Decrease GPU memory utilization or reduce GPU memory used by other processes."""
)

GLOO_TB = (
    ENGINE_CORE_TB_HEAD
    + """
  File "$py/vllm/distributed/parallel_state.py", line 1025, in init_distributed_environment
    _WORLD = init_world_group(ranks, local_rank, backend)
  File "$py/vllm/distributed/parallel_state.py", line 898, in init_world_group
    return GroupCoordinator(
  File "$py/vllm/distributed/parallel_state.py", line 250, in __init__
    cpu_group = torch.distributed.new_group(ranks, backend="gloo")
  File "$py/torch/distributed/distributed_c10d.py", line 5012, in new_group
    return _new_group_with_tag(
  File "$py/torch/distributed/distributed_c10d.py", line 2014, in _new_process_group_helper
    backend_class = ProcessGroupGloo(
RuntimeError: Gloo connectFullMesh failed with [../third_party/gloo/gloo/transport/tcp/pair.cc:144] no error"""
)

OOM_TB = (
    ENGINE_CORE_TB_HEAD
    + """
  File "$py/vllm/v1/engine/core.py", line 175, in _initialize_kv_caches
    available_gpu_memory = self.model_executor.determine_available_memory()
  File "$py/vllm/v1/worker/gpu_worker.py", line 263, in determine_available_memory
    self.model_runner.profile_run()
  File "$py/vllm/v1/worker/gpu_model_runner.py", line 3311, in profile_run
    hidden_states, last_hidden_states = self._dummy_run(
  File "$py/vllm/model_executor/layers/fused_moe/layer.py", line 1702, in forward_impl
    final_hidden_states = self.quant_method.apply(
  File "$py/torch/utils/_device.py", line 104, in __torch_function__
    return func(*args, **kwargs)
torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 4.00 GiB. GPU 0 has a total capacity of $total_gib GiB of which 1.27 GiB is free. Including non-PyTorch memory, this process has 112.80 GiB memory in use. Of the allocated memory 106.41 GiB is allocated by PyTorch, and 3.62 GiB is reserved by PyTorch but unallocated. If reserved but unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation for Memory Management  (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)"""
)

WATCHDOG = (
    "[rank$rank]:[E$edate ProcessGroupNCCL.cpp:632] [Rank $rank] Watchdog caught collective "
    "operation timeout: WorkNCCL(SeqNum=$seq, OpType=_ALLGATHER_BASE, NumelIn=$numel, "
    "NumelOut=$numel2, Timeout(ms)=600000) ran for 600060 milliseconds before timing out."
)

LATE_DEATH_TB = """Traceback (most recent call last):
  File "$py/vllm/v1/engine/core.py", line 712, in run_engine_core
    engine_core.run_busy_loop()
  File "$py/vllm/v1/engine/core.py", line 739, in run_busy_loop
    self._process_engine_step()
  File "$py/vllm/v1/engine/core.py", line 764, in _process_engine_step
    outputs, model_executed = self.step_fn()
  File "$py/vllm/v1/executor/multiproc_executor.py", line 243, in collective_rpc
    result = get_response(w, dequeue_timeout)
  File "$py/vllm/distributed/device_communicators/shm_broadcast.py", line 507, in dequeue
    with self.acquire_read(timeout, cancel) as buf:
  File "$py/vllm/distributed/device_communicators/shm_broadcast.py", line 469, in acquire_read
    raise TimeoutError
TimeoutError"""

ACTOR_DIED_TB = """Traceback (most recent call last):
  File "$py/vllm/v1/engine/core.py", line 712, in run_engine_core
    engine_core.run_busy_loop()
  File "$py/vllm/v1/executor/ray_distributed_executor.py", line 305, in execute_model
    return self._run_workers("execute_model", scheduler_output)
  File "$py/ray/_private/worker.py", line 2882, in get
    values, debugger_breakpoint = worker.get_objects(object_refs, timeout=timeout)
  File "$py/ray/_private/worker.py", line 970, in get_objects
    raise value
ray.exceptions.ActorDiedError: The actor died unexpectedly before finishing this task.
	class_name: RayWorkerWrapper
	actor_id: $actor
	pid: $wpid
	namespace: $ns
	ip: $wip
The actor is dead because its node has died. Node Id: $node_id
	the actor's node was terminated unexpectedly: health check failed due to missing too many heartbeats"""

FAULTS = {
    "nccl_hang": {
        "where": "serve",
        "phase": "nccl_init",
        "action": "hang",
        "force_nccl_lines": True,
        "signature": "NCCL INFO ncclCommInitRank",
        "doc": "NCCL init lines (printed even without NCCL_DEBUG=INFO), then silence forever; process alive, API never up.",
        "lines": [],
    },
    "nccl_error": {
        "where": "serve",
        "phase": "nccl_init",
        "action": "init_failed",
        "signature": "RuntimeError: NCCL error: unhandled system error",
        "doc": "RuntimeError: NCCL error: unhandled system error raised in ncclCommInitRank (traceback), engine init fails, exit 1.",
        "lines": [
            (
                "remote",
                "ERROR",
                "worker_base.py:620",
                "Error executing method 'init_device'. This might cause deadlock in distributed execution.",
            ),
            ("engine", "ERROR", "core.py:708", "EngineCore failed to start.\n" + NCCL_ERROR_TB),
        ],
    },
    "low_memory": {
        "where": "serve",
        "phase": "worker_init",
        "action": "init_failed",
        "signature": "ValueError: Free memory on device cuda:0",
        "doc": "ValueError: Free memory on device cuda:0 (X/121.63 GiB) on startup is less than desired GPU memory utilization (0.9, Y GiB)..., exit 1.",
        "lines": [
            ("engine", "ERROR", "core.py:708", "EngineCore failed to start.\n" + LOW_MEMORY_TB)
        ],
    },
    "worker_died_loading": {
        "where": "serve",
        "phase": "load_weights",
        "action": "remote_died",
        "signature": "The actor died unexpectedly before finishing this task.",
        "doc": "Ray: the remote rank's RayWorkerWrapper dies while loading (raylet/actor died lines, ActorDiedError) then EngineDeadError; mp: rank 1 dies, rank 0 prints the lost-worker error then EngineDeadError. exit 1.",
        "lines": [],
    },
    "ray_worker_never_joins": {
        "where": "ray",
        "phase": "ray_start_worker",
        "action": "hang",
        "signature": "Cannot provide a placement group of",
        "doc": "On the worker: `ray start --address` hangs silently and never registers; the head's `vllm serve` then logs the placement-group wait lines and fails with ValueError: Cannot provide a placement group of ... within 1800 seconds.",
        "lines": [],
    },
    "gloo_iface": {
        "where": "serve",
        "phase": "dist_init",
        "action": "init_failed",
        "signature": "Gloo connectFullMesh failed",
        "doc": "[W ProcessGroupGloo.cpp] Unable to resolve hostname ... GLOO_SOCKET_IFNAME, then RuntimeError: Gloo connectFullMesh failed, exit 1.",
        "lines": [
            (
                "local",
                None,
                None,
                "[W$edate ProcessGroupGloo.cpp:516] Warning: Unable to resolve hostname to a (local) address. Using the loopback address as fallback. Manually set the network interface to bind to with GLOO_SOCKET_IFNAME. (function operator())",
            ),
            (
                "remote",
                None,
                None,
                "[E$edate ProcessGroupGloo.cpp:144] Gloo connectFullMesh failed with [../third_party/gloo/gloo/transport/tcp/pair.cc:144] no error",
            ),
            ("engine", "ERROR", "core.py:708", "EngineCore failed to start.\n" + GLOO_TB),
        ],
    },
    "ray_version_mismatch": {
        "where": "ray",
        "phase": "ray_start_worker",
        "action": "exit1",
        "ray_version": "2.48.0",
        "signature": "RuntimeError: Version mismatch: The cluster was started with:",
        "doc": "On the worker: `ray start --address` runs Ray 2.48.0 against a 2.49.1 head -> RuntimeError: Version mismatch ..., exit 1 (same as setting SPARK_EMU_RAY_VERSION differently on the nodes).",
        "lines": [],
    },
    "late_engine_death": {
        "where": "serve",
        "phase": "serving",
        "action": "engine_dead",
        "signature": "Watchdog caught collective operation timeout: WorkNCCL(",
        "doc": "Ready and serving; SPARK_EMU_FAULT_AFTER_S (real s, default 5) after ready: Watchdog caught collective operation timeout ... ran for 600060 milliseconds, TimeoutError from shm_broadcast, EngineDeadError; /health 500 for SPARK_EMU_DEAD_LINGER_S (default 3), then exit 1.",
        "lines": [
            ("local", None, None, WATCHDOG),
            (
                "local",
                None,
                None,
                "[rank$rank]:[E$edate ProcessGroupNCCL.cpp:2168] [PG ID 2 PG GUID 3 Rank $rank] First PG on this rank that detected no heartbeat of its watchdog.",
            ),
            (
                "engine",
                "WARNING",
                "shm_broadcast.py:466",
                "No available shared memory broadcast block found in 60 seconds. This typically happens when some processes are hanging or doing some time-consuming work (e.g. compilation)",
            ),
            (
                "engine",
                "ERROR",
                "core.py:721",
                "EngineCore encountered a fatal error.\n" + LATE_DEATH_TB,
            ),
        ],
    },
    "serving_hang": {
        "where": "serve",
        "phase": "serving",
        "action": "serving_hang",
        "signature": "No available shared memory broadcast block found in 60 seconds",
        "doc": "Ready and serving; SPARK_EMU_FAULT_AFTER_S (real s, default 5) after ready the engine stops generating: requests in flight get no further token, new ones none at all; /health stays 200; /metrics keeps the figures of the last step before the hang (vllm:num_requests_running and _waiting, vllm:generation_tokens_total and the rest stand still, as vLLM's API server records them only from the engine core's output), and the stats line prints once more at 0.0 tokens/s with those requests running, then falls silent as vLLM's idle rule has it; while a request is stuck, every 60 s (scaled) EngineCore warns: No available shared memory broadcast block found in 60 seconds (vLLM's shm_broadcast.py, as the real hang prints). Never exits.",
        "lines": [],
    },
    "slow_start": {
        "where": "serve",
        "phase": None,
        "action": "slow",
        "time_factor": 7.0,
        "signature": "Application startup complete.",
        "doc": "Every startup phase 7x longer (printed durations too); succeeds.",
        "lines": [],
    },
    "no_kernel_image": {
        "where": "serve",
        "phase": "profile",
        "action": "engine_dead",
        "signature": "no kernel image is available for execution on the device",
        "doc": "An image not built for the GPU, as it fails: the weights load, then the first kernel of the memory profile: torch's UserWarning (NVIDIA GB10 with CUDA capability sm_121 is not compatible ..., the image's archs from SPARK_EMU_TORCH_ARCHS), RuntimeError: CUDA error: no kernel image is available for execution on the device (traceback), EngineDeadError, exit 1.",
        "lines": [
            ("engine", None, None, TORCH_INCOMPATIBLE_WARNING),
            (
                "engine",
                "ERROR",
                "core.py:721",
                "EngineCore encountered a fatal error.\n" + NO_KERNEL_IMAGE_TB,
            ),
        ],
    },
    "oom": {
        "where": "serve",
        "phase": "profile",
        "action": "engine_dead",
        "signature": "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate",
        "doc": "During memory profiling: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 4.00 GiB ... (traceback), then EngineDeadError, exit 1.",
        "lines": [
            ("engine", "ERROR", "core.py:721", "EngineCore encountered a fatal error.\n" + OOM_TB)
        ],
    },
}

ENGINE_DEAD_TAIL = """AsyncLLM output_handler failed.
Traceback (most recent call last):
  File "$py/vllm/v1/engine/async_llm.py", line 439, in output_handler
    outputs = await engine_core.get_output_async()
  File "$py/vllm/v1/engine/core_client.py", line 846, in get_output_async
    raise self._format_exception(outputs) from None
vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue. See stack trace (above) for the root cause."""

INIT_FAILED_TAIL = """Traceback (most recent call last):
  File "/usr/local/bin/vllm", line 10, in <module>
    sys.exit(main())
  File "$py/vllm/entrypoints/cli/main.py", line 73, in main
    args.dispatch_function(args)
  File "$py/vllm/entrypoints/cli/serve.py", line 60, in cmd
    uvloop.run(run_server(args))
  File "$py/vllm/entrypoints/openai/api_server.py", line 1941, in run_server
    await run_server_worker(listen_address, sock, args, **uvicorn_kwargs)
  File "$py/vllm/entrypoints/openai/api_server.py", line 1961, in run_server_worker
    async with build_async_engine_client(
  File "$py/vllm/v1/engine/core_client.py", line 463, in __init__
    with launch_core_engines(vllm_config, executor_class,
  File "$py/vllm/v1/engine/utils.py", line 893, in wait_for_engine_startup
    raise RuntimeError("Engine core initialization failed. "
RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}"""


def get_fault(name):
    if not name:
        return None
    f = FAULTS.get(name)
    if f is None:
        return {"unknown": name}
    return f
