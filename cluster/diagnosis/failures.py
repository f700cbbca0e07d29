"""What can go wrong in a multi-node vLLM launch, as data: the one table of known failures.

`SIGNATURES` are the failures a log line shows (from the "Known failure signatures" table of
the multi-node reference, plus the launcher's own errors). Each row says which log message
shows the failure, whether it is the *cause* or only a *symptom* (EngineDeadError and friends
say the engine died, not why), whether it is *fatal* (the launch or the engine has failed) or a
finding worth reporting (traffic over NET/Socket instead of RDMA), and, for the operator, what
failed, why, and what to change. The rows after it are the failures the controller finds
without a log line (a stall, a missing image, a port in use, a phase timeout): their texts
live here too, so every cause and fix an operator reads is in this one module.

To add a failure: append a `FailureSignature` to `SIGNATURES` (or, as an operator, list it in
the knowledge file named by the config's `knowledge:`; `with_knowledge` puts it first). Patterns are searched (not
anchored) in the message after `logtext.clean_line` + `logtext.strip_prefixes`, so write them
against the bare message. When several rows match one line, the first row in the table wins:
keep specific rows above general ones. `title`, `cause` and `fix` may name a pattern's named
groups, or the cluster's words (`cluster_words`), as `{name}`; a row found without a log line
names the values its call site passes (`Reporter.known`).

The engine that reads logs with this table is `cluster.diagnosis.engine`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from cluster.config import ClusterConfig, Knowledge
from cluster.diagnosis.family_ids import FamilyId
from cluster.diagnosis.platform import NEUTRAL_WORDS
from cluster.events import Remedy

Role = Literal["cause", "symptom"]

_FIELD = re.compile(r"\{(\w+)\}")


class KnownFailure(BaseModel):
    """A failure the bot can name: what failed, why, and what the operator should change."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str = Field(pattern=r"^[a-z][a-z0-9_]*$", max_length=48)
    family: FamilyId = Field(description="the kind of root cause (cluster.diagnosis.families)")
    role: Role
    fatal: bool
    title: str
    cause: str
    fix: str
    source: str = Field(
        "", description="where the knowledge comes from: release and file, issue, lab"
    )
    remedy: Remedy | None = Field(
        None, description="the spark-bot command that fixes it (the CLI and the chat offer it)"
    )

    def render(self, values: Mapping[str, str | None]) -> tuple[str, str, str]:
        """Title, cause and fix with `{name}` filled from `values`; names without a value stay
        as they are (no format() surprises with braces in fixes)."""
        return _render(self.title, values), _render(self.cause, values), _render(self.fix, values)


class FailureSignature(KnownFailure):
    """A known failure recognisable from one log line.

    `pattern` is searched in the cleaned, prefix-stripped message. If `after` is set the line
    only counts when it, or one of the `window` messages before it (traceback source lines
    included), matches `after`: for errors split over lines, such as a bare `TimeoutError`
    raised in shm_broadcast.py, or `FileNotFoundError` raised by `SemLock(...)`."""

    pattern: re.Pattern[str]
    after: re.Pattern[str] | None = None
    window: int = Field(10, ge=1, le=200)
    survived: bool = Field(
        False,
        description="a line vLLM logs at ERROR (often with a traceback, `logger.exception`) and "
        "goes on from: it and the lines of its record (the same prefix) are no failure, and no "
        "exception in them is the root of a later one",
    )

    @model_validator(mode="after")
    def _survived_is_not_fatal(self) -> FailureSignature:
        if self.survived and self.fatal:
            raise ValueError(f"{self.id}: a survived line cannot be fatal")
        return self


def _re(pattern: str, flags: int = 0) -> re.Pattern[str]:
    return re.compile(pattern, flags)


_SAME_IMAGE_FIX = (
    "Run the identical image on every node: compare `docker image inspect -f '{{.Id}}' <image>` "
    "on head and worker, pull or load the same image ID on both, then relaunch."
)

# fmt: off
SIGNATURES: tuple[FailureSignature, ...] = (
    # --- launcher / cluster formation ---------------------------------------------------------
    FailureSignature(
        id="docker_image_mismatch", family="ray_cluster", role="cause", fatal=True,
        pattern=_re(r"Docker image mismatch on worker node"),
        title="Docker image differs between nodes",
        cause="The head and a worker have different image IDs for the same image name.",
        fix=_SAME_IMAGE_FIX,
        source='eugr/spark-vllm-docker launch-cluster.sh (`Error: Docker image mismatch on worker node`)',
    ),
    FailureSignature(
        id="ray_gcs_connect_failed", family="ray_cluster", role="cause", fatal=True,
        pattern=_re(r"(?:Failed|Unable) to connect to GCS at(?: address)?:? ?"
                    r"(?P<address>\[?[\w.:-]*[\w\]])"),
        title="Ray worker could not reach the head (GCS at {address})",
        cause="Link or IP problem between the nodes (cable, wrong fabric IP, port 6379 "
              "blocked), or Ray missing from the image on one node; `ray status` then shows 1 node.",
        fix="Check the QSFP cable and that the worker can reach {address} (`ping`, `nc -zv` to "
            "port 6379) over the fabric interface; make sure --node-ip-address/VLLM_HOST_IP are "
            "the fabric IPs; run the same image (with Ray) on {every_node}.",
        source="Ray 2.x gcs_rpc_client.h (`Failed to connect to GCS at address`); docs: the multi-node reference's failure table (public Spark launchers' issue trackers)",
    ),
    FailureSignature(
        id="ray_version_mismatch", family="ray_cluster", role="cause", fatal=True,
        pattern=_re(r"Version mismatch: The cluster was started with"),
        title="Ray/Python version differs between nodes",
        cause="The nodes run different images (different Ray or Python versions).",
        fix=_SAME_IMAGE_FIX,
        source="Ray 2.x python/ray/_private/utils.py check_version_info; docs: the multi-node reference's failure table (public Spark launchers' issue trackers)",
    ),
    FailureSignature(
        id="dist_store_timeout", family="distributed_init", role="cause", fatal=True,
        pattern=_re(r"\bDistStoreError\b|waiting for clients\. \d+/\d+ clients joined"),
        title="torch.distributed store timed out: not every node joined",
        cause="Multiprocessing backend: the worker node (rank 1) never reached the head's "
              "store at --master-addr:--master-port.",
        fix="Check the worker can reach --master-addr on --master-port (`nc -zv <head ip> 29501`; "
            "fabric IP, not a loopback/docker address); start the worker (--node-rank 1 "
            "--headless) before the head; use the same --master-addr/--master-port on both.",
        source="torch.distributed TCPStore (`waiting for clients. N/M clients joined`), vLLM mp multi-node; docs: the multi-node reference's failure table (public Spark launchers' issue trackers)",
    ),
    FailureSignature(
        id="ray_no_node_types", family="ray_cluster", role="cause", fatal=True,
        pattern=_re(r"No available node types can fulfill resource request"),
        title="Ray cannot place vLLM's workers on the expected node",
        cause="Ray and vLLM disagree on the node IP (several NICs: Ray registered one address, "
              "vLLM asks for another).",
        fix="Set VLLM_HOST_IP (and RAY_NODE_IP_ADDRESS / --node-ip-address) on each node to that "
            "node's fabric IP, the same address Ray uses; use the SPREAD placement strategy.",
        source="Ray autoscaler (`No available node types can fulfill resource request`); docs: the multi-node reference's failure table (public Spark launchers' issue trackers)",
    ),
    FailureSignature(
        id="ray_placement_group_timeout", family="ray_cluster", role="cause", fatal=True,
        pattern=_re(r"Cannot provide a placement group"
                    r"|number of required GPUs exceeds the total number of available GPUs"),
        title="Ray has fewer GPUs than tensor-parallel x pipeline-parallel",
        cause="The worker node has not joined the Ray cluster, or its GPU is not exposed to "
              "the container, so Ray sees fewer GPUs than {world_size}.",
        fix="Run `ray status` on the head: it must list {node_count} and {gpus}. Start/restart the "
            "worker's `ray start --address=<head ip>:6379`; run every container with `--gpus all`.",
        source="vLLM v1/executor/ray_utils.py _wait_until_pg_ready / initialize_ray_cluster; docs: the multi-node reference's failure table (public Spark launchers' issue trackers)",
    ),
    FailureSignature(
        id="ray_no_gpu_on_driver", family="ray_cluster", role="cause", fatal=True,
        pattern=_re(r"Ray does not allocate any GPUs on the driver node"),
        title="Ray gave the node that runs vLLM's driver no GPU",
        cause="The placement group holds no GPU on the node where `vllm serve` runs: the node IP "
              "vLLM uses (VLLM_HOST_IP) is not the one Ray registered, or that node's GPU is not "
              "in the cluster.",
        fix="Run `vllm serve` on a node Ray counts a GPU for; set VLLM_HOST_IP to the IP Ray "
            "registered for that node (`ray status`, `ray list nodes`).",
        source="vLLM V0 executor/ray_gpu_executor.py (0.6-0.10); corpus a-008",
    ),
    FailureSignature(
        id="ray_platform_unsupported", family="ray_cluster", role="cause", fatal=True,
        pattern=_re(r"current platform (?P<platform>\w+) does not support ray"),
        title="vLLM's {platform} platform refuses the Ray executor",
        cause="This vLLM's {platform} platform has no Ray device key, so it cannot place workers "
              "with Ray (`--distributed-executor-backend ray`).",
        fix="Use the multiprocessing backend (`--distributed-executor-backend mp`, with --nnodes / "
            "--node-rank / --headless across nodes), or an image whose platform supports Ray.",
        source="vLLM 0.32 v1/executor/ray_utils.py (initialize_ray_cluster); the lab's real engine "
               "started with Ray and without its device-key hook",
    ),
    FailureSignature(
        id="ray_node_marked_dead", family="ray_cluster", role="cause", fatal=True,
        pattern=_re(r"has been marked dead because the detector has missed too many heartbeats"),
        title="Ray lost a node (missed heartbeats)",
        cause="The head stopped hearing from a node's raylet: the node, its raylet or the network "
              "between the nodes failed (or is too busy to answer).",
        fix="Check the node named in the line (is its raylet running? `ray status`), the link "
            "between the nodes, and its memory; then relaunch.",
        source="Ray GCS health check (`(raylet) The node with node id ... has been marked dead "
               "because the detector has missed too many heartbeats`); corpus b-039",
    ),
    FailureSignature(
        id="ray_not_on_a_node", family="ray_cluster", role="cause", fatal=True,
        pattern=_re(r"Can't find a `node_ip_address\.json` file"),
        title="vLLM's Ray driver is not running on a node of the Ray cluster",
        cause="ray.init connected to an existing cluster (RAY_ADDRESS) from a machine or container "
              "where no `ray start` ran, so it finds no local node session.",
        fix="Run `vllm serve` on a node that joined the cluster with `ray start` (inside its "
            "container), or unset RAY_ADDRESS to start a local Ray instance.",
        source="Ray python/ray/_private/node.py (`Can't find a node_ip_address.json file from "
               "...`); corpus a-059",
    ),
    FailureSignature(
        id="ray_placement_group_waiting", family="ray_cluster", role="symptom", fatal=False,
        pattern=_re(r"Waiting for creating a placement group"),
        title="vLLM is still waiting for Ray to provide GPUs",
        cause="Ray does not (yet) see enough GPUs, or the node IPs of Ray and vLLM differ.",
        fix="Check `ray status` ({node_count}, {gpus}) and that VLLM_HOST_IP on each node equals the "
            "IP Ray registered for it.",
        source='vLLM v1/executor/ray_utils.py _wait_until_pg_ready (INFO, every 10 s)',
    ),
    # --- vLLM arguments and model ---------------------------------------------------------------
    FailureSignature(
        id="vllm_unrecognized_arguments", family="config_invalid", role="cause", fatal=True,
        pattern=_re(r"error: unrecognized arguments: ?(?P<args>\S.*)"),
        title="vLLM rejected unknown command-line flags: {args}",
        cause="This image's vLLM version does not know these flags: {args}.",
        fix="Remove the flags ({args}) or rename them to this vLLM version's spelling "
            "(`vllm serve --help` in the image lists them), then relaunch.",
        source='argparse (`vllm serve`): `error: unrecognized arguments`',
    ),
    FailureSignature(
        id="vllm_invalid_argument", family="config_invalid", role="cause", fatal=True,
        pattern=_re(r"error: argument (?P<arg>[^\s:]+(?:/[^\s:]+)*): (?P<reason>.+)"),
        title="vLLM rejected the value of {arg}",
        cause="The value given for {arg} is not accepted by this vLLM version: {reason}.",
        fix="Correct {arg} in the serve arguments (`vllm serve --help` in the image lists the "
            "accepted values), then relaunch.",
        source='argparse (`vllm serve`): `error: argument X: invalid ... value`',
    ),
    FailureSignature(
        id="max_model_len_over_model", family="context_length", role="cause", fatal=True,
        pattern=_re(r"User-specified max_model_len \((?P<max_len>\d+)\) is greater than the "
                    r"derived max_model_len"),
        title="--max-model-len {max_len} is beyond the model's own limit",
        cause="--max-model-len ({max_len}) is larger than the model's max_position_embeddings (or "
              "its tokenizer's model_max_length).",
        fix="Lower --max-model-len to the model's limit (the line names it), or enable a RoPE "
            "scaling the model supports; VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 only if you know it is "
            "safe.",
        source="vLLM config (`User-specified max_model_len (N) is greater than the derived "
               "max_model_len`, 0.6-0.2x); corpus b-058",
    ),
    FailureSignature(
        id="request_too_long", family="other", role="cause", fatal=True,
        pattern=_re(r"The (?:decoder )?prompt \(length (?P<length>\d+)\) is longer than the "
                    r"maximum model length of (?P<max_len>\d+)"),
        title="A request's prompt ({length} tokens) is longer than --max-model-len ({max_len})",
        cause="A client sent a prompt longer than the served model length: the request failed, "
              "not the start-up.",
        fix="Shorten the prompt on the client side, or serve with a larger --max-model-len if the "
            "model and memory allow it.",
        source="vLLM v1/engine/input_processor.py (0.32: line 590, processor.py before); corpus "
               "b-044",
    ),
    FailureSignature(
        id="tp_not_divisible", family="config_invalid", role="cause", fatal=True,
        pattern=_re(r"Total number of attention heads \((?P<heads>\d+)\) must be divisible by "
                    r"tensor parallel size \((?P<tp>\d+)\)"),
        title="Tensor-parallel size {tp} does not divide the model's {heads} attention heads",
        cause="The model's {heads} attention heads cannot be split over {tp} GPUs.",
        fix="Set --tensor-parallel-size to a divisor of {heads}.",
        source="vLLM config/model.py verify_with_parallel_config (0.32: line 1549); docs: the multi-node reference's failure table (public Spark launchers' issue trackers)",
    ),
    FailureSignature(
        id="model_no_implementation", family="model_arch", role="cause", fatal=True,
        pattern=_re(r"(?P<arch>\w+) has no vLLM implementation and the Transformers "
                    r"implementation is not compatible with vLLM"),
        title="vLLM cannot run {arch}",
        cause="This vLLM has no implementation of {arch}, and the Transformers fallback cannot "
              "run it either.",
        fix="Use a vLLM release that implements {arch} (its supported-models list), or a model "
            "of a supported architecture.",
        source="vLLM model_executor/model_loader/utils.py resolve_transformers_arch (0.8-0.1x; "
               "0.32 words it `has no vLLM implementation, falling back to Transformers`); "
               "corpus a-073, a-074",
    ),
    FailureSignature(
        id="model_weights_not_found", family="model_files", role="cause", fatal=True,
        pattern=_re(r"Cannot find any model weights with [`']?(?P<model>[^`'\s]+)"),
        title="No weight files found for {model}",
        cause="The model's folder holds no weight files vLLM can load (*.safetensors, *.bin): an "
              "incomplete download, the wrong path, or a --load-format that does not match.",
        fix="Check the model folder (or the mounted Hugging Face cache) has its weight shards; "
            "download it again completely; check --load-format.",
        source="vLLM model_executor/model_loader/default_loader.py (0.32: line 260; "
               "weight_utils.py before); corpus a-086",
    ),
    FailureSignature(
        id="model_arch_not_inspected", family="model_arch", role="symptom", fatal=True,
        pattern=_re(r"Model architectures (?P<arch>\[.*?\]) failed to be inspected"),
        title="vLLM could not inspect the model architecture {arch}",
        cause="Loading the model class for {arch} failed in vLLM's inspection subprocess: this "
              "vLLM (or a package it needs for it) does not support the architecture; the "
              "subprocess's own exception, when logged, is the root.",
        fix="Read the subprocess's traceback above it (a missing module is a package problem); "
            "else use a vLLM release that supports {arch}.",
        source="vLLM model_executor/models/registry.py (`Model architectures [...] failed to be "
               "inspected`, 0.7-0.2x); corpus b-069",
    ),
    FailureSignature(
        id="transformers_unknown_model_type", family="package_version", role="cause", fatal=True,
        pattern=_re(r"has model type `(?P<model_type>[\w.-]+)` but Transformers does not "
                    r"recognize this architecture"),
        title="The image's transformers does not know model type {model_type}",
        cause="The transformers inside the image is older than the model: it has no "
              "configuration class for `{model_type}`.",
        fix="Use an image with a transformers that supports `{model_type}` (and a vLLM built for "
            "it), or `pip install -U transformers` in the image.",
        source="transformers models/auto/configuration_auto.py (4.x-5.x); corpus b-072",
    ),
    FailureSignature(
        id="model_arch_unsupported", family="model_arch", role="cause", fatal=True,
        pattern=_re(r"Model architectures (?P<arch>\[.*?\]) are not supported"),
        title="The image's vLLM does not support model architecture {arch}",
        cause="The image's vLLM is too old for this model.",
        fix="Use an image with a newer vLLM that supports {arch}, on {every_node}.",
        source="vLLM model_executor/models/registry.py (0.32: line 1206); docs: the multi-node reference's failure table (public Spark launchers' issue trackers)",
    ),
    FailureSignature(
        id="hf_gated_repo", family="model_access", role="cause", fatal=True,
        pattern=_re(r"Cannot access gated repo|\bGatedRepoError\b"),
        title="The model is gated on Hugging Face and no valid token was given",
        cause="The model repo is gated: it needs an accepted licence and a token.",
        fix="Accept the model's licence on huggingface.co, set HF_TOKEN (the secret) for the "
            "containers on {every_node}; or point the model at a local path already downloaded.",
        source="huggingface_hub GatedRepoError (`Cannot access gated repo`); docs: the multi-node reference's failure table (public Spark launchers' issue trackers)",
    ),
    FailureSignature(
        id="hf_repo_not_found", family="model_access", role="cause", fatal=True,
        pattern=_re(r"Repository Not Found|\bRepositoryNotFoundError\b"),
        title="Model repository not found on Hugging Face",
        cause="The model id is wrong, or the repo is private/gated and no token was given.",
        fix="Check the model id (owner/name, exact spelling and case); if it is private or "
            "gated set HF_TOKEN; or point the model at the local path in the mounted HF cache.",
        source="huggingface_hub RepositoryNotFoundError; docs: the multi-node reference's failure table (public Spark launchers' issue trackers)",
    ),
    FailureSignature(
        id="hf_unauthorized", family="model_access", role="cause", fatal=True,
        pattern=_re(r"\b401 Client Error\b"),
        title="Hugging Face refused the download (401 Unauthorized)",
        cause="The model id is wrong, or the model is gated/private and HF_TOKEN is missing "
              "or invalid.",
        fix="Check the model id; set a valid HF_TOKEN with access to the model; or point the "
            "model at a local path.",
        source="huggingface_hub HTTP errors (`401 Client Error`); docs: the multi-node reference's failure table (public Spark launchers' issue trackers)",
    ),
    FailureSignature(
        id="hf_bad_repo_id", family="model_access", role="cause", fatal=True,
        pattern=_re(r"Repo id must be in the form|\bHFValidationError\b"),
        title="Model is neither a local path nor a valid Hugging Face id",
        cause="The model argument is not an existing path inside the container, so it was read "
              "as a repo id, and it is not of the form owner/name.",
        fix="Check the model id (owner/name); if it is a local path, mount it into the "
            "container at that path on {every_node}.",
        source="huggingface_hub HFValidationError (`Repo id must be in the form`); docs: the multi-node reference's failure table (public Spark launchers' issue trackers)",
    ),
    # --- memory ----------------------------------------------------------------------------------
    FailureSignature(
        id="free_memory_below_utilization", family="memory_gpu", role="cause", fatal=True,
        pattern=_re(r"Free memory on device .*?on startup is less than desired GPU memory "
                    r"utilization"),
        title="Not enough free memory for --gpu-memory-utilization at startup",
        cause="Less memory is free than --gpu-memory-utilization asks for: {unified_memory}.",
        fix="Lower --gpu-memory-utilization to 0.7-0.85; drop caches on {every_node} "
            "(`sync; echo 3 | sudo tee /proc/sys/vm/drop_caches`) and stop other GPU processes.",
        source="vLLM v1/worker/gpu_worker.py and v1/worker/utils.py (`Free memory on device ... on startup is less than desired GPU memory utilization`); docs: the multi-node reference's failure table (public Spark launchers' issue trackers)",
    ),
    FailureSignature(
        id="kv_cache_no_memory", family="memory_gpu", role="cause", fatal=True,
        pattern=_re(r"No available memory for the cache blocks"),
        title="No memory left for the KV cache after loading the model",
        cause="Once the weights and the profiling run were in memory, nothing of the "
              "--gpu-memory-utilization budget was left for KV cache blocks ({gpu}).",
        fix="Raise --gpu-memory-utilization (if nothing else holds the GPU), or use a smaller / "
            "quantized model or a higher tensor-parallel size; lower --max-num-seqs.",
        source="vLLM v1/core/kv_cache_utils.py check_enough_kv_cache_memory (0.8+; 0.32: line "
               "1011); corpus a-004, b-001",
    ),
    FailureSignature(
        id="nvrm_no_memory", family="memory_gpu", role="cause", fatal=True,
        pattern=_re(r"NV_ERR_NO_MEMORY"),
        title="The NVIDIA driver ran out of memory (NV_ERR_NO_MEMORY)",
        cause="The kernel driver (NVRM) could not allocate memory for the GPU ({gpu}): the "
              "memory the GPU uses is exhausted.",
        fix="Lower --gpu-memory-utilization, --max-model-len and --max-num-seqs (shorter "
            "prompts); stop other processes using the GPU's memory.",
        source="NVIDIA kernel driver (NVRM) messages in dmesg; corpus b-021",
    ),
    FailureSignature(
        id="cuda_oom", family="memory_gpu", role="cause", fatal=True,
        pattern=_re(r"\btorch\.(?:cuda\.)?OutOfMemoryError\b|CUDA out of memory"),
        title="CUDA out of memory",
        cause="Memory exhausted while loading weights, profiling or sampling.",
        fix="Lower --gpu-memory-utilization, --max-model-len and/or --max-num-seqs, then relaunch.",
        source="torch.OutOfMemoryError (c10/cuda/CUDACachingAllocator.cpp); docs: the multi-node reference's failure table (public Spark launchers' issue trackers)",
    ),
    FailureSignature(
        id="ray_memory_monitor_killed", family="memory_host", role="cause", fatal=True,
        pattern=_re(r"exceeds the memory usage threshold of (?P<threshold>[\d.]+)\. Ray killed "
                    r"this worker"),
        title="Ray's memory monitor killed a worker (host memory above {threshold})",
        cause="The node's host memory went above Ray's threshold ({threshold}) and Ray killed a "
              "worker to save the node: host RAM, not the GPU's memory.",
        fix="Lower what the workers hold in host memory (--max-model-len, --max-num-seqs, "
            "--swap-space, --cpu-offload-gb); free the node's memory; RAY_memory_monitor_refresh_ms=0 "
            "turns the monitor off (then the kernel's OOM killer decides).",
        source="Ray's memory monitor (`Memory on the node ... which exceeds the memory usage "
               "threshold of 0.95. Ray killed this worker`); corpus a-016",
    ),
    FailureSignature(
        id="shm_no_space", family="memory_host", role="cause", fatal=True,
        pattern=_re(r"/dev/shm/\S+.*No space left on device"),
        title="/dev/shm is full: shared-memory segments cannot be made",
        cause="The container's /dev/shm is too small for NCCL's (or vLLM's) shared-memory "
              "segments.",
        fix="Run the containers with `--ipc=host` or a larger `--shm-size` (e.g. 64g); remove "
            "leftover segments in /dev/shm.",
        source="NCCL src/misc/shmutils.cc (`failed to extend /dev/shm/nccl-... No space left on "
               "device`); corpus b-070",
    ),
    FailureSignature(
        id="host_oom_killed", family="memory_host", role="cause", fatal=True,
        pattern=_re(r"Out of memory: Killed process|\boom-kill\b|\boom_reaper\b"),
        title="The kernel OOM killer killed a process",
        cause="The host ran out of memory and the kernel killed a process (where the GPU shares "
              "the host's memory, --gpu-memory-utilization is not a hard cap while profiling).",
        fix="Lower --max-model-len and/or --max-num-seqs (and --gpu-memory-utilization); drop "
            "caches before launching.",
        source="the Linux kernel's OOM killer (dmesg: `Out of memory: Killed process`); docs: the multi-node reference's failure table (public Spark launchers' issue trackers)",
    ),
    FailureSignature(
        id="kv_cache_too_small", family="kv_cache", role="cause", fatal=True,
        pattern=_re(r"max seq len \((?P<max_len>\d+)\) is larger than the maximum number of "
                    r"tokens that can be stored in KV cache"
                    r"|KV cache is needed, which is larger than the available KV cache memory"),
        title="KV cache too small for --max-model-len",
        cause="The KV cache that fits in memory cannot hold one sequence of --max-model-len tokens.",
        fix="Raise --gpu-memory-utilization or lower --max-model-len.",
        source="vLLM v1/core/kv_cache_utils.py check_enough_kv_cache_memory (`max seq len`; 0.32: line 1031); docs: the multi-node reference's failure table (public Spark launchers' issue trackers)",
    ),
    # --- NCCL / RDMA / Gloo -------------------------------------------------------------------------
    FailureSignature(
        id="ibv_modify_qp_no_device", family="nccl", role="cause", fatal=True,
        pattern=_re(r"ibv_modify_qp failed with (?:error )?No such device|ibv_modify_qp failed "
                    r"with 19\b"),
        title="RDMA device in NCCL_IB_HCA is not usable in the container",
        cause="The RDMA device named in NCCL_IB_HCA is not usable inside the container.",
        fix="Run `ibdev2netdev` on each node and set NCCL_IB_HCA to the devices that are (Up); "
            "pass the devices into the container (`--privileged` or `--device=/dev/infiniband "
            "--cap-add=IPC_LOCK`).",
        source="NCCL src/transport/net_ib.cc (`ibv_modify_qp failed with 19`); docs: the multi-node reference's failure table (public Spark launchers' issue trackers)",
    ),
    FailureSignature(
        id="ibv_modify_qp_timeout", family="nccl", role="cause", fatal=True,
        pattern=_re(r"ibv_modify_qp failed with 110\b"),
        title="RDMA connection between the nodes timed out",
        cause="NCCL chose the wrong HCA or subnet for the RoCE connection.",
        fix="Set NCCL_IB_SUBNET_AWARE_ROUTING=1 and NCCL_IB_MERGE_NICS=0 on {every_node}; check "
            "NCCL_IB_HCA lists only the (Up) RoCE devices on the same subnet.",
        source="NCCL src/transport/net_ib.cc (`ibv_modify_qp failed with 110`); docs: the multi-node reference's failure table (public Spark launchers' issue trackers)",
    ),
    FailureSignature(
        id="nccl_ibv_call_failed", family="nccl", role="symptom", fatal=True,
        pattern=_re(r"NCCL WARN Call to (?P<call>ibv_\w+) failed"),
        title="NCCL's RDMA verbs call {call} failed",
        cause="NCCL could not use the RDMA device: {call} failed (memory registration or queue "
              "creation: the locked-memory limit, the peer-memory module, or the device not "
              "usable inside the container).",
        fix="Give the containers the RDMA devices and `--ulimit memlock=-1` (or `--privileged`), "
            "`--cap-add=IPC_LOCK`; check NCCL_IB_HCA names devices that are Up; relaunch with "
            "NCCL_DEBUG=INFO.",
        # a symptom: the NCCL error the process raises after it, when logged, has the better fix
        source="NCCL src/misc/ibvwrap.cc (`Call to ibv_... failed`); corpus b-016, b-017",
    ),
    FailureSignature(
        id="nccl_unhandled_system_error", family="nccl", role="cause", fatal=True,
        pattern=_re(r"NCCL error\b.*unhandled system error|\bncclSystemError\b"),
        title="NCCL failed to initialise (unhandled system error)",
        cause="Missing IPC_LOCK capability or /dev/shm in the container, or the RoCE GID index "
              "differs between the nodes.",
        fix="Run the containers with `--cap-add=IPC_LOCK` (or `--privileged`) and `--ipc=host` "
            "(or `--shm-size=64g`); leave NCCL_IB_GID_INDEX unset.",
        source="torch ProcessGroupNCCL / vLLM pynccl_wrapper.py (`NCCL error: unhandled system error`); docs: the multi-node reference's failure table (public Spark launchers' issue trackers)",
    ),
    FailureSignature(
        id="nccl_watchdog_timeout", family="nccl", role="cause", fatal=True,
        pattern=_re(r"Watchdog caught collective operation timeout"),
        title="NCCL collective hung (watchdog timeout)",
        cause="The watchdog killed the process: {nccl_hang}.",
        fix="{nccl_hang_fix}",
        source="torch ProcessGroupNCCL.cpp watchdog (`Watchdog caught collective operation timeout`); docs: the multi-node reference's failure table (public Spark launchers' issue trackers)",
    ),
    FailureSignature(
        id="nccl_error", family="nccl", role="cause", fatal=True,
        pattern=_re(r"\bNCCL error\b|\bnccl(?:InternalError|RemoteError|UnhandledCudaError|"
                    r"InvalidUsage)\b|\bDistBackendError\b"),
        title="NCCL communication failed",
        cause="NCCL reported an error between the nodes (RDMA/RoCE setup or a peer that died).",
        fix="Relaunch with NCCL_DEBUG=INFO and read the `NCCL WARN` lines before this one; "
            "check `ibdev2netdev` (Up), NCCL_IB_HCA and NCCL_SOCKET_IFNAME on {every_node}.",
        source='torch ProcessGroupNCCL (DistBackendError), vLLM pynccl_wrapper.py NCCL_CHECK',
    ),
    FailureSignature(
        id="c10d_connect_timeout", family="distributed_init", role="cause", fatal=True,
        pattern=_re(r"\[c10d\] The client socket has timed out after \d+s while trying to "
                    r"connect to \(?(?P<address>[\w.:\[\]-]+)"),
        title="A rank could not reach the distributed store at {address}",
        cause="torch.distributed's store at {address} did not answer: an address other ranks "
              "cannot reach (a container's bridge IP, the wrong interface) or a firewall.",
        fix="Make VLLM_HOST_IP / --master-addr the node's fabric IP (host networking), reachable "
            "from every node (`nc -zv` to the port); then relaunch.",
        source="torch c10d socket.cpp (`[c10d] The client socket has timed out after Ns while "
               "trying to connect to (host, port)`); corpus b-087",
    ),
    FailureSignature(
        id="gloo_interface_missing", family="distributed_init", role="cause", fatal=True,
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
        id="gloo_connect_failed", family="distributed_init", role="cause", fatal=True,
        pattern=_re(r"Gloo connectFullMesh failed"),
        title="Gloo could not connect the nodes",
        cause="Gloo bound to the wrong network interface (hostname did not resolve to the "
              "fabric address).",
        fix="Set GLOO_SOCKET_IFNAME to the fabric interface name (e.g. enp1s0f1np1) and "
            "VLLM_HOST_IP to the node's fabric IP on {every_node}.",
        source="torch ProcessGroupGloo (`Gloo connectFullMesh failed`); docs: the multi-node reference's failure table (public Spark launchers' issue trackers)",
    ),
    FailureSignature(
        id="gloo_hostname_unresolved", family="distributed_init", role="cause", fatal=False,
        pattern=_re(r"Unable to resolve hostname"),
        title="Hostname did not resolve; torch fell back to loopback",
        cause="Wrong interface: no GLOO_SOCKET_IFNAME, so Gloo may bind to loopback.",
        fix="Set GLOO_SOCKET_IFNAME to the fabric interface name and VLLM_HOST_IP to the "
            "node's fabric IP.",
        source="torch ProcessGroupGloo.cpp (`Unable to resolve hostname to a (local) address`); docs: the multi-node reference's failure table (public Spark launchers' issue trackers)",
    ),
    FailureSignature(
        id="nccl_ib_no_device", family="nccl", role="cause", fatal=False,
        pattern=_re(r"NET/IB : No device found"),
        title="NCCL found no RDMA device: traffic goes over TCP sockets (slow)",
        cause="The RDMA devices are not visible inside the container.",
        fix="Run the containers with `--privileged`, or `--device=/dev/infiniband "
            "--cap-add=IPC_LOCK`; set NCCL_IB_HCA to the (Up) devices from `ibdev2netdev`.",
        source="NCCL src/transport/net_ib.cc INFO (`NET/IB : No device found`); docs: the multi-node reference's failure table (public Spark launchers' issue trackers)",
    ),
    FailureSignature(
        id="nccl_net_socket", family="nccl", role="cause", fatal=False,
        pattern=_re(r"via NET/Socket|Using network Socket\b"),
        title="NCCL uses TCP sockets instead of RDMA (slow)",
        cause="The RDMA devices are not visible inside the container.",
        fix="Run the containers with `--privileged`, or `--device=/dev/infiniband "
            "--cap-add=IPC_LOCK`; set NCCL_IB_HCA to the (Up) devices from `ibdev2netdev`.",
        source="NCCL INFO lines (`via NET/Socket`, `Using network Socket`); docs: the multi-node reference's failure table (public Spark launchers' issue trackers)",
    ),
    # --- Docker, as a launcher script drives it ------------------------------------------------------
    FailureSignature(
        id="docker_gpu_runtime_missing", family="cuda_runtime", role="cause", fatal=True,
        pattern=_re(r"could not select device driver \S* with capabilities: \[\[gpu\]\]|"
                    r"nvidia-container-cli: \w+ error|unknown or invalid runtime name: nvidia"),
        title="Docker could not give the container the GPU",
        cause="Docker has no NVIDIA runtime for `--gpus` on this node (the NVIDIA Container "
              "Toolkit missing or not configured), or it failed to set the GPU up.",
        fix="Install and configure the NVIDIA Container Toolkit (`nvidia-ctk runtime configure "
            "--runtime=docker`, restart dockerd), check `docker run --rm --gpus all <image> "
            "nvidia-smi`, then relaunch.",
        source="moby daemon (`could not select device driver %q with capabilities: %v`), "
               "libnvidia-container (`nvidia-container-cli: initialization error`)",
    ),
    FailureSignature(
        id="docker_caps_refused", family="config_invalid", role="cause", fatal=True,
        pattern=_re(r"unable to apply caps: operation not permitted"),
        title="Docker could not give the container the capabilities it asks for",
        cause="The container asks for a capability the host does not grant (`--privileged` "
              "asks for every one, `--cap-add` for one): the capability bounding set of the "
              "Docker engine's host lacks it.",
        fix="Drop `--privileged` or that `--cap-add` from the `docker run` (RDMA needs "
            "`--cap-add IPC_LOCK` and the devices, `--device=/dev/infiniband`), or run where "
            "`grep CapBnd /proc/self/status` shows the capability; then relaunch.",
        source="runc (libcontainer capabilities), through dockerd's `docker run` error; seen "
               "with eugr/spark-vllm-docker's launch-cluster.sh on the lab",
    ),
    FailureSignature(
        id="docker_run_refused", family="config_invalid", role="cause", fatal=True,
        pattern=_re(r"^docker: Error response from daemon: (?P<detail>.+)"),
        title="Docker refused to run a container",
        cause="The Docker engine refused the `docker run`: {detail}",
        fix="Run that `docker run` by hand on the node to see Docker's whole answer; fix the "
            "option or image it names, then relaunch.",
        source="the docker CLI's words for a refused create or start",
    ),
    # --- vLLM's CPU backend -------------------------------------------------------------------------
    FailureSignature(
        id="cpu_shm_group_spans_nodes", family="distributed_init", role="cause", fatal=True,
        pattern=_re(r"open shm in SHMManager failed"),
        title="vLLM's CPU shared-memory communicator could not open another rank's segment",
        cause="A tensor-parallel group spanning nodes took vLLM's CPU shared-memory path: its "
              "ranks agreed on one segment name, which vLLM makes from the distributed init "
              "port (VLLM_DIST_IDENT), the same on every node under Ray, and each rank then "
              "looked for the others' segments in its own /dev/shm. CPUs whose vLLM kernels have "
              "no SHM operations (the AVX2 build) fall back to torch.distributed instead.",
        fix="Keep each tensor-parallel group on one node, or give the ranks a group name of "
            "their own per node so vLLM falls back to torch.distributed (gloo) across nodes "
            "(the lab's image puts the hostname in it: lab/real_engine/image/sitecustomize.py); "
            "the multiprocessing backend across nodes (--nnodes, --headless) does not take this "
            "path.",
        source="vLLM 0.32.0 distributed/device_communicators/cpu_communicator.py "
               "(_CPUSHMDistributed.make_group_name, join_shm_manager) and v1/worker/"
               "cpu_worker.py (VLLM_DIST_IDENT), seen on the lab's Ray nodes on an AVX-512 CPU",
    ),
    # --- multiprocessing backend ----------------------------------------------------------------
    FailureSignature(
        id="nccl_warn", family="nccl", role="symptom", fatal=False,
        pattern=_re(r"NCCL WARN\b"),
        title="NCCL printed a warning",
        cause="NCCL printed a warning (its network, its shared memory, a peer); if the engine "
              "then hangs or dies, this is where to look.",
        fix="Read the `NCCL WARN` line and the lines around it; relaunch with NCCL_DEBUG=INFO to "
            "see NCCL's choices of transport and devices.",
        source="NCCL's WARN lines (src/include/debug.h), any release",
    ),
    FailureSignature(
        id="mp_semlock_across_nodes", family="config_invalid", role="cause", fatal=True,
        pattern=_re(r"No such file or directory"),
        after=_re(r"\bSemLock\b"), window=8,
        title="vLLM worker failed on a shared-memory lock (SemLock)",
        cause="The single-node multiprocessing backend was used across nodes.",
        fix="Use the multi-node flags (--nnodes 2, --node-rank 0/1, --master-addr, "
            "--headless on the worker) or the Ray backend (--distributed-executor-backend ray).",
        source="Python multiprocessing/synchronize.py SemLock under vLLM's mp executor; docs: the multi-node reference's failure table (public Spark launchers' issue trackers)",
    ),
    FailureSignature(
        id="workerproc_init_failed", family="other", role="symptom", fatal=True,
        pattern=_re(r"WorkerProc initialization failed"),
        title="A vLLM worker process failed to start",
        cause="A worker process died during start-up; the cause is in the lines before. With "
              "a SemLock / `No such file or directory` error: the single-node multiprocessing "
              "backend was used across nodes.",
        fix="Read the earlier lines; for SemLock / `No such file or directory` use the "
            "multi-node flags (--nnodes, --node-rank, --headless) or Ray.",
        source='vLLM v1/executor/multiproc_executor.py (`WorkerProc initialization failed`)',
    ),
    # --- ports ----------------------------------------------------------------------------------------
    FailureSignature(
        id="port_in_use", family="port_in_use", role="cause", fatal=True,
        pattern=_re(r"address already in use|\bEADDRINUSE\b", re.IGNORECASE),
        title="Port already in use",
        cause="Another process holds the port (often an earlier vLLM server or container "
              "still running).",
        fix="Stop the old server/container (`docker ps`; `docker rm -f <name>`; `ss -ltnp` shows "
            "the holder), or choose another --port (or --master-port), then relaunch.",
        source="the OS's bind() (`[Errno 98] Address already in use`), uvicorn / torch TCPStore",
    ),
    # --- rows from the corpus of real logs, by family (diag-dev, issue 23) ---------------------------
    # Each row is a kind of message, not one log: the wording of the project that raises it, as
    # its source says it. Kept in one block so that the parallel work on the engine merges apart.
    FailureSignature(
        id="ray_gcs_lost", family="ray_cluster", role="cause", fatal=True,
        pattern=_re(r"Failed to connect to GCS within (?P<seconds>\d+) seconds"),
        title="The process lost Ray's GCS (no answer for {seconds} s)",
        cause="The Ray GCS (the cluster's control store on the head) stopped answering for "
              "{seconds} s: it was stopped (`ray stop`, the head's container gone), was killed "
              "(its memory, the node's), or became unreachable; Ray then ends the process.",
        fix="Read the head's gcs_server.out (Ray's session logs) for why the GCS ended; check "
            "that the head's container still runs and that the node reaches it over the fabric; "
            "relaunch the cluster.",
        source="Ray src/ray/rpc/gcs/gcs_rpc_client.h (rpc_client.h in later releases): "
               "`Failed to connect to GCS within N seconds. GCS may have been killed.` "
               "(gcs_rpc_server_reconnect_timeout_s); corpus d-050",
    ),
    FailureSignature(
        id="ray_oom_killer_summary", family="memory_host", role="cause", fatal=True,
        pattern=_re(r"(?P<count>\d+) Workers \(tasks\s*/\s*actors\) killed due to memory pressure"
                    r"|killed due to memory pressure \(OOM\)"),
        title="Ray's memory monitor killed workers (host memory pressure)",
        cause="The node's host memory went above Ray's usage threshold, and Ray's memory "
              "monitor killed workers to save the node: host RAM, not the GPU's memory.",
        fix="Lower what the workers hold in host memory (--max-model-len, --max-num-seqs, "
            "--swap-space, --cpu-offload-gb); free the node's memory; RAY_memory_usage_threshold "
            "raises the threshold, RAY_memory_monitor_refresh_ms=0 turns the monitor off (then "
            "the kernel's OOM killer decides).",
        source="Ray src/ray/raylet/node_manager.cc, the memory monitor's periodic summary "
               "(`N Workers (tasks / actors) killed due to memory pressure (OOM)`; Ray docs, "
               "ray-core/scheduling/ray-oom-prevention); corpus d-027",
    ),
    FailureSignature(
        id="kv_cache_one_request", family="kv_cache", role="cause", fatal=True,
        pattern=_re(r"To serve at least one request with the models?'s? max seq len "
                    r"\((?P<max_len>\d+)\)"),
        title="KV cache too small for one request of --max-model-len {max_len}",
        cause="The KV cache that fits in memory cannot hold one sequence of --max-model-len "
              "({max_len}) tokens.",
        fix="Raise --gpu-memory-utilization or lower --max-model-len (the message's end names "
            "the largest length that fits).",
        source="vLLM v1/core/kv_cache_utils.py check_enough_kv_cache_memory (`To serve at least "
               "one request with the models's max seq len (N), (X GiB KV cache is needed, ...`; "
               "the opening stays whole when a log wraps the line); corpus d-028",
    ),
    FailureSignature(
        id="max_model_len_over_device_limit", family="context_length", role="cause", fatal=True,
        pattern=_re(r"(?:do(?:es)? not support|not supported|cannot (?:use|serve)|not allowed)"
                    r"\b[^.]{0,60}?\bmax_model_len\b[^.]{0,40}?\b(?:greater|larger|more|longer) "
                    r"than (?P<limit>\d+)"),
        title="--max-model-len above the limit of {limit} tokens",
        cause="--max-model-len is larger than what the model (or this model on this device) "
              "supports: {limit} tokens.",
        fix="Lower --max-model-len to {limit} or less.",
        source="vLLM platform and model checks that refuse a max_model_len (`... do not support "
               "max_model_len greater than N ...`, the TT platform's; config's `is greater "
               "than the derived max_model_len` is its own row above); corpus d-068",
    ),
    FailureSignature(
        id="no_quant_kernel_for_gpu", family="gpu_arch", role="cause", fatal=True,
        pattern=_re(r"Failed to find a kernel that can implement the (?P<layer>[\w ]+?) linear "
                    r"layer"),
        title="No {layer} kernel for this GPU (quantized linear layer)",
        cause="vLLM has no kernel for the model's quantized {layer} linear layers on {gpu}: "
              "each candidate kernel needs another compute capability (the `Reasons:` lines "
              "after it name each one's minimum).",
        fix="Use a quantization this GPU has a kernel for (another checkpoint, or none), or a "
            "GPU of the compute capability the reasons name.",
        source="vLLM model_executor/layers/quantization/kernels (choose_scaled_mm_linear_kernel, "
               "choose_mp_linear_kernel: `Failed to find a kernel that can implement the "
               "ScaledMM / WNA16 linear layer. Reasons:`); corpus d-039",
    ),
    FailureSignature(
        id="flashinfer_smem_dispatch", family="gpu_arch", role="cause", fatal=True,
        pattern=_re(r"Unsupported max_mma_kv: 0|Invalid configuration NUM_MMA_KV=\d+"),
        title="FlashInfer has no attention tile that fits this GPU's shared memory",
        cause="FlashInfer's prefill kernel found no tile for this head size and KV-cache dtype "
              "that fits the shared memory per SM of {gpu} (consumer and workstation GPUs have "
              "less of it than the data-centre ones).",
        fix="Use another attention backend (--attention-backend TRITON_ATTN or FLASH_ATTN), a "
            "2-byte KV cache (--kv-cache-dtype auto), or a FlashInfer release that supports "
            "this head size on this GPU.",
        source="FlashInfer include/flashinfer/attention/prefill.cuh, the paged-prefill dispatch "
               "(`Unsupported max_mma_kv: 0`, `Invalid configuration NUM_MMA_KV=... "
               "NUM_WARPS_Q=...`); corpus b-032",
    ),
    FailureSignature(
        id="triton_compile_failed", family="gpu_arch", role="cause", fatal=True,
        pattern=_re(r"PassManager::run failed"),
        title="Triton could not compile a kernel for this GPU",
        cause="Triton's compiler (its MLIR pass pipeline) failed on a kernel vLLM needs, on "
              "{gpu}: the lines before it name the pass (`ConvertTritonGPUToLLVM`: an operation "
              "this architecture's lowering lacks).",
        fix="Use another attention backend or dtype (e.g. --dtype float16 on GPUs without "
            "bfloat16), or an image whose Triton supports this GPU's architecture.",
        source="Triton's backend compiler (triton/backends/nvidia/compiler.py make_ttgir / "
               "make_llir run the MLIR pass pipeline: `RuntimeError: PassManager::run failed`, "
               "after `Pipeline failed while executing [<pass>]`); corpus d-002",
    ),
    FailureSignature(
        id="jit_kernel_build_failed", family="gpu_arch", role="cause", fatal=True,
        pattern=_re(r"Ninja build failed|Error building extension '"),
        title="A kernel's just-in-time build failed",
        cause="A kernel built at start-up for {gpu} (FlashInfer's JIT, a torch extension) did not "
              "compile: nvcc's errors in the ninja output say why (a CUDA toolkit or kernel "
              "source that does not support this architecture, a missing nvcc).",
        fix="Use an image with the kernels prebuilt for this GPU's compute capability (or a "
            "FlashInfer / CUDA toolkit that supports it), or another attention backend.",
        source="FlashInfer flashinfer/jit/cpp_ext.py run_ninja (`RuntimeError: Ninja build "
               "failed. Ninja output:`), torch utils/cpp_extension.py (`Error building extension "
               "'name'`); corpus d-071",
    ),
    FailureSignature(
        id="python_too_old", family="package_version", role="cause", fatal=True,
        pattern=_re(r"^TypeError: type '[\w.]+' is not subscriptable"),
        title="A package needs a newer Python than the image's",
        cause="Code of a package subscripts a builtin type at import (`array.array[int]`, "
              "generics of newer Pythons): it was written for a newer Python than the one in "
              "the image.",
        fix="Use an image (or venv) with the Python the package requires, or a release of the "
            "package that supports this Python.",
        source="CPython: builtin types became subscriptable release by release (PEP 585 in "
               "3.9; array.array in 3.12, gh-98658; memoryview in 3.14, gh-126012), `TypeError: "
               "type 'X' is not subscriptable` before; corpus d-016",
    ),
    FailureSignature(
        id="torch_extension_not_loaded", family="package_version", role="cause", fatal=True,
        pattern=_re(r"'_OpNamespace' '\w+' object has no attribute"
                    r"|Tried to instantiate class '[\w.]+', but it does not exist"),
        title="A compiled extension's operators are missing from torch",
        cause="An operator or class of a compiled extension (vLLM's _C, a plugin's) is not "
              "registered in torch: the extension did not load (built against another torch, "
              "CUDA or ROCm; an earlier `Failed to import` warning names the library) or was "
              "built without it.",
        fix="Install the torch build the extension was compiled against (or rebuild the "
            "extension for this torch); use an image whose vLLM and torch come together.",
        source="torch/_ops.py _OpNamespace.__getattr__ (`'_OpNamespace' 'ns' object has no "
               "attribute 'op'`), torch's custom-class lookup through torch/_classes.py (`Tried "
               "to instantiate class 'ns.Cls', but it does not exist! Ensure that it is "
               "registered via torch::class_`); corpus "
               "d-004, d-062",
    ),
    FailureSignature(
        id="harmony_vocab_invalid", family="tokenizer", role="cause", fatal=True,
        pattern=_re(r"HarmonyError: |invalid tiktoken vocab file"),
        title="The Harmony encoding's tiktoken vocabulary could not be loaded",
        cause="openai_harmony could not load the tiktoken vocabulary of the encoding (gpt-oss): "
              "the file it read is not a vocabulary (an HTML or error page cached in its place, "
              "a partial download).",
        fix="Remove the cached vocabulary file (TIKTOKEN_ENCODINGS_BASE / the tiktoken cache) "
            "and let it download again, or point TIKTOKEN_ENCODINGS_BASE at a directory with "
            "the real files when offline.",
        source="openai/harmony (`HarmonyError: invalid tiktoken vocab file: expected token and "
               "rank`), loaded by vLLM entrypoints/openai/parser/harmony_utils.py; corpus d-044",
    ),
    FailureSignature(
        id="rope_scaling_key_unknown", family="model_arch", role="cause", fatal=True,
        pattern=_re(r"^KeyError: '\w+'"),
        after=_re(r"rope_scaling\["), window=3,
        title="This vLLM does not know the model's rope_scaling format",
        cause="vLLM read a key of the model's `rope_scaling` config that the model does not "
              "have: the model's config uses a newer format (Llama 3.1's `rope_type`) than this "
              "vLLM knows.",
        fix="Use a vLLM release that supports the model (for Llama 3.1: 0.5.3.post1 or later).",
        source="vLLM's rope handling before 0.5.3.post1 (the source line `rope_scaling[\"type\"]` "
               "of the traceback); Llama 3.1's config.json (`rope_type: llama3`); corpus a-021",
    ),
    FailureSignature(
        id="cuda_device_assert", family="cuda_runtime", role="cause", fatal=True,
        pattern=_re(r"block: \[\d+,\d+,\d+\], thread: \[\d+,\d+,\d+\] Assertion "
                    r"`(?P<assertion>[^`]{1,160})` failed"),
        title="A GPU kernel's assertion failed (device-side assert)",
        cause="A kernel checked a condition on the GPU and it failed (`{assertion}`): the CUDA "
              "context is lost and the engine dies. `index out of bounds: 0 <= ... < N` is an "
              "index past a table of N entries: positions past the model's position table "
              "(--max-model-len forced beyond max_position_embeddings with "
              "VLLM_ALLOW_LONG_MAX_MODEL_LEN=1), or token ids past the vocabulary.",
        fix="Keep --max-model-len within the model's limit (unset VLLM_ALLOW_LONG_MAX_MODEL_LEN) "
            "and check that the tokenizer is the model's; rerun with CUDA_LAUNCH_BLOCKING=1 to "
            "name the kernel.",
        source="CUDA's device-side assert output (`file:line: fn: block: [x,y,z], thread: "
               "[x,y,z] Assertion `cond` failed.`), torch inductor's generated bounds checks "
               "(`tl.device_assert(..., \"index out of bounds: 0 <= tmp < N\")`); torch then "
               "raises `CUDA error: device-side assert triggered`; corpus a-052",
    ),
    # --- end of the corpus rows (diag-dev) -------------------------------------------------------------
    # --- engine death (symptoms: the cause is earlier) -------------------------------------------------
    FailureSignature(
        id="shm_broadcast_timeout", family="engine_hang", role="symptom", fatal=True,
        pattern=_re(r"^TimeoutError\b(?!.*RPC call)"),
        after=_re(r"shm_broadcast\.py"), window=12,
        title="vLLM workers stopped answering (shm_broadcast TimeoutError)",
        cause="The engine's workers stopped answering, often because {nccl_hang}.",
        fix="{nccl_hang_fix}",
        source="vLLM distributed/device_communicators/shm_broadcast.py (TimeoutError); docs: the multi-node reference's failure table (public Spark launchers' issue trackers)",
    ),
    FailureSignature(
        id="shm_broadcast_timeout_rpc", family="engine_hang", role="symptom", fatal=True,
        pattern=_re(r"TimeoutError.*shm_broadcast|shm_broadcast.*TimeoutError"
                    r"|RPC call to \w+ timed out"),
        title="vLLM workers stopped answering (timeout)",
        cause="The engine's workers stopped answering, often because {nccl_hang}.",
        fix="{nccl_hang_fix}",
        source='vLLM v1/executor/multiproc_executor.py collective_rpc (`RPC call to X timed out`)',
    ),
    FailureSignature(
        id="shm_broadcast_waiting", family="engine_hang", role="symptom", fatal=False,
        pattern=_re(r"No available shared memory broadcast block found in \d+ seconds?"),
        title="vLLM workers are not answering (shared memory broadcast wait)",
        cause="The engine's workers stopped answering, often because {nccl_hang}; it can also "
              "be a long compilation.",
        fix="If it repeats: {nccl_hang_fix}",
        source="vLLM distributed/device_communicators/shm_broadcast.py (`No available shared memory broadcast block found in 60 seconds`); docs: the multi-node reference's failure table (public Spark launchers' issue trackers)",
    ),
    FailureSignature(
        id="quantization_not_on_this_gpu", family="gpu_arch", role="cause", fatal=True,
        pattern=_re(r"The quantization method (?P<method>\S+) is not supported for the current "
                    r"GPU\. Minimum capability: (?P<min>\d+)\. Current capability: (?P<current>\d+)"),
        title="{method} quantization needs compute capability {min}, this GPU has {current}",
        cause="The model's quantization ({method}) has kernels only for compute capability {min} "
              "and up; {gpu} is {current}.",
        fix="Serve a checkpoint in a quantization this GPU supports (or unquantized), or use a "
            "GPU of capability {min} or more.",
        source="vLLM config/vllm.py (0.32: line 903; config.py before)",
    ),
    FailureSignature(
        id="bf16_not_on_this_gpu", family="gpu_arch", role="cause", fatal=True,
        pattern=_re(r"Bfloat16 is only supported on GPUs with compute capability of at least 8\.0"),
        title="This GPU cannot run bfloat16",
        cause="{gpu} has a compute capability below 8.0: no bfloat16 kernels.",
        fix="Serve with `--dtype float16` (or `--dtype half`).",
        source="vLLM platforms/cuda.py (0.32: line 649) and platforms/rocm.py",
    ),
    FailureSignature(
        id="torch_arch_not_supported", family="gpu_arch", role="cause", fatal=True,
        pattern=_re(r"with CUDA capability (?P<sm>sm_\d+a?) is not compatible with the current "
                    r"PyTorch installation"),
        title="The image's PyTorch was not built for this GPU ({sm})",
        cause="The PyTorch inside the image has no kernels for {sm}, the compute capability of "
              "{gpu}.",
        fix="Use an image whose torch (and vLLM) is built for {sm} (a newer CUDA and torch "
            "build), then relaunch.",
        source="torch/cuda/__init__.py _check_capability (`... with CUDA capability sm_N is not "
               "compatible with the current PyTorch installation`, torch 2.x); corpus a-027",
    ),
    FailureSignature(
        id="no_gpu_platform", family="cuda_runtime", role="cause", fatal=True,
        pattern=_re(r"No platform detected, vLLM is running on UnspecifiedPlatform"),
        title="vLLM found no GPU platform",
        cause="vLLM detected no usable accelerator: no GPU visible in the container, or a vLLM "
              "build without the platform's libraries.",
        fix="Check that the container sees the GPU (`nvidia-smi` inside it; --gpus all) and that "
            "the image's vLLM is a CUDA build.",
        source="vLLM platforms/__init__.py (logged at INFO before 0.9, DEBUG in 0.32); corpus a-018",
    ),
    FailureSignature(
        id="cuda_no_kernel_image", family="gpu_arch", role="cause", fatal=True,
        pattern=_re(r"no kernel image is available for execution on the device"),
        title="The image has no CUDA kernels for this GPU ({gpu})",
        cause="torch or vLLM in the image was not compiled for this GPU's architecture "
              "({gpu}): CUDA found no kernel image for it.",
        fix="Use an image built for this GPU's compute capability (a torch/vLLM build whose "
            "arch list includes it, and a CUDA that knows it).",
        source="CUDA runtime (cudaErrorNoKernelImageForDevice) through torch's CUDA checks; "
               "corpus a-005",
    ),
    FailureSignature(
        id="ray_worker_crashed", family="memory_host", role="cause", fatal=True,
        pattern=_re(r"\*\*\* SIG(?:BUS|KILL) received|Fatal Python error: Bus error|"
                    r"A worker died or was killed while executing a task"),
        title="A Ray worker process was killed",
        cause="A vLLM worker process was killed by a signal: SIGBUS (its /dev/shm too small) or "
              "SIGKILL (the OOM killer, Ray's memory monitor); the `ip=` in the line names its "
              "node.",
        fix="On the node named by `ip=`: `dmesg -T | grep -iE 'oom|killed'` and free memory; read "
            "that node's container log; lower --gpu-memory-utilization if memory ran out; relaunch.",
        source="Ray's signal handler (`*** SIGBUS received`), raylet (`A worker died or was killed while executing a task`), Python faulthandler; corpus a-011",
    ),
    FailureSignature(
        id="worker_crashed_signal", family="other", role="cause", fatal=True,
        pattern=_re(r"\*\*\* SIG(?:SEGV|ABRT|ILL) received|Fatal Python error: "
                    r"(?:Segmentation fault|Aborted)"),
        title="A worker process crashed",
        cause="A vLLM worker process crashed (a segmentation fault or an abort in native code); "
              "the lines just before it name the library it was in.",
        fix="Read the lines before the crash for the library and the kernel; try the image's "
            "other attention backend or --enforce-eager; report it with the whole traceback.",
        source="Python's faulthandler and Ray's signal handler (`*** SIGSEGV received`)",
    ),
    FailureSignature(
        id="cuda_sticky_error", family="cuda_runtime", role="cause", fatal=True,
        # the device's own assert line is cuda_device_assert's
        pattern=_re(r"an illegal memory access was encountered|device-side assert triggered|"
                    r"unspecified launch failure|misaligned address|an illegal instruction was "
                    r"encountered"),
        title="A CUDA kernel failed on the GPU ({gpu})",
        cause="A kernel hit an error that leaves the process's CUDA context unusable (an illegal "
              "memory access, a device-side assert, a launch failure): the process cannot go on.",
        fix="Relaunch with CUDA_LAUNCH_BLOCKING=1 to name the kernel; an assert on an index past "
            "a bound can be --max-model-len beyond the model's limit (VLLM_ALLOW_LONG_MAX_MODEL_LEN); "
            "else try another attention backend or --enforce-eager, and report it with the "
            "traceback.",
        source="CUDA Runtime API cudaError_t: 700 cudaErrorIllegalAddress, 710 cudaErrorAssert, "
               "715 cudaErrorIllegalInstruction, 716 cudaErrorMisalignedAddress, 719 "
               "cudaErrorLaunchFailure (`the process must be terminated and relaunched`)",
    ),
    FailureSignature(
        id="process_killed", family="memory_host", role="cause", fatal=True,
        pattern=_re(r"^Killed$|^(?:\S+: line \d+: +)?\d+ Killed +\S"),
        title="A process was killed (SIGKILL)",
        cause="The shell reports a process killed by SIGKILL: most often the kernel's OOM killer "
              "(the host's memory ran out), or `docker kill`.",
        fix="`dmesg -T | grep -iE 'oom|killed'` on the node names what was killed; lower "
            "--max-model-len / --max-num-seqs / --gpu-memory-utilization and free the host's "
            "memory, then relaunch.",
        source="bash's job reports (`Killed`, strsignal(SIGKILL)); the kernel's OOM killer "
               "sends SIGKILL",
    ),
    FailureSignature(
        id="native_abort", family="other", role="symptom", fatal=True,
        pattern=_re(r"^terminate called after throwing an instance of|"
                    r"(?:Segmentation fault|Aborted|Bus error) \(core dumped\)"),
        title="A process aborted in native code",
        cause="A process died in C++ or CUDA code (an uncaught C++ exception, a crash); what it "
              "threw is on the next lines (`what(): ...`).",
        fix="Read the `what():` line and the lines before it for the library; relaunch with "
            "CUDA_LAUNCH_BLOCKING=1 if it is a CUDA error.",
        source="libstdc++'s verbose terminate handler (`terminate called after throwing an "
               "instance of`), the shell's job messages for SIGSEGV/SIGABRT/SIGBUS (`(core "
               "dumped)`)",
    ),
    # before ray_actor_died: the same line, a worker's exit that says why
    FailureSignature(
        id="ray_worker_exited_unexpectedly", family="memory_host", role="symptom", fatal=True,
        pattern=_re(r"Worker unexpectedly exits with a connection error code"),
        title="A Ray worker process was killed (most often by the kernel's OOM killer)",
        cause="The raylet lost its worker's connection without an exit: the process was "
              "killed. Ray's own first suspect is the kernel's OOM killer (host memory), then "
              "`ray stop --force`, then a crash (SIGSEGV).",
        fix="Run `dmesg -T | grep -i -E 'killed process|out of memory'` on the worker's node "
            "(its `ip=` prefix); if the OOM killer took it, lower what each worker loads into "
            "host memory (--swap-space, fewer ranks per node) or add memory.",
        source="Ray 2.60.0 raylet (`Worker unexpectedly exits with a connection error code %d. "
               "Some common causes include: (1) the process was killed by the OOM killer due to "
               "high memory usage…`); Ray 2.x before: `There are some potential root causes. (1) "
               "The process is killed by SIGKILL by OOM killer due to high memory usage.`",
    ),
    FailureSignature(
        id="ray_actor_died", family="ray_cluster", role="symptom", fatal=True,
        pattern=_re(r"\bActorDiedError\b|The actor died unexpectedly"),
        title="A Ray worker process died",
        cause="A vLLM worker actor crashed, was OOM-killed, or its node left the cluster; the "
              "cause is in the lines before (often from the other node's worker).",
        fix="Read the earlier lines of that worker (its `(RayWorkerWrapper pid=..., ip=...)` "
            "prefix names the node); check `dmesg` on that node for the OOM killer; restart.",
        source="ray.exceptions.ActorDiedError (python/ray/exceptions.py); docs: the multi-node reference's failure table (public Spark launchers' issue trackers)",
    ),
    FailureSignature(
        id="ray_subprocesses_exited", family="ray_cluster", role="symptom", fatal=True,
        pattern=_re(r"Some Ray subprocesses exited unexpectedly"),
        title="Ray's processes on the node exited (its raylet died)",
        cause="`ray start --block` saw the node's Ray processes exit: the raylet lost the head "
              "(fabric link, the head's GCS gone), was OOM-killed, or crashed.",
        fix="Read the probe's findings and the other node's log; check the fabric link "
            "(`ip link`, `ibdev2netdev`) and memory (`free -g`, `dmesg`) on the node; relaunch.",
        source="ray python/ray/scripts/scripts.py (`ray start --block`), seen on the lab's "
               "worker when its fabric link went down",
    ),
    FailureSignature(
        id="engine_start_failed", family="other", role="symptom", fatal=True,
        pattern=_re(r"EngineCore failed to start|Engine core initialization failed|"
                    r"Engine process failed to start"),
        title="vLLM engine failed to start",
        cause="The engine process failed during start-up; the cause is in the lines before.",
        fix="Read the earlier lines (attached) for the first error; fix it and relaunch.",
        source='vLLM v1/engine/core.py run_engine_core (`EngineCore failed to start.`) and v1/engine/utils.py wait_for_engine_startup (0.32: line 1431); V0 (0.6-0.10) entrypoints/openai/api_server.py build_async_engine_client_from_engine_args (`Engine process failed to start. See stack trace for the root cause.`)',
    ),
    FailureSignature(
        id="executor_worker_died", family="other", role="symptom", fatal=True,
        pattern=_re(r"(?:Worker|Engine core) proc(?:ess)? \S+ died unexpectedly|"
                    r"RayWorkerProc rank=\S+ died unexpectedly|"
                    r"\bWorker \S+ pid \d+ died, exit code: -?[1-9]"),
        title="A vLLM worker process died",
        cause="A worker (or the engine core) process died; the cause is in the lines before "
              "(an exit code -9 is SIGKILL: the OOM killer, or a kill).",
        fix="Read that worker's earlier lines (attached) for the first error, and `dmesg` on "
            "its node for the OOM killer; restart the server.",
        source="vLLM 0.32.0 v1/executor/multiproc_executor.py (`Worker proc %s died "
               "unexpectedly (exit code: %s), shutting down executor.`), "
               "v1/executor/ray_executor_v2.py, v1/utils.py (`Engine core process ... died "
               "unexpectedly.`); vLLM 0.6.3.post1-0.10.2 (PyPI sdists) "
               "executor/multiproc_worker_utils.py WorkerMonitor (`Worker %s pid %s died, exit "
               "code: %s`, logged for a non-zero exit code)",
    ),
    FailureSignature(
        id="engine_dead", family="other", role="symptom", fatal=True,
        pattern=_re(r"\b(?:Async|MQ)?EngineDeadError\b|EngineCore encountered a fatal error"
                    r"|AsyncLLM output_handler failed"),
        title="vLLM engine died",
        cause="The engine process died; the cause is in the lines before.",
        fix="Read the earlier lines (attached) for the first error; restart the server.",
        source='vLLM v1/engine/exceptions.py EngineDeadError, v1/engine/core.py, v1/engine/async_llm.py output_handler; V0 engine/async_llm_engine.py AsyncEngineDeadError, engine/multiprocessing/__init__.py MQEngineDeadError',
    ),
    # --- ERROR lines vLLM logs and goes on from (read before any row: their records hold no
    # failure, cluster.diagnosis.engine.SurvivedRecords) ----------------------------------------
    FailureSignature(
        id="nvlink_detection_failed", family="cuda_runtime", role="cause", fatal=False,
        survived=True,
        pattern=_re(r"^NVLink detection (?:failed\. This is normal if your machine has no "
                    r"NVLink equipped|not possible, as context support was not found)"),
        title="vLLM could not query NVLink (normal without NVLink)",
        cause="vLLM asked NVML whether the GPUs are linked by NVLink and NVML could not tell; "
              "vLLM assumes no NVLink and goes on.",
        fix="Nothing to do: it is logged with a traceback, but the start-up goes on.",
        source="vLLM 0.32.0 platforms/cuda.py is_fully_connected (`logger.exception`, then "
               "`return False`); vllm-project/vllm@002db4951e0c vllm/platforms/cuda.py",
    ),
    FailureSignature(
        id="plugin_load_failed", family="package_version", role="cause", fatal=False,
        survived=True,
        pattern=_re(r"^Failed to (?:load plugin|instantiate endpoint plugin) (?P<plugin>\S+)"),
        title="A vLLM plugin ({plugin}) failed to load",
        cause="An installed vLLM plugin ({plugin}) raised when vLLM loaded it; vLLM goes on "
              "without it.",
        fix="If the plugin is wanted, read its traceback (same prefix) for the package it "
            "lacks; else set VLLM_PLUGINS to the plugins to load.",
        source="vLLM 0.32.0 plugins/__init__.py load_plugins_by_group (`logger.exception`, the "
               "loop goes on); vllm-project/vllm@01425553bdbe vllm/plugins/__init__.py",
    ),
    FailureSignature(
        id="flash_attn_version_unusable", family="gpu_arch", role="cause", fatal=False,
        survived=True,
        pattern=_re(r"^Cannot use FA version (?P<version>\d+) is not supported due to"),
        title="FlashAttention {version} cannot be used on this GPU",
        cause="vLLM's FlashAttention {version} is not supported here ({gpu}); vLLM picks "
              "another attention backend.",
        fix="Nothing to do unless the attention backend matters: the start-up goes on with "
            "another backend.",
        source="vLLM 0.32.0 v1/attention/backends/fa_utils.py get_flash_attn_version "
               "(`logger.error`, the assert caught, None returned)",
    ),
    FailureSignature(
        id="triton_kernels_import_failed", family="package_version", role="cause", fatal=False,
        survived=True,
        pattern=_re(r"^Failed to import Triton kernels\. Please make sure your triton version "
                    r"is compatible"),
        title="vLLM could not import triton_kernels (a MoE kernel turned off)",
        cause="The image's triton_kernels does not match its triton; vLLM goes on without the "
              "kernels that need it.",
        fix="Only if a MoE model needs them: use an image whose triton and triton_kernels "
            "match.",
        source="vLLM 0.32.0 model_executor/layers/fused_moe/config.py and oracle/mxfp4.py "
               "(`logger.error` in an except that goes on)",
    ),
    FailureSignature(
        id="flashinfer_allreduce_workspace_failed", family="gpu_arch", role="cause",
        fatal=False, survived=True,
        pattern=_re(r"^Failed to initialize FlashInfer All ?[Rr]educe (?:norm (?:quantization )?"
                    r"fusion )?workspace"),
        title="FlashInfer's all-reduce fusion is off (its workspace could not be set up)",
        cause="vLLM could not set up FlashInfer's all-reduce workspace (its JIT build failed, "
              "or the GPUs have no NVSwitch multicast) and goes on with the plain all-reduce.",
        fix="Nothing to do unless the fused all-reduce matters: the start-up goes on without "
            "it (its reason is on the same line).",
        source="vLLM 0.32.0 distributed/device_communicators/flashinfer_all_reduce.py "
               "(`logger.warning_once` / `logger.error_once`, then `return None`)",
    ),
    FailureSignature(
        id="hub_lookup_retried", family="model_access", role="cause", fatal=False,
        survived=True,
        pattern=_re(r"^Error retrieving (?:[\w ]+: .*, retrying \d+ of \d+$|safetensors: )"),
        title="vLLM could not ask the Hub about the model (it went on)",
        cause="vLLM asked the Hugging Face Hub for the model's file list or safetensors "
              "metadata and was refused (a local path taken for a repo id, no network, a "
              "limit); it retries, and goes on without the safetensors metadata.",
        fix="Nothing to do unless the model then fails to load: its own error follows.",
        source="vLLM 0.32.0 transformers_utils/repo_utils.py with_retry (`logger.error(\"%s: %s, "
               "retrying %d of %d\"…)` before each retry) and transformers_utils/config.py "
               "try_get_safetensors_metadata (the last failure caught, None returned)",
    ),
    FailureSignature(
        id="same_node_check_failed", family="distributed_init", role="cause", fatal=False,
        survived=True,
        pattern=_re(r"^Error ignored in is_in_the_same_node"),
        title="vLLM's same-node check failed (ignored)",
        cause="vLLM could not open the shared memory its same-node check uses; it counts the "
              "ranks as on different nodes and goes on.",
        fix="Nothing to do unless ranks on one node should share memory (then check /dev/shm).",
        source="vLLM 0.32.0 distributed/parallel_state.py in_the_same_node_as "
               "(`logger.error(\"Error ignored in is_in_the_same_node: %s\", e)`)",
    ),
)
# fmt: on

# A requested stop (SIGTERM, SIGINT): the teardown after it (EngineDeadError from AsyncLLM's
# output_handler, a headless rank losing its master, Ray's workers going) is no failure.
# (pattern, where the line comes from); sources: vLLM's PyPI wheels 0.6.0 to 0.33.0.
SHUTDOWN_MARKERS: tuple[tuple[re.Pattern[str], str], ...] = (
    (_re(r"^\[shutdown\] EngineCore: trigger received signal="), "vLLM 0.23.0+ v1/engine/core.py"),
    (
        _re(r"^\[shutdown\] API server: shutdown triggered"),
        "vLLM 0.23.0+ entrypoints/launcher.py (launchers/launcher.py from 0.29.0)",
    ),
    (_re(r"^Received KeyboardInterrupt, shutting down"), "vLLM 0.9.1+ v1/utils.py"),
)
# Only the lines a signal triggers: the rest of the `[shutdown]` family (`Executor: waiting for
# worker exit`, `MPClient: ...`) is also printed while a failed start-up tears down. Older
# releases say nothing of a signal; Docker's kill event (cluster.logs.container_stream.StopRequested) does.

NCCL_INIT_HANG = KnownFailure(
    id="nccl_init_hang",
    family="nccl",
    role="cause",
    fatal=True,
    source="spark-bot's stall diagnosis: NCCL's initialisation lines, then silence",
    title="NCCL initialisation hang",
    cause="NCCL printed its initialisation lines, then went silent: NCCL initialisation hang "
    "(RoCE link, interface or GID problem between the nodes).",
    fix="Check the RoCE link (`ibdev2netdev` shows (Up) on {every_node}), the interfaces and the "
    "GID index (leave NCCL_IB_GID_INDEX unset); set NCCL_IB_HCA to the (Up) RoCE devices and "
    "NCCL_SOCKET_IFNAME to the fabric interface on {every_node}; relaunch with NCCL_DEBUG=INFO.",
)

RANKS_NOT_JOINED = KnownFailure(
    id="ranks_not_joined",
    family="distributed_init",
    role="cause",
    fatal=True,
    source="spark-bot's stall diagnosis: vLLM distributed/parallel_state.py's rank 0 line, then silence",
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
RANK0_INIT = re.compile(
    r"world_size=(?P<world>[2-9]|\d{2,}) rank=0 .*distributed_init_method=(?:tcp://)?(?P<address>[\w.:\[\]-]+)"
)
GROUP_FORMED = re.compile(r"is assigned as DP rank|rank 0 in world size")

STALLED = KnownFailure(
    id="stalled",
    family="engine_hang",
    role="symptom",
    fatal=True,
    source="spark-bot's stall diagnosis (the config's timeouts.stall)",
    title="Stalled in {phase}",
    cause="No output for {idle} in {phase}; the last line is the last thing that happened.",
    fix="Look at the log tail (attached) for what it was doing; if {phase} is legitimately "
    "slow (loading a large model's weights, compiling, capturing CUDA graphs), raise the stall "
    "timeout.",
)

UNRECOGNISED = KnownFailure(
    id="unrecognised",
    family="other",
    role="symptom",
    fatal=True,
    source="spark-bot's diagnosis: a death no signature explains",
    title="Failed in {where} (unrecognised error)",
    cause="{where} failed with no known failure signature. Likely cause, the first error in the "
    "log: {first_error}",
    fix="Check what that error names (a missing file or library, a flag, an address, a "
    "permission); the last lines of the log are attached. To share it: save the container log "
    "(`spark-bot logs NODE --lines 500`) and run `spark-bot diagnose FILE` on it.",
)

# --- Failures found without a log line --------------------------------------------------------
# What the controller finds by asking (preflight's checks, `ray status`, the API, Docker's
# streams) or by waiting too long. Each row's `title` is the failure's one-line summary; the
# `{name}`s are filled where the failure is found (`Reporter.known`).

_RELAUNCH_FIX = "read the head's log tail; `down` then `up` relaunches"

# fmt: off
IMAGE_MISSING = KnownFailure(
    id="image_missing", family="other", role="cause", fatal=True, source="spark-bot preflight",
    title="image {image} is not on {missing}",
    cause="the image was never pulled or loaded on that node",
    fix="on each of {missing}: `docker pull {image}`, or copy the head's image there with "
        "`sync-image` (`spark-bot sync-image --config F`, or the button in Slack), which streams "
        "`docker save` on the head into `docker load` on the node",
    remedy="sync-image",
)
IMAGE_DIFFERS = KnownFailure(
    id="image_differs", family="other", role="cause", fatal=True, source="spark-bot preflight",
    title="Docker image mismatch between nodes for {image}: {listing}",
    cause="different images on the nodes (Ray and vLLM then fail with a version mismatch)",
    fix="copy the head's image to every node that differs with `sync-image` "
        "(`spark-bot sync-image --config F`, or the button in Slack): it streams `docker save` on "
        "the head into `docker load` on each such node, so every node has the same image ID",
    remedy="sync-image",
)
IMAGE_NOT_ON_HEAD = KnownFailure(
    id="image_not_on_head", family="other", role="cause", fatal=True, source="spark-bot preflight and sync-image",
    title="image {image} is not on the head {head}",
    cause="the image was never pulled or built on the head, so `sync-image` (which copies the "
          "head's image to the other nodes) has nothing to copy",
    fix="`docker pull {image}` (or build it) on {head}, then `sync-image` copies it to the other "
        "nodes; or set container.image to an image the head has (`docker image ls` on {head})",
)
IMAGE_STILL_DIFFERS = KnownFailure(
    id="image_still_differs", family="other", role="cause", fatal=True, source="spark-bot sync-image",
    title="after the copy, the image IDs still differ: {listing}",
    cause="the node loaded the tarball but kept or made another image under the name (another "
          "image store, e.g. the containerd store on one node and not the other, or a tag "
          "changed meanwhile)",
    fix="compare `docker info -f '{{.Driver}}'` and `docker image inspect -f '{{.Id}}' {image}` on "
        "the nodes; use the same image store on every node, then run sync-image again",
)
MODEL_INCOMPLETE = KnownFailure(
    id="model_incomplete", family="model_files", role="cause", fatal=True, source="spark-bot preflight (cluster/resources/model_cache.py)",
    title="{model} is missing or incomplete on {nodes}: {defects}",
    cause="that node's Hugging Face cache lacks some of the model's files, or holds a shard "
          "shorter than its safetensors header says (an interrupted download); vLLM would start, "
          "then fail reading it after minutes, or download it again from the hub",
    fix="copy it from {source}, which has it complete, with `sync-model` (`spark-bot sync-model "
        "--config F`, or the button in Slack): rsync from {source} over the fabric, resumable, "
        "never from the hub",
    remedy="sync-model",
)
MODEL_NOT_CACHED = KnownFailure(
    id="model_not_cached", family="model_access", role="cause", fatal=True, source="spark-bot preflight and sync-model",
    title="{model} is complete on no node: {defects}",
    cause="the model was never downloaded completely into a node's Hugging Face cache (the one "
          "the containers mount), so there is nothing to copy and every node would download it",
    fix="download it once on {head} into the mounted cache (`HF_HOME={cache} hf download "
        "{model}`; `huggingface-cli download` with older huggingface_hub), then `spark-bot "
        "sync-model --config F` (or the button in Slack) copies it to the other nodes",
)
MODEL_CACHE_UNSEEN = KnownFailure(
    id="model_cache_unseen", family="model_access", role="cause", fatal=True, source="spark-bot sync-model",
    title="cannot copy {model}: {unseen}",
    cause="sync-model copies the model within the Hugging Face cache the containers mount, and "
          "the config mounts none where the model is looked for",
    fix="mount each node's cache at the container's HF_HOME in container.mounts (e.g. `source: "
        "~/.cache/huggingface`, `target: /root/.cache/huggingface`), or copy the files by hand",
)
MODEL_STILL_INCOMPLETE = KnownFailure(
    id="model_still_incomplete", family="model_files", role="cause", fatal=True, source="spark-bot sync-model",
    title="after the copy, {model} is still incomplete on {nodes}: {defects}",
    cause="the copy ended but the files are not all there at full size (the disk filled up, or "
          "the source changed meanwhile)",
    fix="check `df -h` on {nodes} and the source's cache, then run sync-model again: it goes on "
        "from where the copy stopped",
)
RSYNC_FAILED = KnownFailure(
    id="rsync_failed", family="other", role="cause", fatal=True, source="spark-bot sync-model (rsync's exit status)",
    title="copying {model} from {source} to {node} failed: rsync exited {status}: {stderr}",
    cause="rsync on {source} could not copy to {node} over SSH (rsync missing on a node, the "
          "source cannot ssh to the node's fabric address, or a disk is full)",
    fix="on {source}: `ssh {target}` must log in without a password (node-to-node SSH trust, the "
        "node's host key known) and `rsync --version` must work on both; then run sync-model "
        "again: it goes on from where it stopped",
)
INTERFACES_UNEXPECTED = KnownFailure(
    id="interfaces_unexpected", family="distributed_init", role="cause", fatal=True, source="spark-bot preflight",
    title="interfaces on {node}: {problem}",
    cause="the RoCE/fabric interfaces are not what the config expects",
    fix="check `ibdev2netdev` and `ip -o addr` on the node; set network.eth_if / network.ib_if "
        "explicitly if auto-detection picks the wrong ones",
)
MEMORY_SHORT = KnownFailure(
    id="memory_short", family="memory_host", role="cause", fatal=True, source="spark-bot preflight",
    title="not enough free memory on {short} ({memory}; need {need} GiB)",
    cause="unified memory is held by the page cache or other processes",
    fix="stop other GPU/memory users on the node, drop caches "
        "(`sync; echo 3 | sudo tee /proc/sys/vm/drop_caches`), or lower serve.gpu_memory_utilization",
)
MODEL_DOES_NOT_FIT = KnownFailure(
    id="model_does_not_fit", family="memory_gpu", role="cause", fatal=True, source="spark-bot preflight, cluster/resources/fit.py",
    title="{model} does not fit on {node}: one sequence of {max_model_len} tokens needs {need} GiB "
          "of KV cache a rank, {budget} GiB is left",
    cause="per rank, gpu_memory_utilization x the node's memory must hold the weights "
          "({weights} GiB), the engine's overhead and the KV cache of one max_model_len sequence; "
          "vLLM would load for minutes, then refuse to start",
    fix="{remedy}",
)
STALE_CONTAINER = KnownFailure(
    id="stale_container", family="other", role="cause", fatal=True, source="spark-bot preflight",
    title="a container named {container} already exists ({listing})",
    cause="a previous launch is still there (running or stopped)",
    fix="run `down` first, or `up --replace` to remove it and launch again",
)
LAUNCH_IN_PROGRESS = KnownFailure(
    id="launch_in_progress", family="other", role="cause", fatal=True,
    source="spark-bot's launch lease on the head (cluster/operations/launch_lease.py)",
    title="another launch of {cluster} is running: {holder}",
    cause="{holder} is launching this cluster right now; its containers are no leftovers, and "
          "replacing them would kill that launch",
    fix="wait for it to end (its Ready or its failure), or cancel it where it runs; to take "
        "the cluster from it anyway, `up --replace --take-over` on the command line. A crashed "
        "launch renews nothing: its lease lapses {stale} s after its last renewal",
)
FOREIGN_CONTAINER = KnownFailure(
    id="foreign_container", family="other", role="cause", fatal=True, source="spark-bot preflight",
    title="a container named {container} on {node} was not started by spark-bot ({state})",
    cause="someone started a container under the name this cluster's config gives ours "
          "(container.name); spark-bot removes only what it started, or what a question named and a "
          "user confirmed",
    fix="look at it on {node} (`docker inspect {container}`); if it may go, remove it by hand with "
        "`docker rm -f {container}` (or answer yes to `/spark up`'s Replace question, which names it), "
        "or give this cluster another container.name",
)
SS_FAILED = KnownFailure(
    id="ss_failed", family="other", role="cause", fatal=True, source="spark-bot preflight",
    title="cannot list listening ports on {node}: `ss` exited {status} ({stderr})",
    cause="the `ss` tool (iproute2) is missing or failed on the node",
    fix="install iproute2 on the node (`sudo apt install iproute2`)",
)
PORT_TAKEN = KnownFailure(
    id="port_taken", family="port_in_use", role="cause", fatal=True, source="spark-bot preflight",
    title="a port spark-bot needs ({ports}) is already in use on {node}",
    cause="another server (perhaps a vLLM or Ray started by hand) listens on it",
    fix="stop it (`ss -ltnp` on {node} names the process) or change serve.port / "
        "serve.ray_port / serve.master_port",
)
DOCKER_REFUSED = KnownFailure(
    id="docker_refused", family="other", role="cause", fatal=True, source="spark-bot launch (Docker's answer)",
    title="Docker refused to create or start the container on {node}: {message}",
    cause="the container settings are not accepted by this node's Docker engine",
    fix="check the container section of the config (devices, GPU request, mounts, ulimits) "
        "against the node (`docker info`; NVIDIA container toolkit for gpus: true)",
)
LAUNCHER_FAILED = KnownFailure(
    id="launcher_failed", family="other", role="cause", fatal=True,
    source="spark-bot launch (the operator's launcher's exit status)",
    title="the launcher `{command}` exited with status {status} on {node} before the server was ready",
    cause="the operator's launch script failed: its last lines (attached) say why",
    fix="run it by hand on {node} (`cd {cwd} && {command}`) to see the error, correct the script "
        "or its arguments (recipe launcher.command), then `up` again; `down` removes what it "
        "left ({container} on every node)",
)
LAUNCHER_KILLED = KnownFailure(
    id="launcher_killed", family="other", role="cause", fatal=True,
    source="spark-bot launch (the operator's launcher's exit status)",
    title="the launcher `{command}` was killed on {node} before the server was ready",
    cause="the script ended without an exit status: a signal killed it (someone or something "
          "on {node}: `kill`, the OOM killer, a reboot)",
    fix="look on {node} for who stopped it (`journalctl`, `dmesg` for the OOM killer); `up` "
        "again; `down` removes what it left ({container} on every node)",
)
LAUNCHER_CONTAINERS_MISSING = KnownFailure(
    id="launcher_containers_missing", family="other", role="cause", fatal=True,
    source="spark-bot launch (Docker's inspect of the launcher's containers)",
    title="the launcher did not start {container} on {missing} within {limit} s",
    cause="the script started no container of that name there (another name, another node, "
          "or it failed before; its exit status: {status})",
    fix="make recipe launcher.container the name the script gives its containers (its "
        "`docker run --name`), on every node of the recipe; read the launcher's last lines "
        "(attached); if it is merely slow, raise timeouts.containers",
)
RAY_INCOMPLETE = KnownFailure(
    id="ray_incomplete", family="ray_cluster", role="cause", fatal=True, source="ray status, during spark-bot launch",
    title="Ray shows {active_nodes}/{want_nodes} nodes and {ray_gpus}/{want_gpus} GPUs",
    cause="a worker did not join the Ray cluster, or its GPU is not exposed",
    fix="check the worker's log (`logs worker`), the fabric link and IPs; "
        "`--gpus all` (container.gpus: true) on every node",
)
API_UNEXPECTED = KnownFailure(
    id="api_unexpected", family="other", role="symptom", fatal=True, source="spark-bot launch (the head's API)",
    title="{checkpoint}: {evidence}",
    cause="the API server started but does not answer as expected",
    fix="read the head's log tail below; `verify` re-checks; `down` then `up` restarts",
)
PHASE_TIMEOUT = KnownFailure(
    id="phase_timeout", family="other", role="symptom", fatal=True, source="spark-bot launch (the config's timeouts)",
    title="timed out in {phase}",
    cause="{checkpoint} not reached within the {phase} timeout ({limit} s)",
    fix="read the log tail for the last step reached; if the phase is legitimately slow, "
        "raise timeouts.{phase} in the config",
)
STOPPED_ON_REQUEST = KnownFailure(
    id="stopped_on_request", family="other", role="cause", fatal=True,
    source="spark-bot launch (Docker's kill event, or the log's shutdown line)",
    title="{checkpoint}: stopped on request: {how}",
    cause="someone stopped the cluster's containers while it was launching (a `down`, another "
          "spark-bot, or `docker stop` by hand)",
    fix="check who stopped it (`docker events` on the node); `up` launches again",
)
FOLLOW_LOST = KnownFailure(
    id="follow_lost", family="other", role="symptom", fatal=True, source="spark-bot monitor (Docker's log and event streams)",
    title="{reason} while waiting for: {checkpoint}",
    cause="the node, its sshd or its Docker engine went away",
    fix="check that the node is up, then run verify; `down` cleans up",
)
CONTAINER_REMOVED = KnownFailure(
    id="container_removed", family="other", role="cause", fatal=True, source="spark-bot monitor (Docker's log stream)",
    title="{reason} while waiting for: {checkpoint}",
    cause="the container was removed (by hand, or by another spark-bot or launcher)",
    fix="find out who removed it (`docker events` on the node); `up` launches again",
)
CONTAINER_NOT_RUNNING = KnownFailure(
    id="container_not_running", family="other", role="symptom", fatal=True, source="spark-bot verify (Docker's inspect)",
    title="{container} on {node} is {state}",
    cause="the container is not running",
    fix="`up` launches the cluster (`down` first if a stopped container remains)",
)
CONTAINER_IMAGES_DIFFER = KnownFailure(
    id="container_images_differ", family="other", role="cause", fatal=True, source="spark-bot verify (Docker's inspect)",
    title="the containers run different images: {listing}",
    cause="the nodes had different images when launched",
    fix="make the image identical on every node, then `down` and `up`",
)
RAY_NODE_LEFT = KnownFailure(
    id="ray_node_left", family="ray_cluster", role="cause", fatal=True, source="ray status, during spark-bot verify",
    title=RAY_INCOMPLETE.title,
    cause="a node left the Ray cluster",
    fix="check the worker's log (`logs worker`); `down` then `up` relaunches",
)
API_UNHEALTHY = KnownFailure(
    id="api_unhealthy", family="other", role="symptom", fatal=True, source="spark-bot verify (GET /health)",
    title="{detail}",
    cause="the API server is not healthy",
    fix=_RELAUNCH_FIX,
)
API_NOT_ANSWERING = KnownFailure(
    id="api_not_answering", family="other", role="symptom", fatal=True, source="spark-bot verify (GET /v1/models)",
    title="GET /v1/models failed: {error}",
    cause="the API server does not answer",
    fix=_RELAUNCH_FIX,
)
WRONG_MODEL = KnownFailure(
    id="wrong_model", family="other", role="cause", fatal=True, source="spark-bot verify (GET /v1/models)",
    title="GET /v1/models lists {served}, not {model}",
    cause="a different model is being served",
    fix="check serve.served_model_name",
)
ENGINE_NOT_ANSWERING = KnownFailure(
    id="engine_not_answering", family="engine_hang", role="symptom", fatal=True, source="spark-bot verify (a test completion)",
    title="test completion failed: {error}",
    cause="the engine does not answer",
    fix=_RELAUNCH_FIX,
)
API_DOWN = KnownFailure(
    id="api_down", family="other", role="symptom", fatal=True, source="spark-bot watch (GET /health)",
    title="the API stopped answering: {detail}",
    cause="the API server is down or hung although its container runs",
    fix="read the head's log tail; `verify` shows what still works; `down` then `up` relaunches",
)
API_DOWN_NODE_LOST = KnownFailure(
    id="api_down_node_lost", family="other", role="symptom", fatal=True, source="spark-bot watch (GET /health)",
    title="the API stopped answering while {node} could not be followed: {detail}",
    cause="{node} is the likely cause: {lost} (its Docker engine, its SSH or the node itself went away), "
          "and the server stopped answering after that",
    fix="check that {node} is up (`ssh` to it, `systemctl status docker`), read the head's log tail; "
        "`down` then `up` relaunches",
)
SERVING_HUNG = KnownFailure(
    id="serving_hung", family="engine_hang", role="symptom", fatal=True,
    source="spark-bot watch (a canary completion, the server's /metrics)",
    title="serving hung: {detail}",
    cause="the API answers /health but the engine generates nothing: its workers are stuck, "
          "most often in a collective between the nodes (an NCCL hang, a fabric link problem) "
          "or a node short of memory",
    fix="read the last lines of every node's log (below) for `No available shared memory broadcast "
        "block` or NCCL lines; `down` then `up` relaunches; if it recurs: " + NEUTRAL_WORDS["nccl_hang_fix"],
)
_OOM_FIX = (
    "lower serve.gpu_memory_utilization (e.g. 0.80) or serve.max_model_len / max_num_seqs, then "
    "`down` and `up`; run an earlyoom-style guard on the node (earlyoom or systemd-oomd) so a "
    "runaway process is stopped before the node freezes; `dmesg -T | grep -i oom` on {node} "
    "names what was killed"
)
CONTAINER_OOM_KILLED = KnownFailure(
    id="container_oom_killed", family="memory_host", role="cause", fatal=True,
    source="spark-bot watch (Docker's oom event, State.OOMKilled)",
    title="the container on {node} was killed for lack of memory during {checkpoint}",
    cause="memory ran out on {node} and the kernel's OOM killer killed the container's "
          "process (where the GPU shares the host's memory, --gpu-memory-utilization is not a "
          "hard cap; the page cache, other processes and long contexts add to it)",
    fix=_OOM_FIX,
)
KERNEL_OOM_KILL = KnownFailure(
    id="kernel_oom_kill", family="memory_host", role="cause", fatal=True,
    source="spark-bot watch (the node's /proc/vmstat oom_kill)",
    title="the kernel's OOM killer struck {kills} time(s) on {node} while serving ({memory})",
    cause="unified memory ran out on {node}: the kernel killed a process to free memory (the "
          "engine's, or another process on the node)",
    fix=_OOM_FIX,
)
FABRIC_LINK_DOWN = KnownFailure(
    id="fabric_link_down", family="nccl", role="cause", fatal=True,
    source="spark-bot's probe after a death (/sys/class/net/<if>/operstate)",
    title="the fabric link {interface} on {node} is {state}",
    cause="the fabric interface {interface} on {node} reports operstate `{state}`: the nodes "
          "cannot reach each other, so Ray lost the node and the engine's collectives stop",
    fix="check the QSFP cable and the port on both nodes (`ip link show {interface}`, "
        "`ibdev2netdev`); bring the link up (`sudo ip link set {interface} up`), then `down` "
        "and `up` to relaunch",
)
FABRIC_UNREACHABLE = KnownFailure(
    id="fabric_unreachable", family="nccl", role="cause", fatal=True,
    source="spark-bot's probe after a death (ping over the fabric)",
    title="{node} cannot reach {peer} over the fabric ({address})",
    cause="the fabric links are up but {node} gets no answer from {peer} at {address}: a "
          "cable, switch, address or firewall problem between the nodes",
    fix="from {node}: `ping {address}`; check both nodes' fabric addresses (`ip -o addr`), "
        "routes and firewall; then `down` and `up`",
)
NODE_ENGINE_GONE = KnownFailure(
    id="node_engine_gone", family="other", role="cause", fatal=True,
    source="spark-bot's probe after a death (Docker's /version)",
    title="the Docker engine on {node} does not answer ({problem})",
    cause="{node}'s Docker engine went away (restarted, crashed or hung), taking or losing its "
          "containers",
    fix="on {node}: `systemctl status docker`, `journalctl -u docker`; when it answers, `down` "
        "then `up`",
)
RAY_NODES_MISSING = KnownFailure(
    id="ray_nodes_missing", family="ray_cluster", role="cause", fatal=True,
    source="spark-bot's probe after a death (ray status on the head)",
    title="Ray on the head sees {active_nodes} of {want_nodes} nodes",
    cause="a node left the Ray cluster (its raylet died or lost the head); the probe found "
          "nothing else wrong with it",
    fix="read that node's log (`logs worker`) for why its raylet exited; `down` then `up`",
)
CLUSTER_NOT_UP = KnownFailure(
    id="cluster_not_up", family="other", role="cause", fatal=True, source="spark-bot bench (Docker's inspect)",
    title="no running {container} container on {node}",
    cause="the cluster is not up",
    fix="`spark-bot up` first",
)
ENGINE_BUSY = KnownFailure(
    id="engine_busy", family="other", role="cause", fatal=True, source="spark-bot bench (the server's /metrics)",
    title="refused to measure: {busy}",
    cause="other requests share the engine: every figure would be too low",
    fix="wait until the other requests finish, or pass --allow-busy to measure anyway",
)
_UNIFIED_MEMORY = (
    "with unified memory (memory.unified) the GPU's memory is the node's, and CUDA's free figure "
    "leaves out the page cache "
    "(vllm-project/vllm#35313): vLLM refuses a rank with less free memory at start-up than "
    "gpu_memory_utilization x its memory (vllm/v1/worker/utils.py request_memory), after the "
    "minutes of loading the other ranks did"
)
_PAGE_CACHE_TITLE = "the page cache holds the memory vLLM needs on {short}: {listing}"
_PAGE_CACHE_CAUSE = (
    "the node's memory is free but for its page cache (the last model's files, copies, logs), "
    "which the kernel gives back only when asked; " + _UNIFIED_MEMORY
)
MEMORY_PAGE_CACHE = KnownFailure(
    id="memory_page_cache", family="memory_host", role="cause", fatal=True,
    source="spark-bot preflight (/proc/meminfo; cluster/resources/startup_memory.py)",
    title=_PAGE_CACHE_TITLE,
    cause=_PAGE_CACHE_CAUSE,
    fix="drop the page cache with `drop-caches` (`spark-bot drop-caches --config F`, or the "
        "button in Slack): it runs the config's `{command}` on every node; then `up` again",
    remedy="drop-caches",
)
MEMORY_PAGE_CACHE_BY_HAND = KnownFailure(
    id="memory_page_cache_by_hand", family="memory_host", role="cause", fatal=True,
    source="spark-bot preflight (/proc/meminfo; cluster/resources/startup_memory.py)",
    title=_PAGE_CACHE_TITLE,
    cause=_PAGE_CACHE_CAUSE,
    fix="on {short}: `sync; echo 3 | sudo tee /proc/sys/vm/drop_caches`, then `up` again; to let "
        "spark-bot do it (the `drop-caches` command, a button in Slack), name the command in "
        "memory.drop_caches (e.g. [sudo, -n, /usr/local/sbin/drop-caches]) and grant it on the "
        "nodes (docs/reliability.md, 'Before the load')",
)
MEMORY_IN_USE = KnownFailure(
    id="memory_in_use", family="memory_host", role="cause", fatal=True,
    source="spark-bot preflight (/proc/meminfo; cluster/resources/startup_memory.py)",
    title="memory in use on {short} leaves less than vLLM claims: {listing}",
    cause="something on the node holds its memory (another process or container, a model still "
          "loaded, memory not given back after a crash); dropping the page cache would not "
          "free enough; " + _UNIFIED_MEMORY,
    fix="find what holds it on {short} (`ps -eo rss,pid,comm --sort=-rss | head`, `docker ps`) "
        "and stop it; or lower serve.gpu_memory_utilization to {utilization} or less; if "
        "nothing visible holds it, reboot the node",
)
_NOT_BACK = (
    "{node}: {available} GiB available after waiting {waited} s, {before} GiB before the last "
    "launch (its containers have stopped)"
)
MEMORY_HELD = KnownFailure(
    id="memory_held", family="memory_host", role="cause", fatal=True,
    source="spark-bot preflight (Docker's events of our last container, /proc/meminfo, ps)",
    title="memory held on " + _NOT_BACK + ": {holders}",
    cause="the last launch's memory did not come back when its container stopped: the processes "
          "named hold it (a model server or engine left running, a process outside the container)",
    fix="stop {holder} on {node} (or find who runs it), then `up` again",
)
MEMORY_NOT_RETURNED = KnownFailure(
    id="memory_not_returned", family="memory_host", role="cause", fatal=True,
    source="spark-bot preflight (Docker's events of our last container, /proc/meminfo, ps)",
    title="memory not returned on " + _NOT_BACK,
    cause="the last launch's memory did not come back when its container stopped, and no "
          "process `ps` on the node shows holds it (the GPU driver's, or a process in another "
          "PID namespace): not returned",
    fix="reboot {node} (`sudo reboot`), then `up` again; if it only comes back slowly, raise "
        "memory.return_timeout",
)
FABRIC_MTU_MISMATCH = KnownFailure(
    id="fabric_mtu_mismatch", family="nccl", role="cause", fatal=True,
    source="spark-bot preflight (/sys/class/net/<if>/mtu on every node)",
    title="the fabric's MTU differs between the nodes: {listing}",
    cause="RoCE needs the same MTU at both ends of the link: frames larger than one end takes "
          "are dropped, and NCCL's first large transfer stalls or fails (ibv_modify_qp, a "
          "collective timeout) minutes into the load",
    fix="set the same MTU, 9000, on both ends: `sudo ip link set dev {interface} mtu 9000` on "
        "{lower} (and `mtu: 9000` for it in the node's netplan, so a reboot keeps it); then "
        "`up` again",
)
FABRIC_SUBNET_MISSING = KnownFailure(
    id="fabric_subnet_missing", family="nccl", role="cause", fatal=True,
    source="spark-bot preflight (`ibdev2netdev`, `ip -o -f inet addr` on every node); NVIDIA "
           "dgx-spark-playbooks connect-two-sparks (two subnets, 2026-07)",
    title="{node} has no address on the fabric subnet {subnet}",
    cause="{peer} holds {peer_address} on {peer_netdev}, but none of {node}'s RoCE interfaces "
          "that are Up ({netdevs}) is on {subnet}: NCCL pairs the RDMA devices of the ranks "
          "(NCCL_IB_HCA lists every device Up), and the one on {subnet} has no path to its peer "
          "(the load stalls, then fails with a connection timeout)",
    fix="configure the other subnet on {node}: give the port's interface that {peer} has on "
        "{subnet} ({peer_netdev}) an address on it in {node}'s netplan (NVIDIA's layout: "
        "`enp1s0f1np1` 192.168.100.x/24 and `enP2p1s0f1np1` 192.168.101.x/24 on both nodes), "
        "`sudo netplan apply`; or remove {peer_address} from {peer}; then `up` again",
)
FABRIC_OTHER_PORT = KnownFailure(
    id="fabric_other_port", family="nccl", role="cause", fatal=True,
    source="spark-bot preflight (`ibdev2netdev`, `ip -o -f inet addr` on every node); NVIDIA "
           "dgx-spark-playbooks connect-two-sparks Step 2 (the same physical port on both)",
    title="the cables are on different ports: {node}'s fabric is Up on {netdevs}, which holds "
          "no address on {subnet}",
    cause="{peer} reaches the fabric on {peer_netdev} ({peer_address}); {node}'s RoCE devices "
          "that are Up are the other physical port's ({netdevs}), and the addresses its netplan "
          "gives are on the port without the cable: the nodes have no path on {subnet}",
    fix="plug the cable into the same port on both nodes (NVIDIA's playbook: the same "
        "physical port on each node; `ibdev2netdev` then shows the same names Up on both), or "
        "configure the other subnet on {node}'s port that is Up ({netdevs}: an address on "
        "{subnet} in its netplan, `sudo netplan apply`); then `up` again",
)
FABRIC_TEST_FAILED = KnownFailure(
    id="fabric_test_failed", family="nccl", role="cause", fatal=True,
    source="spark-bot fabric-test (perftest's ib_write_bw, nccl-tests' all_reduce_perf)",
    title="the fabric could not be measured between {pairs}",
    cause="{reasons}",
    fix="install perftest on every node (`sudo apt install perftest`: `ib_write_bw`, as NVIDIA's "
        "benchmarking guide does), check `ibdev2netdev` and the fabric addresses on both "
        "(`spark-bot preflight` names a missing subnet or a cable on the other port), then "
        "`fabric-test` again",
)
DROP_CACHES_NOT_CONFIGURED = KnownFailure(
    id="drop_caches_not_configured", family="memory_host", role="cause", fatal=True, source="spark-bot drop-caches",
    title="the config names no command to drop the page cache (memory.drop_caches)",
    cause="spark-bot drops a node's page cache only with a command the config names and the "
          "node grants: it runs nothing as root of its own accord",
    fix="on each node, install a script that drops the cache (`/usr/local/sbin/drop-caches`: "
        "`#!/bin/sh` `sync` `echo 3 > /proc/sys/vm/drop_caches`, owned by root, mode 755), let "
        "the SSH user run it without a password (sudoers: `USER ALL=(root) NOPASSWD: "
        "/usr/local/sbin/drop-caches`), then set `memory.drop_caches: [sudo, -n, "
        "/usr/local/sbin/drop-caches]`; or run `sync; echo 3 | sudo tee "
        "/proc/sys/vm/drop_caches` on the node by hand",
)
DROP_CACHES_REFUSED = KnownFailure(
    id="drop_caches_refused", family="memory_host", role="cause", fatal=True, source="spark-bot drop-caches",
    title="`{command}` exited {status} on {node}: {stderr}",
    cause="the node refused or failed the command the config names (memory.drop_caches): sudo "
          "asks a password when no sudoers rule lets the SSH user run it (`sudo -n` then says "
          "`a password is required`), or the script is missing",
    fix="on {node}: `sudo -n -l` as the SSH user must list the script; add the sudoers rule "
        "(`USER ALL=(root) NOPASSWD: /usr/local/sbin/drop-caches`) and check the script exists; "
        "then run drop-caches again",
)
IMAGE_NOT_BUILT_FOR_GPU = KnownFailure(
    id="image_not_built_for_gpu", family="gpu_arch", role="cause", fatal=True,
    source="spark-bot preflight (CUDA's compatibility rules; torch.cuda.get_arch_list)",
    title="image {image} is not built for the GPU on {node} ({gpu_arch})",
    cause="the image's torch and vLLM kernels carry machine code for other GPUs only ({built_for}) "
          "and no PTX at or below {gpu_arch} the driver could compile: torch warns `{gpu_arch} is "
          "not compatible with the current PyTorch installation` and the load fails after "
          "minutes with `CUDA error: no kernel image is available for execution on the device`",
    fix="use an image whose torch and vLLM are built for {gpu} (compute capability "
        "{capability}: machine code for {gpu_arch}, or for a lower minor of the same major, or "
        "PTX at or below it), one made for this GPU; or build one with `TORCH_CUDA_ARCH_LIST` "
        "naming it (`{capability}`, or `{ptx}` for PTX the driver compiles) for torch and "
        "vLLM's kernels; then set container.image and `sync-image`",
)
# A node that dropped out for hardware reasons (cluster.postmortem's node checks). What only
# real hardware shows (a power-off under load, an Xid, an AER error, throttling) is named from
# the node's own records: its boot id, its kernel log, nvidia-smi.
_FIRMWARE = (
    "update the node's software and firmware (DGX Dashboard's update, or `sudo apt update && "
    "sudo apt full-upgrade` and `sudo fwupdmgr refresh && sudo fwupdmgr update`, then reboot)"
)
_COOLING = (
    "check its cooling: nothing blocking its vents, room for air around it, the room not hot"
)
_POWER = (
    "check its power: the power adapter that came with it, plugged straight into a wall "
    "socket (no extension or shared strip); the community launcher's README suggests capping "
    "the GPU's clocks under load (`sudo nvidia-smi -lgc 200,2150`)"
)
NODE_REBOOTED = KnownFailure(
    id="node_rebooted", family="node_hardware", role="cause", fatal=True,
    source="spark-bot's probe after a death (/proc/sys/kernel/random/boot_id against the one the launch recorded, /proc/uptime)",
    title="{node} rebooted while serving (its boot id changed; up {uptime})",
    cause="{node} restarted under the cluster: its boot id is not the one the launch recorded "
          "and it has been up only {uptime}, so everything on it died with it (the failure the "
          "log showed follows from that). A power-off or reset under load with no shutdown "
          "logged points at power or heat",
    fix="on {node}: `journalctl -k -b -1 -n 50` shows how the boot before ended (no shutdown "
        "lines at its end: power lost or a hard reset); " + _POWER + "; " + _COOLING + "; "
        + _FIRMWARE + "; then `down` and `up`",
)
NODE_NOT_ANSWERING = KnownFailure(
    id="node_not_answering", family="node_hardware", role="cause", fatal=True,
    source="spark-bot's probe after a death (SSH to the node, opened again)",
    title="{node} does not answer at all ({problem})",
    cause="{node} stopped answering when its containers died, and a new SSH connection is "
          "refused or times out: it is off, restarting, or cut off from the bot (a node that "
          "powered off under load is this until it is back)",
    fix="check that {node} is on and reachable (its power and its cable; `ping` and `ssh` "
        "it); once it is back, `journalctl -k -b -1 -n 50` on it shows how its last boot "
        "ended; " + _POWER + "; then `down` and `up`",
)
# What NVIDIA's catalog says to do first (cluster.diagnosis.xids: its resolution bucket), as a fix.
XID_FIXES: dict[str, str] = {
    "RESTART_BM": "power-cycle {node}: shut it down, unplug it for a minute, start it (the GPU "
                  "is off the bus until the machine restarts)",
    "RESET_GPU": "reboot {node} (NVIDIA's catalog: reset the GPU; a reboot resets it for sure)",
    "WORKFLOW_XID_48": "reboot {node}: the driver retires or remaps the failed memory at the "
                       "next start",
    "XID_154": "do what the line's recovery action says: a GPU reset (a reboot of {node}) or "
               "a power cycle",
    "WORKFLOW_NVLINK_ERR": "reboot {node}",
    "RESTART_APP": "relaunch: `down` then `up` (NVIDIA's catalog: restart the application; the "
                   "engine's own code or a kernel it ran faulted)",
    "": "reboot {node}, and read NVIDIA's Xid catalog for the code",
}
GPU_XID = KnownFailure(
    id="gpu_xid", family="node_hardware", role="cause", fatal=True,
    source="spark-bot's probe after a death (the kernel log's NVRM Xid lines; NVIDIA's Xid catalog, cluster/xids.py)",
    title="GPU error on {node}: Xid {code}, {description}",
    cause="the GPU driver on {node} logged Xid {code} ({mnemonic}: {description}; NVIDIA's "
          "catalog: {resolution}), and the engine's rank on that GPU died with it",
    fix="{xid_fix}; if it recurs: " + _POWER + "; " + _COOLING + "; " + _FIRMWARE + "; and "
        "contact NVIDIA support with the output of `sudo nvidia-bug-report.sh`; then `down` "
        "and `up`",
)
GPU_APPLICATION_XID = KnownFailure(
    id="gpu_application_xid", family="cuda_runtime", role="cause", fatal=True,
    source="spark-bot's probe after a death (the kernel log's NVRM Xid lines; NVIDIA's Xid catalog, cluster/xids.py)",
    title="the GPU on {node} faulted in the engine's work: Xid {code}, {description}",
    cause="the GPU driver on {node} logged Xid {code} ({mnemonic}: {description}); NVIDIA's "
          "catalog files it under {resolution}: the program on the GPU (the engine, a kernel "
          "of its image) faulted, not the hardware",
    fix="{xid_fix}; if it recurs with this image and not another, the image's kernels are at "
        "fault (try another vLLM image or `--enforce-eager`)",
)
PCIE_AER_ERROR = KnownFailure(
    id="pcie_aer_error", family="node_hardware", role="cause", fatal=True,
    source="spark-bot's probe after a death (the kernel's AER lines, torvalds/linux drivers/pci/pcie/aer.c)",
    title="PCIe error on {node}: {severity} on {device}",
    cause="the kernel on {node} logged an uncorrectable PCIe error (AER) on {device}: the link "
          "to that device (the GPU or the ConnectX-7) failed, and what ran on it stopped",
    fix="power-cycle {node} (shut it down, unplug it for a minute, start it); " + _FIRMWARE
        + "; if it recurs: " + _POWER + "; " + _COOLING + "; and contact NVIDIA support; then "
        "`down` and `up`",
)
# What to do when nvidia-smi says what holds the clocks back (cluster.nodes.gpu_clocks' verdicts).
THROTTLE_FIXES: dict[str, str] = {
    "thermal": "on {node}: " + _COOLING + "; let it cool, then relaunch",
    "power": "on {node}: " + _POWER,
}
GPU_THROTTLED = KnownFailure(
    id="gpu_throttled", family="node_hardware", role="cause", fatal=True,
    source="spark-bot's probe after a death (nvidia-smi clocks_event_reasons.active: NVML's clock event reasons)",
    title="the GPU on {node} is held back by {kind} ({reasons}; SM {clocks})",
    cause="nvidia-smi on {node} reports {reasons}: its GPU runs well below its clocks, so its "
          "rank falls behind and the collectives of every rank wait for it",
    fix="{kind_fix}; watch it under load: `nvidia-smi --query-gpu=clocks.sm,"
        "clocks_event_reasons.active,temperature.gpu,power.draw --format=csv -l 5`; then "
        "`down` and `up`",
)
GPU_LOW_CLOCKS = KnownFailure(
    id="gpu_low_clocks", family="node_hardware", role="cause", fatal=True,
    source="spark-bot's probe after a death (nvidia-smi clocks.sm against clocks.max.sm)",
    title="the GPU on {node} is left at low clocks (SM {clocks}, no reason given)",
    cause="nvidia-smi on {node} reports its SM clock below half its maximum while the GPU is "
          "not idle and no throttle reason is active: a GPU left in a low clock state (after a "
          "fault, or clocks locked low), which holds its rank back",
    fix="on {node}: `sudo nvidia-smi -rgc` resets locked clocks; if they stay low, shut it "
        "down and unplug its power adapter for a minute; " + _FIRMWARE + "; then `down` and `up`",
)
# fmt: on

# The rows no log line matches (spark-bot's own findings: preflight, the API checks, the probe,
# the watch): with SIGNATURES, the whole table (tests/cluster/diagnosis/test_failure_table.py checks that each row
# is in exactly one of them).
ROWS_WITHOUT_A_LOG_LINE: tuple[KnownFailure, ...] = (
    NCCL_INIT_HANG,
    RANKS_NOT_JOINED,
    STALLED,
    UNRECOGNISED,
    IMAGE_MISSING,
    IMAGE_DIFFERS,
    IMAGE_NOT_ON_HEAD,
    IMAGE_STILL_DIFFERS,
    MODEL_INCOMPLETE,
    MODEL_NOT_CACHED,
    MODEL_CACHE_UNSEEN,
    MODEL_STILL_INCOMPLETE,
    RSYNC_FAILED,
    INTERFACES_UNEXPECTED,
    MEMORY_SHORT,
    MODEL_DOES_NOT_FIT,
    STALE_CONTAINER,
    LAUNCH_IN_PROGRESS,
    FOREIGN_CONTAINER,
    SS_FAILED,
    PORT_TAKEN,
    DOCKER_REFUSED,
    LAUNCHER_FAILED,
    LAUNCHER_KILLED,
    LAUNCHER_CONTAINERS_MISSING,
    RAY_INCOMPLETE,
    API_UNEXPECTED,
    PHASE_TIMEOUT,
    STOPPED_ON_REQUEST,
    FOLLOW_LOST,
    CONTAINER_REMOVED,
    CONTAINER_NOT_RUNNING,
    CONTAINER_IMAGES_DIFFER,
    RAY_NODE_LEFT,
    API_UNHEALTHY,
    API_NOT_ANSWERING,
    WRONG_MODEL,
    ENGINE_NOT_ANSWERING,
    API_DOWN,
    API_DOWN_NODE_LOST,
    SERVING_HUNG,
    CONTAINER_OOM_KILLED,
    KERNEL_OOM_KILL,
    FABRIC_LINK_DOWN,
    FABRIC_UNREACHABLE,
    NODE_ENGINE_GONE,
    RAY_NODES_MISSING,
    CLUSTER_NOT_UP,
    ENGINE_BUSY,
    MEMORY_PAGE_CACHE,
    MEMORY_PAGE_CACHE_BY_HAND,
    MEMORY_IN_USE,
    MEMORY_HELD,
    MEMORY_NOT_RETURNED,
    FABRIC_MTU_MISMATCH,
    FABRIC_SUBNET_MISSING,
    FABRIC_OTHER_PORT,
    FABRIC_TEST_FAILED,
    DROP_CACHES_NOT_CONFIGURED,
    DROP_CACHES_REFUSED,
    IMAGE_NOT_BUILT_FOR_GPU,
    NODE_REBOOTED,
    NODE_NOT_ANSWERING,
    GPU_XID,
    GPU_APPLICATION_XID,
    PCIE_AER_ERROR,
    GPU_THROTTLED,
    GPU_LOW_CLOCKS,
)
# By id: what a Failed's signature names when it is not in the log table.
ROW_WITHOUT_A_LOG_LINE_BY_ID: dict[str, KnownFailure] = {
    row.id: row for row in ROWS_WITHOUT_A_LOG_LINE
}


def _render(text: str, values: Mapping[str, str | None]) -> str:
    """Fill `{name}` from values; names without a value (absent, or a group that did not take
    part in the match) are left as they are: no format() surprises with braces in fixes. An
    empty value (a tool's empty stderr) is filled as empty."""

    def sub(m: re.Match[str]) -> str:
        v = values.get(m.group(1))
        return v.strip() if isinstance(v, str) else m.group(0)

    return _FIELD.sub(sub, text)


def cluster_words(nodes: int | None = None, world_size: int | None = None) -> dict[str, str]:
    """What the texts' `{every_node}`, `{node_count}`, `{gpus}` and `{world_size}` say for this
    cluster (the config's node count and TP x PP), or in general when it is not known."""
    return {
        **NEUTRAL_WORDS,
        "every_node": "every node"
        if nodes is None
        else "both nodes"
        if nodes == 2
        else f"all {nodes} nodes",
        "node_count": "every node" if nodes is None else f"{nodes} node{'' if nodes == 1 else 's'}",
        "gpus": "TP x PP GPUs" if world_size is None else f"{world_size:.1f} GPU",
        "world_size": "TP x PP" if world_size is None else f"TP x PP ({world_size})",
    }


def for_cluster(config: ClusterConfig) -> tuple[tuple[FailureSignature, ...], dict[str, str]]:
    """This cluster's failure table (its knowledge file's rows first) and the words its texts
    use, as `LogDiagnoser` and `diagnose` take them."""
    return with_knowledge(config.knowledge), cluster_words(
        len(config.nodes), config.serve.world_size
    )


def with_knowledge(knowledge: Knowledge | None) -> tuple[FailureSignature, ...]:
    """The table an operator's knowledge file extends: its rows first (they are the newer,
    more specific knowledge), then the built-in ones."""
    if knowledge is None or not knowledge.signatures:
        return SIGNATURES
    taught = tuple(
        FailureSignature(
            id=row.id,
            family=row.family,
            role=row.role,
            fatal=row.fatal,
            title=row.title or row.id.replace("_", " "),
            cause=row.cause,
            fix=row.fix,
            pattern=re.compile(row.pattern),
            source=row.source or "the operator's knowledge file",
        )
        for row in knowledge.signatures
    )
    return taught + SIGNATURES
