"""What can go wrong in a multi-node vLLM launch, as data, and the engine that finds it in a log.

`SIGNATURES` is the one table of known failures (from the "Known failure signatures" table of
the multi-node reference, plus the launcher's own errors). Each row says which log message
shows the failure, whether it is the *cause* or only a *symptom* (EngineDeadError and friends
say the engine died, not why), whether it is *fatal* (the launch or the engine has failed) or a
finding worth reporting (traffic over NET/Socket instead of RDMA), and, for the operator, what
failed, why, and what to change.

To add a failure: append a `FailureSignature` to `SIGNATURES` (or, as an operator, list it in
the knowledge file named by the config's `knowledge:`; `with_knowledge` puts it first). Patterns are searched (not
anchored) in the message after `logtext.clean_line` + `logtext.strip_prefixes`, so write them
against the bare message. When several rows match one line, the first row in the table wins:
keep specific rows above general ones. `title`, `cause` and `fix` may name a pattern's named
groups as `{name}`; they are filled from the matching line.

The engine: `diagnose(lines)` for a whole log, `LogDiagnoser` for a stream, `unrecognised`
for a death no signature explains. A diagnosis prefers the FIRST fatal cause in the log over
any later symptom (an OOM followed by a traceback and EngineDeadError is an OOM). No I/O.
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Iterable
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from cluster.config import ClusterConfig, Knowledge
from cluster.logtext import clean_line, is_nccl_line, strip_prefixes

__all__ = [
    "Role",
    "KnownFailure",
    "FailureSignature",
    "Diagnosis",
    "SIGNATURES",
    "NCCL_INIT_HANG",
    "STALLED",
    "UNRECOGNISED",
    "match_line",
    "with_knowledge",
    "cluster_words",
    "for_cluster",
    "diagnose",
    "LogDiagnoser",
    "unrecognised",
]

Role = Literal["cause", "symptom"]

CONTEXT_LINES = 5  # cleaned lines kept before the evidence in a Diagnosis
STALL_WINDOW = 5  # last non-empty lines examined by diagnose_stall
UNRECOGNISED_TAIL = 20  # last lines attached to an unrecognised failure


class KnownFailure(BaseModel):
    """A failure the bot can name: what failed, why, and what the operator should change."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str = Field(pattern=r"^[a-z][a-z0-9_]*$", max_length=48)
    role: Role
    fatal: bool
    title: str
    cause: str
    fix: str


class FailureSignature(KnownFailure):
    """A known failure recognisable from one log line.

    `pattern` is searched in the cleaned, prefix-stripped message. If `after` is set the line
    only counts when it, or one of the `window` messages before it (traceback source lines
    included), matches `after`: for errors split over lines, such as a bare `TimeoutError`
    raised in shm_broadcast.py, or `FileNotFoundError` raised by `SemLock(...)`."""

    pattern: re.Pattern[str]
    after: re.Pattern[str] | None = None
    window: int = Field(10, ge=1, le=200)
    source: str = Field("", description="where the line comes from: release and file, issue, lab")


class Diagnosis(BaseModel):
    """What failed, the log line that shows it, the probable cause and the fix."""

    model_config = ConfigDict(frozen=True)

    signature_id: str
    title: str
    cause: str
    fix: str
    evidence: str = Field(description="the cleaned line, prefixes kept (shows rank/node)")
    line_number: int | None = Field(description="1-based line number in the fed log")
    role: Role
    fatal: bool = True
    context: list[str] = Field(default_factory=list, description="cleaned lines before")


def _re(pattern: str, flags: int = 0) -> re.Pattern[str]:
    return re.compile(pattern, flags)


_SAME_IMAGE_FIX = (
    "Run the identical image on every node: compare `docker image inspect -f '{{.Id}}' <image>` "
    "on head and worker, pull or load the same image ID on both, then relaunch."
)
_NCCL_HANG_FIX = (
    "Use an image whose NCCL is >= 2.29.3 or the system libnccl (NCCL 2.28.x hangs on ARM): "
    "e.g. rebuild the image, or set LD_PRELOAD to the system libnccl.so.2; then relaunch."
)

# fmt: off
SIGNATURES: tuple[FailureSignature, ...] = (
    # --- launcher / cluster formation ---------------------------------------------------------
    FailureSignature(
        id="docker_image_mismatch", role="cause", fatal=True,
        pattern=_re(r"Docker image mismatch on worker node"),
        title="Docker image differs between nodes",
        cause="The head and a worker have different image IDs for the same image name.",
        fix=_SAME_IMAGE_FIX,
    ),
    FailureSignature(
        id="ray_gcs_connect_failed", role="cause", fatal=True,
        pattern=_re(r"Failed to connect to GCS at address:? ?(?P<address>\[?[\w.:-]*[\w\]])"),
        title="Ray worker could not reach the head (GCS at {address})",
        cause="Link or IP problem between the nodes (cable, wrong fabric IP, port 6379 "
              "blocked), or Ray missing from the image on one node; `ray status` then shows 1 node.",
        fix="Check the QSFP cable and that the worker can reach {address} (`ping`, `nc -zv` to "
            "port 6379) over the fabric interface; make sure --node-ip-address/VLLM_HOST_IP are "
            "the fabric IPs; run the same image (with Ray) on {every_node}.",
    ),
    FailureSignature(
        id="ray_version_mismatch", role="cause", fatal=True,
        pattern=_re(r"Version mismatch: The cluster was started with"),
        title="Ray/Python version differs between nodes",
        cause="The nodes run different images (different Ray or Python versions).",
        fix=_SAME_IMAGE_FIX,
    ),
    FailureSignature(
        id="dist_store_timeout", role="cause", fatal=True,
        pattern=_re(r"\bDistStoreError\b|waiting for clients\. \d+/\d+ clients joined"),
        title="torch.distributed store timed out: not every node joined",
        cause="Multiprocessing backend: the worker node (rank 1) never reached the head's "
              "store at --master-addr:--master-port.",
        fix="Check the worker can reach --master-addr on --master-port (`nc -zv <head ip> 29501`; "
            "fabric IP, not a loopback/docker address); start the worker (--node-rank 1 "
            "--headless) before the head; use the same --master-addr/--master-port on both.",
    ),
    FailureSignature(
        id="ray_no_node_types", role="cause", fatal=True,
        pattern=_re(r"No available node types can fulfill resource request"),
        title="Ray cannot place vLLM's workers on the expected node",
        cause="Ray and vLLM disagree on the node IP (several NICs: Ray registered one address, "
              "vLLM asks for another).",
        fix="Set VLLM_HOST_IP (and RAY_NODE_IP_ADDRESS / --node-ip-address) on each node to that "
            "node's fabric IP, the same address Ray uses; use the SPREAD placement strategy.",
    ),
    FailureSignature(
        id="ray_placement_group_timeout", role="cause", fatal=True,
        pattern=_re(r"Cannot provide a placement group"
                    r"|number of required GPUs exceeds the total number of available GPUs"),
        title="Ray has fewer GPUs than tensor-parallel x pipeline-parallel",
        cause="The worker node has not joined the Ray cluster, or its GPU is not exposed to "
              "the container, so Ray sees fewer GPUs than {world_size}.",
        fix="Run `ray status` on the head: it must list {node_count} and {gpus}. Start/restart the "
            "worker's `ray start --address=<head ip>:6379`; run every container with `--gpus all`.",
    ),
    FailureSignature(
        id="ray_placement_group_waiting", role="symptom", fatal=False,
        pattern=_re(r"Waiting for creating a placement group"),
        title="vLLM is still waiting for Ray to provide GPUs",
        cause="Ray does not (yet) see enough GPUs, or the node IPs of Ray and vLLM differ.",
        fix="Check `ray status` ({node_count}, {gpus}) and that VLLM_HOST_IP on each node equals the "
            "IP Ray registered for it.",
    ),
    # --- vLLM arguments and model ---------------------------------------------------------------
    FailureSignature(
        id="vllm_unrecognized_arguments", role="cause", fatal=True,
        pattern=_re(r"error: unrecognized arguments: ?(?P<args>\S.*)"),
        title="vLLM rejected unknown command-line flags: {args}",
        cause="This image's vLLM version does not know these flags: {args}.",
        fix="Remove the flags ({args}) or rename them to this vLLM version's spelling "
            "(`vllm serve --help` in the image lists them), then relaunch.",
    ),
    FailureSignature(
        id="vllm_invalid_argument", role="cause", fatal=True,
        pattern=_re(r"error: argument (?P<arg>[^\s:]+(?:/[^\s:]+)*): (?P<reason>.+)"),
        title="vLLM rejected the value of {arg}",
        cause="The value given for {arg} is not accepted by this vLLM version: {reason}.",
        fix="Correct {arg} in the serve arguments (`vllm serve --help` in the image lists the "
            "accepted values), then relaunch.",
    ),
    FailureSignature(
        id="tp_not_divisible", role="cause", fatal=True,
        pattern=_re(r"Total number of attention heads \((?P<heads>\d+)\) must be divisible by "
                    r"tensor parallel size \((?P<tp>\d+)\)"),
        title="Tensor-parallel size {tp} does not divide the model's {heads} attention heads",
        cause="The model's {heads} attention heads cannot be split over {tp} GPUs.",
        fix="Set --tensor-parallel-size to a divisor of {heads} (2 for two Sparks).",
    ),
    FailureSignature(
        id="model_arch_unsupported", role="cause", fatal=True,
        pattern=_re(r"Model architectures (?P<arch>\[.*?\]) are not supported"),
        title="The image's vLLM does not support model architecture {arch}",
        cause="The image's vLLM is too old for this model.",
        fix="Use an image with a newer vLLM that supports {arch} (for Qwen3.5, e.g. "
            "hellohal2064/vllm-qwen3.5-gb10), on {every_node}.",
    ),
    FailureSignature(
        id="hf_gated_repo", role="cause", fatal=True,
        pattern=_re(r"Cannot access gated repo|\bGatedRepoError\b"),
        title="The model is gated on Hugging Face and no valid token was given",
        cause="The model repo is gated: it needs an accepted licence and a token.",
        fix="Accept the model's licence on huggingface.co, set HF_TOKEN (the secret) for the "
            "containers on {every_node}; or point the model at a local path already downloaded.",
    ),
    FailureSignature(
        id="hf_repo_not_found", role="cause", fatal=True,
        pattern=_re(r"Repository Not Found|\bRepositoryNotFoundError\b"),
        title="Model repository not found on Hugging Face",
        cause="The model id is wrong, or the repo is private/gated and no token was given.",
        fix="Check the model id (owner/name, exact spelling and case); if it is private or "
            "gated set HF_TOKEN; or point the model at the local path in the mounted HF cache.",
    ),
    FailureSignature(
        id="hf_unauthorized", role="cause", fatal=True,
        pattern=_re(r"\b401 Client Error\b"),
        title="Hugging Face refused the download (401 Unauthorized)",
        cause="The model id is wrong, or the model is gated/private and HF_TOKEN is missing "
              "or invalid.",
        fix="Check the model id; set a valid HF_TOKEN with access to the model; or point the "
            "model at a local path.",
    ),
    FailureSignature(
        id="hf_bad_repo_id", role="cause", fatal=True,
        pattern=_re(r"Repo id must be in the form|\bHFValidationError\b"),
        title="Model is neither a local path nor a valid Hugging Face id",
        cause="The model argument is not an existing path inside the container, so it was read "
              "as a repo id, and it is not of the form owner/name.",
        fix="Check the model id (owner/name); if it is a local path, mount it into the "
            "container at that path on {every_node}.",
    ),
    # --- memory ----------------------------------------------------------------------------------
    FailureSignature(
        id="free_memory_below_utilization", role="cause", fatal=True,
        pattern=_re(r"Free memory on device .*?on startup is less than desired GPU memory "
                    r"utilization"),
        title="Not enough free memory for --gpu-memory-utilization at startup",
        cause="GB10 unified memory is held by the page cache or other processes, so less is "
              "free than --gpu-memory-utilization asks for.",
        fix="Lower --gpu-memory-utilization to 0.7-0.85; drop caches on {every_node} "
            "(`sync; echo 3 | sudo tee /proc/sys/vm/drop_caches`) and stop other GPU processes.",
    ),
    FailureSignature(
        id="cuda_oom", role="cause", fatal=True,
        pattern=_re(r"\btorch\.(?:cuda\.)?OutOfMemoryError\b|CUDA out of memory"),
        title="CUDA out of memory",
        cause="Memory exhausted while loading weights, profiling or sampling.",
        fix="Lower --gpu-memory-utilization, --max-model-len and/or --max-num-seqs, then relaunch.",
    ),
    FailureSignature(
        id="host_oom_killed", role="cause", fatal=True,
        pattern=_re(r"Out of memory: Killed process|\boom-kill\b|\boom_reaper\b"),
        title="The kernel OOM killer killed a process",
        cause="Unified memory ran out: --gpu-memory-utilization is not a hard cap while "
              "profiling on GB10, so the host ran out of memory.",
        fix="Lower --max-model-len and/or --max-num-seqs (and --gpu-memory-utilization); drop "
            "caches before launching.",
    ),
    FailureSignature(
        id="kv_cache_too_small", role="cause", fatal=True,
        pattern=_re(r"max seq len \((?P<max_len>\d+)\) is larger than the maximum number of "
                    r"tokens that can be stored in KV cache"
                    r"|KV cache is needed, which is larger than the available KV cache memory"),
        title="KV cache too small for --max-model-len",
        cause="The KV cache that fits in memory cannot hold one sequence of --max-model-len tokens.",
        fix="Raise --gpu-memory-utilization or lower --max-model-len.",
    ),
    # --- NCCL / RDMA / Gloo -------------------------------------------------------------------------
    FailureSignature(
        id="ibv_modify_qp_no_device", role="cause", fatal=True,
        pattern=_re(r"ibv_modify_qp failed with (?:error )?No such device|ibv_modify_qp failed "
                    r"with 19\b"),
        title="RDMA device in NCCL_IB_HCA is not usable in the container",
        cause="The RDMA device named in NCCL_IB_HCA is not usable inside the container.",
        fix="Run `ibdev2netdev` on each node and set NCCL_IB_HCA to the devices that are (Up); "
            "pass the devices into the container (`--privileged` or `--device=/dev/infiniband "
            "--cap-add=IPC_LOCK`).",
    ),
    FailureSignature(
        id="ibv_modify_qp_timeout", role="cause", fatal=True,
        pattern=_re(r"ibv_modify_qp failed with 110\b"),
        title="RDMA connection between the nodes timed out",
        cause="NCCL chose the wrong HCA or subnet for the RoCE connection.",
        fix="Set NCCL_IB_SUBNET_AWARE_ROUTING=1 and NCCL_IB_MERGE_NICS=0 on {every_node}; check "
            "NCCL_IB_HCA lists only the (Up) RoCE devices on the same subnet.",
    ),
    FailureSignature(
        id="nccl_unhandled_system_error", role="cause", fatal=True,
        pattern=_re(r"NCCL error\b.*unhandled system error|\bncclSystemError\b"),
        title="NCCL failed to initialise (unhandled system error)",
        cause="Missing IPC_LOCK capability or /dev/shm in the container, or the RoCE GID index "
              "differs between the nodes.",
        fix="Run the containers with `--cap-add=IPC_LOCK` (or `--privileged`) and `--ipc=host` "
            "(or `--shm-size=64g`); leave NCCL_IB_GID_INDEX unset.",
    ),
    FailureSignature(
        id="nccl_watchdog_timeout", role="cause", fatal=True,
        pattern=_re(r"Watchdog caught collective operation timeout"),
        title="NCCL collective hung (watchdog timeout)",
        cause="NCCL 2.28.x hangs on ARM: a collective never completed and the watchdog "
              "killed the process (typically 20-55 min after ready).",
        fix=_NCCL_HANG_FIX,
    ),
    FailureSignature(
        id="nccl_error", role="cause", fatal=True,
        pattern=_re(r"\bNCCL error\b|\bnccl(?:InternalError|RemoteError|UnhandledCudaError|"
                    r"InvalidUsage)\b|\bDistBackendError\b"),
        title="NCCL communication failed",
        cause="NCCL reported an error between the nodes (RDMA/RoCE setup or a peer that died).",
        fix="Relaunch with NCCL_DEBUG=INFO and read the `NCCL WARN` lines before this one; "
            "check `ibdev2netdev` (Up), NCCL_IB_HCA and NCCL_SOCKET_IFNAME on {every_node}.",
    ),
    FailureSignature(
        id="gloo_interface_missing", role="cause", fatal=True,
        pattern=_re(r"Unable to find address for: ?(?P<iface>[\w.@-]+)"),
        title="Gloo cannot use network interface {iface}",
        cause="GLOO_SOCKET_IFNAME names {iface}, an interface that does not exist (or has no "
              "IPv4 address) in this node's container.",
        fix="Set GLOO_SOCKET_IFNAME (and NCCL_SOCKET_IFNAME) to the fabric interface that holds "
            "the node's fabric IP (`ip -o -4 addr` on the node), or leave them out of "
            "container.env so spark-bot sets the interface it detects (network.eth_if).",
        source="gloo transport/tcp/device.cc `ifa != nullptr. Unable to find address for: ...` "
               "(torch 2.13 CPU); seen in the lab's real engine, vLLM 0.32 mp, on the headless rank",
    ),
    FailureSignature(
        id="gloo_connect_failed", role="cause", fatal=True,
        pattern=_re(r"Gloo connectFullMesh failed"),
        title="Gloo could not connect the nodes",
        cause="Gloo bound to the wrong network interface (hostname did not resolve to the "
              "fabric address).",
        fix="Set GLOO_SOCKET_IFNAME to the fabric interface name (e.g. enp1s0f1np1) and "
            "VLLM_HOST_IP to the node's fabric IP on {every_node}.",
    ),
    FailureSignature(
        id="gloo_hostname_unresolved", role="cause", fatal=False,
        pattern=_re(r"Unable to resolve hostname"),
        title="Hostname did not resolve; torch fell back to loopback",
        cause="Wrong interface: no GLOO_SOCKET_IFNAME, so Gloo may bind to loopback.",
        fix="Set GLOO_SOCKET_IFNAME to the fabric interface name and VLLM_HOST_IP to the "
            "node's fabric IP.",
    ),
    FailureSignature(
        id="nccl_ib_no_device", role="cause", fatal=False,
        pattern=_re(r"NET/IB : No device found"),
        title="NCCL found no RDMA device: traffic goes over TCP sockets (slow)",
        cause="The RDMA devices are not visible inside the container.",
        fix="Run the containers with `--privileged`, or `--device=/dev/infiniband "
            "--cap-add=IPC_LOCK`; set NCCL_IB_HCA to the (Up) devices from `ibdev2netdev`.",
    ),
    FailureSignature(
        id="nccl_net_socket", role="cause", fatal=False,
        pattern=_re(r"via NET/Socket|Using network Socket\b"),
        title="NCCL uses TCP sockets instead of RDMA (slow)",
        cause="The RDMA devices are not visible inside the container.",
        fix="Run the containers with `--privileged`, or `--device=/dev/infiniband "
            "--cap-add=IPC_LOCK`; set NCCL_IB_HCA to the (Up) devices from `ibdev2netdev`.",
    ),
    # --- multiprocessing backend ----------------------------------------------------------------
    FailureSignature(
        id="mp_semlock_across_nodes", role="cause", fatal=True,
        pattern=_re(r"No such file or directory"),
        after=_re(r"\bSemLock\b"), window=8,
        title="vLLM worker failed on a shared-memory lock (SemLock)",
        cause="The single-node multiprocessing backend was used across nodes.",
        fix="Use the multi-node flags (--nnodes 2, --node-rank 0/1, --master-addr, "
            "--headless on the worker) or the Ray backend (--distributed-executor-backend ray).",
    ),
    FailureSignature(
        id="workerproc_init_failed", role="symptom", fatal=True,
        pattern=_re(r"WorkerProc initialization failed"),
        title="A vLLM worker process failed to start",
        cause="A worker process died during start-up; the cause is in the lines before. With "
              "a SemLock / `No such file or directory` error: the single-node multiprocessing "
              "backend was used across nodes.",
        fix="Read the earlier lines; for SemLock / `No such file or directory` use the "
            "multi-node flags (--nnodes, --node-rank, --headless) or Ray.",
    ),
    # --- ports ----------------------------------------------------------------------------------------
    FailureSignature(
        id="port_in_use", role="cause", fatal=True,
        pattern=_re(r"address already in use|\bEADDRINUSE\b", re.IGNORECASE),
        title="Port already in use",
        cause="Another process holds the port (often an earlier vLLM server or container "
              "still running).",
        fix="Stop the old server/container (`docker ps`; `docker rm -f <name>`; `ss -ltnp` shows "
            "the holder), or choose another --port (or --master-port), then relaunch.",
    ),
    # --- engine death (symptoms: the cause is earlier) -------------------------------------------------
    FailureSignature(
        id="shm_broadcast_timeout", role="symptom", fatal=True,
        pattern=_re(r"^TimeoutError\b(?!.*RPC call)"),
        after=_re(r"shm_broadcast\.py"), window=12,
        title="vLLM workers stopped answering (shm_broadcast TimeoutError)",
        cause="The engine's workers stopped answering, often because of the NCCL hang "
              "(NCCL 2.28.x on ARM).",
        fix=_NCCL_HANG_FIX,
    ),
    FailureSignature(
        id="shm_broadcast_timeout_rpc", role="symptom", fatal=True,
        pattern=_re(r"TimeoutError.*shm_broadcast|shm_broadcast.*TimeoutError"
                    r"|RPC call to \w+ timed out"),
        title="vLLM workers stopped answering (timeout)",
        cause="The engine's workers stopped answering, often because of the NCCL hang "
              "(NCCL 2.28.x on ARM).",
        fix=_NCCL_HANG_FIX,
    ),
    FailureSignature(
        id="shm_broadcast_waiting", role="symptom", fatal=False,
        pattern=_re(r"No available shared memory broadcast block found in \d+ seconds?"),
        title="vLLM workers are not answering (shared memory broadcast wait)",
        cause="The engine's workers stopped answering, often because of the NCCL hang "
              "(NCCL 2.28.x on ARM); it can also be a long compilation.",
        fix="If it repeats: " + _NCCL_HANG_FIX,
    ),
    FailureSignature(
        id="ray_worker_crashed", role="cause", fatal=True,
        pattern=_re(r"\*\*\* SIG(?:BUS|SEGV|ABRT|ILL|KILL) received|"
                    r"A worker died or was killed while executing a task"),
        title="A Ray worker process crashed",
        cause="A vLLM worker process was killed by a signal (a crash such as SIGBUS/SIGSEGV, or "
              "the OOM killer); the `ip=` in the line names its node.",
        fix="On the node named by `ip=`: `dmesg -T | grep -iE 'oom|killed'` and free memory; read "
            "that node's container log; lower --gpu-memory-utilization if memory ran out; relaunch.",
    ),
    FailureSignature(
        id="ray_actor_died", role="symptom", fatal=True,
        pattern=_re(r"\bActorDiedError\b|The actor died unexpectedly"),
        title="A Ray worker process died",
        cause="A vLLM worker actor crashed, was OOM-killed, or its node left the cluster; the "
              "cause is in the lines before (often from the other node's worker).",
        fix="Read the earlier lines of that worker (its `(RayWorkerWrapper pid=..., ip=...)` "
            "prefix names the node); check `dmesg` on that node for the OOM killer; restart.",
    ),
    FailureSignature(
        id="engine_start_failed", role="symptom", fatal=True,
        pattern=_re(r"EngineCore failed to start|Engine core initialization failed"),
        title="vLLM engine failed to start",
        cause="The engine process failed during start-up; the cause is in the lines before.",
        fix="Read the earlier lines (attached) for the first error; fix it and relaunch.",
    ),
    FailureSignature(
        id="engine_dead", role="symptom", fatal=True,
        pattern=_re(r"\bEngineDeadError\b|EngineCore encountered a fatal error"
                    r"|AsyncLLM output_handler failed"),
        title="vLLM engine died",
        cause="The engine process died; the cause is in the lines before.",
        fix="Read the earlier lines (attached) for the first error; restart the server.",
    ),
)
# fmt: on

# A requested stop (SIGTERM, SIGINT): the teardown after it (EngineDeadError from AsyncLLM's
# output_handler, a headless rank losing its master, Ray's workers going) is no failure.
# (pattern, where the line comes from); sources: vLLM's PyPI wheels 0.6.0 to 0.33.0.
SHUTDOWN_MARKERS: tuple[tuple[re.Pattern[str], str], ...] = (
    (_re(r"^\[shutdown\] EngineCore: trigger received signal="), "vLLM 0.23.0+ v1/engine/core.py"),
    (_re(r"^\[shutdown\] API server: shutdown triggered"),
     "vLLM 0.23.0+ entrypoints/launcher.py (launchers/launcher.py from 0.29.0)"),
    (_re(r"^Received KeyboardInterrupt, shutting down"), "vLLM 0.9.1+ v1/utils.py"),
)
# Only the lines a signal triggers: the rest of the `[shutdown]` family (`Executor: waiting for
# worker exit`, `MPClient: ...`) is also printed while a failed start-up tears down. Older
# releases say nothing of a signal; Docker's kill event (cluster.monitor.StopRequested) does.

NCCL_INIT_HANG = KnownFailure(
    id="nccl_init_hang",
    role="cause",
    fatal=True,
    title="NCCL initialisation hang",
    cause="NCCL printed its initialisation lines, then went silent: NCCL initialisation hang "
    "(RoCE link, interface or GID problem between the nodes).",
    fix="Check the RoCE link (`ibdev2netdev` shows (Up) on {every_node}), the interfaces and the "
    "GID index (leave NCCL_IB_GID_INDEX unset); set NCCL_IB_HCA to the (Up) RoCE devices and "
    "NCCL_SOCKET_IFNAME to the fabric interface on {every_node}; relaunch with NCCL_DEBUG=INFO.",
)

RANKS_NOT_JOINED = KnownFailure(
    id="ranks_not_joined",
    role="cause",
    fatal=True,
    title="Rank 0 waits for the other ranks to join",
    cause="Rank 0 opened the distributed store at {address} for a world of {world} ranks, then went "
    "silent: the other ranks never joined (a worker's `vllm serve` did not start, is stuck, or "
    "cannot reach {address}).",
    fix="Read the worker nodes' logs (`spark-bot logs WORKER`) and check their containers run; "
    "check that {address} is reachable from every worker (fabric link, firewall, the master "
    "address and port); then relaunch.",
)
# vLLM's distributed/parallel_state.py logs this as each rank initialises (every release since
# 0.6; 0.32: parallel_state.py:1906); the group is formed once "is assigned as DP rank" follows.
_RANK0_INIT = re.compile(
    r"world_size=(?P<world>[2-9]|\d{2,}) rank=0 .*distributed_init_method=(?:tcp://)?(?P<address>[\w.:\[\]-]+)")
_GROUP_FORMED = re.compile(r"is assigned as DP rank|rank 0 in world size")

STALLED = KnownFailure(
    id="stalled",
    role="symptom",
    fatal=True,
    title="Stalled in {phase}",
    cause="No output for {idle} in {phase}; the last line is the last thing that happened.",
    fix="Look at the log tail (attached) for what it was doing; if {phase} is legitimately "
    "slow (loading ~119 GB of weights, compiling, capturing CUDA graphs), raise the stall "
    "timeout.",
)

UNRECOGNISED = KnownFailure(
    id="unrecognised",
    role="symptom",
    fatal=True,
    title="Failed in {where} (unrecognised error)",
    cause="{where} failed with no known failure signature. Likely cause, the first error in the "
    "log: {first_error}",
    fix="Check what that error names (a missing file or library, a flag, an address, a "
    "permission); the last lines of the log are attached. To share it: save the container log "
    "(`spark-bot logs NODE --lines 500`) and run `spark-bot diagnose FILE` on it.",
)

# The first error of a log no signature explains: a Python exception line (`SomethingError:
# message`, dotted names included), else a line logged at ERROR level (vLLM's, Ray's, glog's).
_EXCEPTION_LINE = re.compile(r"^(?:[A-Za-z_]\w*\.)*[A-Z]\w*(?:Error|Exception|Exit|Interrupt)(?::\s|$)")
_TRACEBACK_NOISE = re.compile(r"^(?:Traceback \(most recent call last\)|File \"|\^+$|During handling|The above exception)")
_ERROR_LEVEL = re.compile(r"(?:^|[\s)\]])(?:ERROR|CRITICAL|FATAL)\b|^\[E\d{4} ")

_FIELD = re.compile(r"\{(\w+)\}")
_FRAME = re.compile(r'^\s*File "[^"]*", line \d+')


def _render(text: str, values: dict[str, str | None]) -> str:
    """Fill `{name}` from values; unknown names are left as they are (no format() surprises
    with braces in fixes)."""

    def sub(m: re.Match[str]) -> str:
        v = values.get(m.group(1))
        return v.strip() if isinstance(v, str) and v.strip() else m.group(0)

    return _FIELD.sub(sub, text)


def cluster_words(nodes: int | None = None, world_size: int | None = None) -> dict[str, str]:
    """What the texts' `{every_node}`, `{node_count}`, `{gpus}` and `{world_size}` say for this
    cluster (the config's node count and TP x PP), or in general when it is not known."""
    return {
        "every_node": "every node" if nodes is None else "both nodes" if nodes == 2 else f"all {nodes} nodes",
        "node_count": "every node" if nodes is None else f"{nodes} node{'' if nodes == 1 else 's'}",
        "gpus": "TP x PP GPUs" if world_size is None else f"{world_size:.1f} GPU",
        "world_size": "TP x PP" if world_size is None else f"TP x PP ({world_size})",
    }


def for_cluster(config: ClusterConfig) -> tuple[tuple[FailureSignature, ...], dict[str, str]]:
    """This cluster's failure table (its knowledge file's rows first) and the words its texts
    use, as `LogDiagnoser` and `diagnose` take them."""
    return with_knowledge(config.knowledge), cluster_words(len(config.nodes), config.serve.world_size)


def _diagnosis(
    known: KnownFailure,
    evidence: str,
    line_number: int | None,
    context: Iterable[str],
    values: dict[str, str | None] | None = None,
) -> Diagnosis:
    values = {**cluster_words(), **(values or {})}
    return Diagnosis(
        signature_id=known.id,
        title=_render(known.title, values),
        cause=_render(known.cause, values),
        fix=_render(known.fix, values),
        evidence=evidence,
        line_number=line_number,
        role=known.role,
        fatal=known.fatal,
        context=list(context),
    )


def with_knowledge(knowledge: Knowledge | None) -> tuple[FailureSignature, ...]:
    """The table an operator's knowledge file extends: its rows first (they are the newer,
    more specific knowledge), then the built-in ones."""
    if knowledge is None or not knowledge.signatures:
        return SIGNATURES
    taught = tuple(
        FailureSignature(
            id=row.id, role=row.role, fatal=row.fatal, title=row.title or row.id.replace("_", " "),
            cause=row.cause, fix=row.fix, pattern=re.compile(row.pattern),
            source=row.source or "the operator's knowledge file",
        )
        for row in knowledge.signatures
    )
    return taught + SIGNATURES


def match_line(
    message: str, previous: Iterable[str] = (), table: tuple[FailureSignature, ...] = SIGNATURES,
) -> tuple[FailureSignature, re.Match[str]] | None:
    """The first signature (table order) matching a prefix-stripped message, with its match.
    `previous` are the prefix-stripped messages before it (newest last), for `after` rows."""
    prev: list[str] | None = None
    for sig in table:
        m = sig.pattern.search(message)
        if not m:
            continue
        if sig.after is not None:
            if prev is None:
                prev = list(previous)
            if not sig.after.search(message) and not any(
                sig.after.search(p) for p in prev[-sig.window :]
            ):
                continue
        return sig, m
    return None


def _human_seconds(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


class LogDiagnoser:
    """Incremental diagnosis of a log stream, line by line, in bounded memory.

    `feed` returns a Diagnosis when a fatal line arrives (the same answer `diagnose` would give
    for everything fed so far: the first fatal cause, else the first fatal symptom), else None.
    Only the last `keep_lines` non-empty lines, the first fatal cause, the first fatal symptom
    and the first finding per signature are kept, however long the log."""

    def __init__(
        self, keep_lines: int = 200, table: tuple[FailureSignature, ...] = SIGNATURES,
        words: dict[str, str] | None = None,
    ) -> None:
        self._table = table
        self._words = words or cluster_words()
        self._keep = max(keep_lines, UNRECOGNISED_TAIL + 1, max(s.window for s in table))
        # (line_number, cleaned line, prefix-stripped message) of recent non-empty lines
        self._recent: deque[tuple[int, str, str]] = deque(maxlen=self._keep)
        self._line_number = 0
        self._first_cause: Diagnosis | None = None
        self._first_symptom: Diagnosis | None = None
        self._findings: dict[str, Diagnosis] = {}
        self._stop: str | None = None

    @property
    def line_count(self) -> int:
        """Lines fed so far (including empty ones)."""
        return self._line_number

    @property
    def findings(self) -> list[Diagnosis]:
        """Non-fatal matches seen (first occurrence of each signature), in log order."""
        return list(self._findings.values())

    @property
    def diagnosis(self) -> Diagnosis | None:
        """The current answer: first fatal cause, else first fatal symptom, else first finding."""
        if self._first_cause is not None:
            return self._first_cause
        if self._first_symptom is not None:
            return self._first_symptom
        return next(iter(self._findings.values()), None)

    @property
    def failed(self) -> bool:
        """True once a fatal line has been seen."""
        return self._first_cause is not None or self._first_symptom is not None

    @property
    def stopped_on_request(self) -> str | None:
        """What showed a requested stop (a shutdown line, or the stop itself), if one came
        before any failure: everything after it is teardown."""
        return self._stop

    def request_stop(self, evidence: str) -> None:
        """The server was asked to stop (e.g. Docker's SIGTERM): what follows is teardown."""
        if self._stop is None and not self.failed:
            self._stop = evidence

    def tail(self, n: int = UNRECOGNISED_TAIL) -> list[str]:
        """The last `n` non-empty cleaned lines (at most `keep_lines`)."""
        if n <= 0:
            return []
        return [cleaned for _, cleaned, _ in list(self._recent)[-n:]]

    def feed(self, line: str) -> Diagnosis | None:
        self._line_number += 1
        cleaned = clean_line(line)
        if not cleaned.strip():
            return None
        message = strip_prefixes(cleaned)
        if self._stop is None and not self.failed and any(
                marker.search(message) for marker, _ in SHUTDOWN_MARKERS):
            self._stop = cleaned
        if self._stop is not None:
            self._recent.append((self._line_number, cleaned, message))
            return None
        # A traceback's source line (indented, right after `File "...", line N`) echoes code
        # such as `raise RuntimeError(f"NCCL error: ...")`: it shows no failure by itself.
        is_source = (
            message[:1].isspace()
            and bool(self._recent)
            and _FRAME.match(self._recent[-1][2]) is not None
        )
        found = None if is_source else match_line(message, (m for _, _, m in self._recent), self._table)
        result: Diagnosis | None = None
        if found is not None:
            sig, m = found
            context = [c for _, c, _ in list(self._recent)[-CONTEXT_LINES:]]
            if sig.fatal:
                if sig.role == "cause" and self._first_cause is None:
                    self._first_cause = _diagnosis(
                        sig, cleaned, self._line_number, context, {**self._words, **m.groupdict()}
                    )
                elif sig.role == "symptom" and self._first_symptom is None:
                    symptom = _diagnosis(sig, cleaned, self._line_number, context, {**self._words, **m.groupdict()})
                    earlier = first_error(c for _, c, _ in self._recent)
                    if earlier is not None:  # no known cause: name the first error before it
                        symptom = symptom.model_copy(update={"cause": f"{symptom.cause} Likely cause "
                                 f"(unrecognised), the first error before it: `{strip_prefixes(earlier[1]).strip()[:300]}`"})
                    self._first_symptom = symptom
                result = self.diagnosis
            elif sig.id not in self._findings:
                self._findings[sig.id] = _diagnosis(
                    sig, cleaned, self._line_number, context, {**self._words, **m.groupdict()}
                )
        self._recent.append((self._line_number, cleaned, message))
        return result

    def diagnose_stall(self, phase: str, idle_seconds: float) -> Diagnosis:
        """Diagnosis for "no output for `idle_seconds` in `phase`": an NCCL initialisation hang
        when the last lines are NCCL's (the last non-empty line and most of the last
        STALL_WINDOW are), else a generic stall with the last line as evidence."""
        values = {**self._words, "phase": phase, "idle": _human_seconds(idle_seconds)}
        recent = list(self._recent)
        window = recent[-STALL_WINDOW:]
        nccl = [is_nccl_line(msg) for _, _, msg in window]
        if window and nccl[-1] and sum(nccl) * 2 > len(window):
            n, cleaned, _ = window[-1]
            before = [c for _, c, _ in recent[:-1][-CONTEXT_LINES:]]
            d = _diagnosis(NCCL_INIT_HANG, cleaned, n, before, values)
            return d.model_copy(
                update={"title": f"{d.title} (no output for {values['idle']} in {phase})"}
            )
        for index in range(len(recent) - 1, -1, -1):
            n, cleaned, message = recent[index]
            if _GROUP_FORMED.search(message):
                break
            waiting = _RANK0_INIT.search(message)
            if waiting:
                before = [c for _, c, _ in recent[:index][-CONTEXT_LINES:]]
                return _diagnosis(RANKS_NOT_JOINED, cleaned, n, before, {**values, **waiting.groupdict()})
        if recent:
            n, cleaned, _ = recent[-1]
            before = [c for _, c, _ in recent[:-1][-CONTEXT_LINES:]]
        else:
            n, cleaned, before = None, "(no output at all)", []
        return _diagnosis(STALLED, cleaned, n, before, values)


def diagnose(
    lines: Iterable[str], table: tuple[FailureSignature, ...] = SIGNATURES, words: dict[str, str] | None = None,
) -> Diagnosis | None:
    """Diagnose a whole log: the first fatal cause, else the first fatal symptom, else the
    first non-fatal finding, else None."""
    d = LogDiagnoser(table=table, words=words)
    for line in lines:
        d.feed(line)
    return d.diagnosis


def first_error(lines: Iterable[str]) -> tuple[int, str] | None:
    """(line number, cleaned line) of the likely cause of a failure no signature explains: the
    first exception line, else the first ERROR-level line."""
    error_level: tuple[int, str] | None = None
    for n, raw in enumerate(lines, start=1):
        cleaned = clean_line(raw)
        message = strip_prefixes(cleaned)
        if message[:1].isspace():  # a traceback's frame or source line
            continue
        if _EXCEPTION_LINE.match(message):
            return n, cleaned
        if error_level is None and _ERROR_LEVEL.search(cleaned) and message \
                and not _TRACEBACK_NOISE.match(message):
            error_level = n, cleaned
    return error_level


def unrecognised(lines: Iterable[str], where: str, tail: int = UNRECOGNISED_TAIL) -> Diagnosis:
    """Diagnosis for a death no signature explains: says where it happened and quotes the first
    error line as the likely cause (the evidence); the last `tail` non-empty cleaned lines are
    attached as context."""
    lines = list(lines)
    recent: deque[tuple[int, str]] = deque(maxlen=tail + 1)
    for n, raw in enumerate(lines, start=1):
        cleaned = clean_line(raw)
        if cleaned.strip():
            recent.append((n, cleaned))
    if not recent:
        return _diagnosis(UNRECOGNISED, "(no output)", None, [], {"where": where, "first_error": "none (no output)"})
    found = first_error(lines)
    n, evidence = found if found else recent[-1]
    first = f"`{strip_prefixes(evidence).strip()[:300]}` (line {n})" if found else "none found; the last line is attached"
    return _diagnosis(UNRECOGNISED, evidence, n, [c for _, c in list(recent)[:-1]],
                      {"where": where, "first_error": first})
