"""The cluster's configuration: what the operator writes in YAML, validated once at the edge.

Everything later receives these typed objects; nothing deep in the code reads files or the
environment. Secrets are referenced by environment-variable name only and resolved by
`resolve_secrets` at the edge.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    field_validator,
    model_validator,
)

from cluster.diagnosis.family_ids import FamilyId
from cluster.errors import ConfigError
from cluster.redact import MASK, looks_secret, redact, secret_name

# Values that end up in remote commands or Docker API calls: each pattern admits no shell
# metacharacter, so even a quoting mistake downstream cannot turn config into code.
_NAME = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$"
_HOST = r"^[A-Za-z0-9][A-Za-z0-9.:-]{0,252}$"
_USER = r"^[a-z_][a-z0-9_-]{0,31}$"
_IFNAME = r"^[A-Za-z0-9][A-Za-z0-9_.@-]{0,14}$"
_IMAGE = r"^[a-z0-9][a-z0-9._/:@-]{0,254}$"
_MODEL = r"^/?[A-Za-z0-9][A-Za-z0-9._/-]{0,254}$"  # a hub id, or a path in the container
_ENV_NAME = r"^[A-Za-z_][A-Za-z0-9_]{0,127}$"
_SIZE = r"^[0-9]+[bkmgBKMG]?$"
_VLLM_ARG = r"^--[a-z0-9][a-z0-9-]*(=[A-Za-z0-9._:/,+-]*)?$|^[A-Za-z0-9._:/,+-]+$"
_SAFE_VALUE = re.compile(r"^[A-Za-z0-9._:/,=+@%-]*$")


def _ip(value: str) -> str:
    ipaddress.ip_address(value)
    return value


IPAddress = Annotated[str, AfterValidator(_ip)]
Name = Annotated[str, Field(pattern=_NAME)]
InterfaceName = Annotated[str, Field(pattern=_IFNAME)]
EnvName = Annotated[str, Field(pattern=_ENV_NAME)]
# The NAME of the bot's environment variable holding a secret: upper case, so that a pasted
# token (hf_..., xoxb-...) is refused instead of being kept, and echoed, as a name.
SecretSource = Annotated[str, Field(pattern=r"^[A-Z_][A-Z0-9_]{0,127}$")]
SECRET_LOOKING = re.compile(
    r"TOKEN|SECRET|PASSWORD|PASSWD|API_?KEY|PRIVATE|CREDENTIAL", re.IGNORECASE
)
Seconds = Annotated[float, Field(gt=0, le=86_400)]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class SSHConfig(_Model):
    host: str = Field(pattern=_HOST, description="address or host name sshd listens on")
    port: int = Field(22, ge=1, le=65535, description="sshd's port")
    user: str = Field(
        pattern=_USER,
        description="the user spark-bot logs in as (it needs the docker group, or root)",
    )
    key: Path | None = Field(None, description="private key; None uses the SSH agent")
    known_hosts: Path = Field(
        Path("~/.ssh/known_hosts"),
        description="the known_hosts file the node's host key is checked against (an unknown or changed key is refused)",
    )
    jump: Name | None = Field(None, description="name of the node to tunnel through")
    keepalive_interval: Seconds = Field(
        15, description="seconds between SSH keepalives (a dead link is found within three)"
    )
    config_file: Path | None = Field(
        None,
        description="an OpenSSH client config to honour (Host aliases, ProxyCommand...); "
        "none is read unless named, and agent forwarding stays off either way",
    )

    @field_validator("key", "known_hosts", "config_file")
    @classmethod
    def _no_nul(cls, path: Path | None) -> Path | None:
        if path is not None and "\x00" in str(path):
            raise ValueError("a path cannot hold a NUL character")
        return path


class NodeConfig(_Model):
    name: Name = Field(description="the node's name in messages, logs and `logs NODE`")
    driver: Literal["ssh", "local"] = Field(
        "ssh",
        description="ssh: reach the node over SSH (its Docker socket forwarded); local: this machine",
    )
    ssh: SSHConfig | None = Field(None, description="how to reach the node (driver ssh)")
    fabric_ip: IPAddress = Field(
        description="the node's address on the RoCE fabric: Ray, NCCL and the distributed store use it"
    )
    docker_socket: str = Field(
        "/var/run/docker.sock",
        pattern=r"^/[A-Za-z0-9._/-]+$",
        description="the Docker engine's socket on the node",
    )
    local_env: dict[EnvName, str] = Field(
        default_factory=dict,
        description="driver 'local': environment variables set for the node's host commands "
        "(e.g. PATH), on top of the bot's own environment",
    )
    gpus: int = Field(
        1, ge=1, le=16, description="the GPUs vLLM may use on this node (a DGX Spark has one)"
    )
    memory_gib: float | None = Field(
        None,
        gt=0,
        le=100_000,
        description="the memory vLLM sees on this node, for the fit check (a GB10 reports "
        "121.63 GiB); default: the node's MemTotal (unified memory)",
    )

    @model_validator(mode="after")
    def _ssh_for_ssh_driver(self) -> NodeConfig:
        if self.driver == "ssh" and self.ssh is None:
            raise ValueError("driver 'ssh' needs an 'ssh' section (host, user, key)")
        if self.driver != "local" and self.local_env:
            raise ValueError("local_env applies to driver 'local' only")
        return self


InterfaceChoice = Literal["auto"] | InterfaceName | list[InterfaceName]


class NetworkConfig(_Model):
    eth_if: InterfaceChoice = Field(
        "auto",
        description="the fabric's Ethernet interface (NCCL_SOCKET_IFNAME, GLOO_SOCKET_IFNAME): auto finds the one holding fabric_ip, or name it (or a list, one per node)",
    )
    ib_if: InterfaceChoice = Field(
        "auto",
        description="the RDMA devices NCCL may use (NCCL_IB_HCA): auto finds those that are up on the fabric, or name them",
    )
    link_speed_mbps: int = Field(
        200_000,
        ge=1,
        le=10_000_000,
        description="the fabric link's nominal speed (a Spark's ConnectX-7 port: 200 Gb/s); "
        "preflight warns of a link trained slower",
    )


class Mount(_Model):
    source: str = Field(
        pattern=r"^[~/][A-Za-z0-9._/-]*$",
        description="a folder on the node (`~` is the SSH user's home)",
    )
    target: str = Field(pattern=r"^/[A-Za-z0-9._/-]*$", description="where the container sees it")
    read_only: bool = Field(False, description="mount it read-only")


class ContainerConfig(_Model):
    image: str = Field(
        pattern=_IMAGE,
        description="the image every node runs (its ID must be the same everywhere: preflight checks)",
    )
    name: Name = Field(description="the container's name on every node")
    privileged: bool = Field(
        True, description="run privileged (the RDMA devices and IPC_LOCK without listing them)"
    )
    cap_add: list[Literal["IPC_LOCK", "SYS_NICE", "SYS_PTRACE"]] = Field(
        default_factory=list,
        description="capabilities added when not privileged (IPC_LOCK for RDMA memory registration)",
    )
    devices: list[Annotated[str, Field(pattern=r"^/dev/[A-Za-z0-9._/-]+$")]] = Field(
        default_factory=list,
        description="device nodes passed in when not privileged (e.g. /dev/infiniband)",
    )
    ipc: Literal["host", "private"] = Field(
        "host", description="host IPC, or a private one with shm_size"
    )
    shm_size: str | None = Field(
        "64g", pattern=_SIZE, description="/dev/shm's size with ipc private (e.g. 64g)"
    )
    ulimits: dict[Annotated[str, Field(pattern=r"^[a-z]+$")], tuple[int, int]] = Field(
        default_factory=lambda: {"nofile": (1048576, 1048576), "memlock": (-1, -1)},
        description="the container's ulimits: name -> (soft, hard); -1 is unlimited",
    )
    gpus: bool = Field(True, description="expose every GPU of the node (--gpus all)")
    init: bool = Field(
        True,
        description="Docker's init (tini) as PID 1: a stop's SIGTERM reaches vLLM and Ray even "
        "before they install their handlers (a bare PID 1 ignores it, and the stop waits out its grace)",
    )
    mounts: list[Mount] = Field(default_factory=list)
    env: dict[EnvName, str] = Field(
        default_factory=dict,
        description="environment variables in the container (values only from a safe alphabet; secrets go in secret_env)",
    )
    secret_env: dict[EnvName, SecretSource] = Field(
        default_factory=dict,
        description="container variable -> name of the bot's environment variable holding it",
    )

    @field_validator("env")
    @classmethod
    def _plain_values(cls, env: dict[str, str]) -> dict[str, str]:
        return _plain_env(env)


def _plain_env(env: dict[str, str]) -> dict[str, str]:
    for key, value in env.items():
        if SECRET_LOOKING.search(key):
            raise ValueError(
                f"env {key} looks like a secret: move it to secret_env ({key}: NAME of the "
                "bot's environment variable holding it) so its value never sits in the config"
            )
        if not _SAFE_VALUE.match(value):
            shown = "" if secret_name(key) or looks_secret(value) else f"={value!r}"
            raise ValueError(
                f"env {key}{shown}: values may hold letters, digits and ._:/,=+@%- only"
            )
    return env


class ServeConfig(_Model):
    model: str = Field(
        pattern=_MODEL,
        description="the Hugging Face repo id (or a path in the container) vllm serve loads",
    )
    served_model_name: Name | None = Field(
        None, description="the name the API serves it under (default: the model)"
    )
    backend: Literal["ray", "mp"] = Field(
        "ray",
        description="the distributed executor: ray (a Ray cluster over the nodes) or mp (one headless vllm per node)",
    )
    tensor_parallel_size: int = Field(
        2, ge=1, le=64, description="--tensor-parallel-size: the ranks each layer is split over"
    )
    pipeline_parallel_size: int = Field(
        1, ge=1, le=64, description="--pipeline-parallel-size: the stages the layers are split into"
    )
    gpu_memory_utilization: float = Field(
        0.90,
        gt=0,
        le=1,
        description="--gpu-memory-utilization: the share of each GPU's memory vLLM may take",
    )
    max_model_len: int | None = Field(
        None, ge=16, le=10_000_000, description="--max-model-len (default: the model's own)"
    )
    max_num_seqs: int | None = Field(
        None, ge=1, le=65536, description="--max-num-seqs (default: vLLM's)"
    )
    reasoning_parser: Name | None = Field(
        None,
        description="--reasoning-parser (e.g. qwen3): the answer's reasoning apart from its content",
    )
    trust_remote_code: bool = Field(False, description="--trust-remote-code")
    extra_args: list[Annotated[str, Field(pattern=_VLLM_ARG)]] = Field(
        default_factory=list,
        description="further vllm serve arguments, each an `--flag` or `--flag=value` from a safe alphabet",
    )
    port: int = Field(8000, ge=1, le=65535, description="the API's port on the head")
    ray_port: int = Field(6379, ge=1, le=65535, description="the Ray head's GCS port (backend ray)")
    master_port: int = Field(
        29501, ge=1, le=65535, description="the distributed store's port on the head (backend mp)"
    )
    min_free_memory_gib: float = Field(
        0, ge=0, description="preflight refuses a node with less MemAvailable than this"
    )

    @property
    def api_model_name(self) -> str:
        return self.served_model_name or self.model

    @property
    def world_size(self) -> int:
        return self.tensor_parallel_size * self.pipeline_parallel_size


API_KEY_ENV = "VLLM_API_KEY"  # vLLM's own variable: with it set, /v1/* asks for `Bearer <key>`


class APIConfig(_Model):
    access: Literal["ssh_forward", "direct"] = Field(
        "ssh_forward",
        description="ssh_forward: the bot reaches the API through its SSH connection to the head; direct: at api.host",
    )
    host: str | None = Field(
        None, pattern=_HOST, description="with access=direct: the head's reachable address"
    )
    bind: IPAddress = Field(
        "0.0.0.0",
        description="the address vLLM's API listens on, on the head (host networking): "
        "0.0.0.0 serves every network the head is on; 127.0.0.1 only the head itself (the bot "
        "still reaches it through its SSH forward)",
    )
    key_env: EnvName | None = Field(
        None,
        description="the bot's environment variable holding an API key: vLLM then "
        "answers /v1/* only with `Authorization: Bearer <key>`, which the bot's own client sends",
    )


RecipeName = Annotated[str, Field(pattern=r"^[a-z0-9][a-z0-9._-]{0,47}$")]
# What a recipe takes from the cluster's `serve` unless it says otherwise: how this cluster runs
# (parallelism, memory share, ports), never which model it serves or with which flags.
INHERITED_SERVE = (
    "backend",
    "tensor_parallel_size",
    "pipeline_parallel_size",
    "gpu_memory_utilization",
    "port",
    "ray_port",
    "master_port",
    "min_free_memory_gib",
)


# An argument of the operator's launcher: any text but control characters (a NUL cannot be
# passed, a newline has no place in an argv); each is quoted on its way to the head.
LauncherArg = Annotated[str, Field(min_length=1, max_length=4096, pattern=r"^[^\x00-\x1f\x7f]+$")]


class LauncherConfig(_Model):
    """The operator's own launch script, run on the head instead of spark-bot's containers: `up`
    runs `command` (an argv, never a shell string) in `cwd`, supervises it, then proves the
    launch from the container it starts on every node of the recipe (`container`)."""

    command: list[LauncherArg] = Field(
        min_length=1, max_length=256, description="the argv run on the head, e.g. [./launch.sh, -d]"
    )
    cwd: str | None = Field(
        None,
        pattern=r"^[~/][A-Za-z0-9._/-]*$",
        description="the folder it runs in, on the head (`~` is the SSH user's home); default: home",
    )
    container: Name = Field(
        description="the name the script gives its container on every node (eugr's "
        "launch-cluster.sh: vllm_node, its --name); `down` removes it there"
    )
    output_lines: int = Field(
        500, ge=10, le=20_000, description="the script's last lines kept (bounded, redacted)"
    )
    output_file_bytes: int = Field(
        64 << 20,
        ge=4096,
        le=1 << 40,
        description="the script's output file on the head is rotated at this size (the one "
        "before kept as output.1): at most twice this on the head's disk",
    )

    @field_validator("command", mode="before")
    @classmethod
    def _argv(cls, command: object) -> object:
        if isinstance(command, str):
            raise ValueError(
                "an argv list such as [./launch-cluster.sh, -d], never a shell string: each "
                "word is passed to the script as it is written"
            )
        if isinstance(command, list) and any(
            isinstance(a, str) and looks_secret(a) for a in command
        ):
            raise ValueError(
                "an argument looks like a secret (a token, a key): it would be shown in every "
                "launch's evidence and in `ps` on the head; let the script read it from its own "
                "environment or file on the head (its .env)"
            )
        return command


class Recipe(_Model):
    """A named, complete model setup: `up RECIPE` runs the cluster with it.

    Its `serve` is a whole serve section (model, flags, parallelism); the settings in
    INHERITED_SERVE it leaves out come from the cluster's `serve`. Image, env and mounts are
    added to the cluster's container (env and mounts on top, the image in place of its)."""

    description: str = Field(
        "", max_length=300, description="one line for `recipes` and `/spark recipes`"
    )
    sources: list[Annotated[str, Field(max_length=300)]] = Field(
        default_factory=list, description="where its flags come from (URLs, documents)"
    )
    nodes: Literal["all", "head"] = Field(
        "all", description="every node of the cluster, or the head alone (a model that fits one)"
    )
    image: str | None = Field(
        None, pattern=_IMAGE, description="the image this recipe runs instead of the container's"
    )
    env: dict[EnvName, str] = Field(
        default_factory=dict, description="environment variables added to the container's"
    )
    mounts: list[Mount] = Field(default_factory=list, description="mounts added to the container's")
    serve: ServeConfig = Field(
        description="the whole serve section of this setup (what it leaves out of INHERITED_SERVE comes from the cluster's)"
    )
    launcher: LauncherConfig | None = Field(
        None,
        description="the operator's own launch script: it starts the containers, spark-bot "
        "supervises it and proves the launch (its `serve` must say what the script serves)",
    )

    @field_validator("env")
    @classmethod
    def _plain_values(cls, env: dict[str, str]) -> dict[str, str]:
        return _plain_env(env)


def _regex(pattern: str) -> str:
    try:
        re.compile(pattern)
    except re.error as exc:
        raise ValueError(f"not a valid regular expression ({exc})") from None
    return pattern


Regex = Annotated[str, Field(min_length=1, max_length=500), AfterValidator(_regex)]
LoggedCheckpoint = Literal["nccl", "weights", "kv_cache", "engine", "api_server"]


class ExtraSignature(_Model):
    """A failure an operator taught the bot: searched in each log message (prefixes stripped)
    before the built-in rows; `{name}` in title, cause and fix is filled from the match."""

    id: str = Field(
        pattern=r"^[a-z][a-z0-9_]*$",
        max_length=48,
        description="the row's id (lowercase, digits and _), shown by `diagnose` and in the metrics",
    )
    pattern: Regex = Field(
        description="a regular expression searched in each log message (its rank and time prefixes stripped)"
    )
    cause: str = Field(min_length=1, description="why it fails, for the operator")
    fix: str = Field(min_length=1, description="what to change")
    title: str | None = Field(None, description="what failed, one line (default: the id)")
    role: Literal["cause", "symptom"] = Field(
        "cause",
        description="cause: the root; symptom: only says something died (a cause found with it wins)",
    )
    fatal: bool = Field(
        True, description="the launch or the engine has failed (else a finding worth reporting)"
    )
    family: FamilyId = Field(
        "other", description="the kind of root cause (cluster.diagnosis.families)"
    )
    source: str = Field("", description="where the line comes from (release, file, issue)")


class ExtraSpelling(_Model):
    """Another wording of a checkpoint's log line (a new vLLM release's)."""

    pattern: Regex = Field(
        description="a regular expression for the checkpoint's line in another release"
    )
    source: str = Field("", description="where the wording comes from (release, file)")
    provisional: bool = Field(
        False, description="a guess not yet seen in a real log: a match says so"
    )


class Knowledge(_Model):
    """What an operator teaches spark-bot without editing it (`knowledge: FILE`)."""

    signatures: list[ExtraSignature] = Field(
        default_factory=list, description="failure rows tried before the built-in table"
    )
    checkpoints: dict[LoggedCheckpoint, list[ExtraSpelling]] = Field(
        default_factory=dict, description="more wordings of a checkpoint's log line, by checkpoint"
    )


class Timeouts(_Model):
    connect: Seconds = Field(10, description="seconds for SSH to connect to a node")
    docker: Seconds = Field(
        30,
        description="bound on each Docker API request (inspect, create, "
        "exec...); followed logs and events are bounded by the phase timeouts",
    )
    preflight: Seconds = Field(60, description="seconds for all of preflight's checks")
    containers: Seconds = Field(
        180, description="seconds for the containers to start (and the launcher to start them)"
    )
    ray: Seconds = Field(
        180, description="seconds for Ray to show every node and GPU (backend ray)"
    )
    weights: Seconds = Field(1800, description="seconds for the weights to load on every rank")
    engine: Seconds = Field(
        900,
        description="seconds from the weights to the engine's start (KV cache, compile, CUDA graphs)",
    )
    api: Seconds = Field(
        900, description="seconds for the API server to answer once the engine runs"
    )
    stall: Seconds = Field(300, description="no new log output for this long fails the phase")
    image_stall: Seconds = Field(
        120,
        description="`sync-image`: no byte of the image moved for this long fails the copy "
        "(a copy of many GB has no overall bound)",
    )
    model_stall: Seconds = Field(
        120,
        description="`sync-model`: no byte of the model arriving for this long fails the copy "
        "(rsync's --timeout too; a copy of many GB has no overall bound)",
    )
    down: Seconds = Field(60, description="seconds for `down` to stop and remove the containers")
    launcher: Seconds = Field(
        30,
        description="bound on each command that starts, reads or signals the operator's "
        "launcher on the head (the script itself runs as long as the launch phases allow)",
    )


class WatchConfig(_Model):
    """What `watch` checks besides the logs, deaths and `/health`: that the server still serves,
    and that each node keeps enough memory."""

    canary_interval: Seconds = Field(
        180, description="a short completion this often, unless real traffic proves the server"
    )
    canary_timeout: Seconds = Field(60, description="the canary's answer must end within this")
    metrics_interval: Seconds = Field(15, description="how often /metrics is read")
    token_stall: Seconds = Field(
        180,
        description="requests running while vllm:generation_tokens_total does not advance for "
        "this long is a hang",
    )
    memory_interval: Seconds = Field(30, description="how often each node's memory is read")
    memory_low_gib: float = Field(
        6.0, ge=0, le=10_000, description="warn when a node's available memory falls below this"
    )


_DURATION = re.compile(r"([0-9]+(?:\.[0-9]+)?)\s*([smhd]?)")
_UNIT_S = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86_400}


def _duration(value: object) -> object:
    """`90`, `30m`, `1h`, `2d` -> seconds; a number is left for the field to check."""
    if not isinstance(value, str):
        return value
    match = _DURATION.fullmatch(value.strip())
    if match is None:
        raise ValueError(f"{value[:20]!r}: expected seconds or a duration such as 30m, 1h or 2d")
    return float(match[1]) * _UNIT_S[match[2]]


Duration = Annotated[float, BeforeValidator(_duration), Field(gt=0, le=7 * 86_400)]


class MemoryConfig(_Model):
    """Each node's unified memory before a load (a GB10's GPU memory is the system's): what
    preflight asks of it, what it may do about the page cache, and how long `up` waits for the
    memory of the last launch to come back."""

    unified: bool = Field(
        True,
        description="the GPU's memory is the node's (GB10): preflight checks each node's free "
        "memory in /proc/meminfo against what vLLM claims at start-up (gpu_memory_utilization x "
        "memory_gib), telling the page cache apart from memory in use; false for GPUs with "
        "memory of their own",
    )
    drop_caches: list[LauncherArg] | None = Field(
        None,
        min_length=1,
        max_length=16,
        description="the argv that drops a node's page cache, run over SSH as the config's user, "
        "never through a shell, e.g. [sudo, -n, /usr/local/sbin/drop-caches]: the rights it "
        "needs are granted on the node (a sudoers rule for that one script); unset: spark-bot "
        "never drops caches, its findings say how to",
    )
    return_timeout: Seconds = Field(
        120,
        description="after a container of ours stopped (down, a failed launch, a restart), `up` "
        "waits this long at most for each node's memory to come back to its level before that "
        "launch",
    )
    return_poll: Seconds = Field(1.0, le=60, description="how often that wait reads /proc/meminfo")
    return_window: Duration = Field(
        3600, description="a stop longer ago than this is not waited for (the memory is what it is)"
    )
    return_tolerance_gib: float = Field(
        2.0, ge=0, le=1000, description="back means within this much of the level before"
    )

    @field_validator("drop_caches", mode="before")
    @classmethod
    def _argv(cls, command: object) -> object:
        if isinstance(command, str):
            raise ValueError(
                "an argv list such as [sudo, -n, /usr/local/sbin/drop-caches], never a shell "
                "string: it runs without a shell"
            )
        return command


class RestartPolicy(_Model):
    """Opt-in: when the watch sees the server die, tear down and launch again in the launch's
    thread, at most `max` times within `within` (then say so and stop)."""

    max: int = Field(ge=1, le=20, description="relaunches allowed within the window")
    within: Duration = Field(3600, description="the window: seconds, or 30m, 1h, 2d")


def _enough_gpus(where: str, serve: ServeConfig, nodes: list[NodeConfig]) -> None:
    """vLLM places one rank per GPU: more ranks than the nodes have GPUs starts containers that
    wait for GPUs that are not there (a Ray placement group never placed, a rank never joining)."""
    gpus = sum(node.gpus for node in nodes)
    if serve.world_size > gpus:
        each = ", ".join(f"{node.name}: {node.gpus}" for node in nodes)
        raise ValueError(
            f"{where}: TP x PP = {serve.tensor_parallel_size} x {serve.pipeline_parallel_size} = "
            f"{serve.world_size} ranks need {serve.world_size} GPUs; the nodes have {gpus} ({each}). "
            "Lower tensor_parallel_size or pipeline_parallel_size, or add nodes "
            "(nodes[].gpus says how many GPUs a node has)"
        )


def home_expanded(path: Path) -> Path:
    """`~` and `~user` expanded; ValueError naming the path when that user has no home here
    (pathlib raises RuntimeError)."""
    try:
        return path.expanduser()
    except RuntimeError:
        raise ValueError(
            f"{path}: {path.parts[0]!r} names no user with a home on this machine; write the "
            "full path, or ~/ for the bot's own home"
        ) from None


class ClusterConfig(_Model):
    name: Name = Field(
        "sparks", description="the cluster's name in messages, the lock and the containers' label"
    )
    nodes: list[NodeConfig] = Field(min_length=1, description="head first")
    network: NetworkConfig = Field(NetworkConfig(), description="the fabric's interfaces")
    container: ContainerConfig = Field(description="the container every node runs")
    serve: ServeConfig = Field(description="what vllm serve runs and how")
    api: APIConfig = Field(APIConfig(), description="how the bot reaches the API")
    timeouts: Timeouts = Field(Timeouts(), description="the bound on each phase (seconds)")
    watch: WatchConfig = Field(
        WatchConfig(), description="what the watch of a serving cluster checks"
    )
    memory: MemoryConfig = Field(
        MemoryConfig(), description="the nodes' unified memory: the cache, its drop, its return"
    )
    log_tail_lines: int = Field(
        30, ge=1, le=500, description="log lines kept with each checkpoint and failure"
    )
    restart: RestartPolicy | None = Field(
        None, description="relaunch after a death while watched (off unless given)"
    )
    knowledge: Knowledge = Field(
        Knowledge(),
        description="in YAML, the path of a knowledge file (extra failure rows and "
        "checkpoint spellings), relative to the config's folder",
    )
    recipes: dict[RecipeName, Recipe] = Field(
        default_factory=dict,
        description="named model setups; also each *.yaml in a `recipes/` folder beside the config",
    )
    recipe: RecipeName | None = Field(
        None,
        description="the recipe this config runs: in YAML, the one `up` launches when none is "
        "named; set by `up RECIPE`",
    )
    launcher: LauncherConfig | None = Field(
        None, description="set by the recipe that runs the operator's own launcher (not in YAML)"
    )

    @model_validator(mode="before")
    @classmethod
    def _recipes_inherit(cls, data: Any) -> Any:
        """Each recipe's serve starts from the cluster's INHERITED_SERVE settings."""
        if not isinstance(data, dict):
            return data
        recipes, serve = data.get("recipes"), data.get("serve")
        if not isinstance(recipes, dict) or not isinstance(serve, dict | ServeConfig):
            return data
        base = serve.model_dump() if isinstance(serve, ServeConfig) else serve
        inherited = {key: base[key] for key in INHERITED_SERVE if key in base}
        merged: dict[Any, Any] = {}
        for name, recipe in recipes.items():
            if isinstance(recipe, dict) and isinstance(recipe.get("serve"), dict):
                recipe = {**recipe, "serve": {**inherited, **recipe["serve"]}}
            merged[name] = recipe
        return {**data, "recipes": merged}

    @model_validator(mode="after")
    def _consistent(self) -> ClusterConfig:
        names = [node.name for node in self.nodes]
        if len(set(names)) != len(names):
            raise ValueError(f"node names must be unique, got {names}")
        for node in self.nodes:
            jump = node.ssh.jump if node.ssh else None
            if jump is not None and (jump not in names or jump == node.name):
                raise ValueError(f"node {node.name}: jump {jump!r} must name another node")
        if self.serve.world_size > len(self.nodes) and self.serve.backend == "mp":
            raise ValueError(
                f"serve: backend mp runs one rank per node; TP x PP = {self.serve.world_size} "
                f"needs {self.serve.world_size} nodes, the config has {len(self.nodes)}"
            )
        _enough_gpus("serve", self.serve, self.nodes)
        if self.api.access == "direct" and self.api.host is None:
            raise ValueError("api: access 'direct' needs api.host (the head's address)")
        if self.api.access == "direct" and ipaddress.ip_address(self.api.bind).is_loopback:
            raise ValueError(
                f"api: access 'direct' cannot reach an API bound to {self.api.bind}; "
                "use access: ssh_forward, or bind: 0.0.0.0"
            )
        if self.launcher is not None and self.recipe is None:
            raise ValueError("launcher: belongs in a recipe (recipes.NAME.launcher)")
        if self.recipe is not None and self.recipe not in self.recipes:
            raise ValueError(f"recipe {self.recipe!r} is not one of the recipes ({self._known()})")
        for name, recipe in self.recipes.items():
            used = 1 if recipe.nodes == "head" else len(self.nodes)
            if recipe.serve.backend == "mp" and recipe.serve.world_size > used:
                raise ValueError(
                    f"recipe {name}: serve: backend mp runs one rank per node; TP x PP = "
                    f"{recipe.serve.world_size} needs {recipe.serve.world_size} nodes, the "
                    f"recipe uses {used} (nodes: {recipe.nodes})"
                )
            _enough_gpus(f"recipe {name}: serve", recipe.serve, self.nodes[:used])
        return self

    def _known(self) -> str:
        return ", ".join(sorted(self.recipes)) or "none configured"

    def with_recipe(self, name: str | None) -> ClusterConfig:
        """This config running recipe `name` (None: the config's own `recipe`, if any): its
        image, serve and nodes in place of the cluster's, its env and mounts on top."""
        chosen = name or self.recipe
        if chosen is None:
            return self
        recipe = self.recipes.get(chosen)
        if recipe is None:
            raise ConfigError(f"unknown recipe {chosen!r} (recipes: {self._known()})")
        targets = {mount.target for mount in recipe.mounts}
        container = self.container.model_copy(
            update={
                # the operator's launcher names its own containers
                "name": recipe.launcher.container if recipe.launcher else self.container.name,
                "image": recipe.image or self.container.image,
                "env": {**self.container.env, **recipe.env},
                "mounts": [m for m in self.container.mounts if m.target not in targets]
                + list(recipe.mounts),
            }
        )
        nodes = [self.head] if recipe.nodes == "head" else self.nodes
        return self.model_copy(
            update={
                "container": container,
                "serve": recipe.serve,
                "nodes": nodes,
                "recipe": chosen,
                "launcher": recipe.launcher,
            }
        )

    @property
    def launcher_containers(self) -> dict[str, list[str]]:
        """The containers the recipes' launchers start, by name -> the recipes naming it (several
        may: which one ran is recorded on the head, `cluster.launcher.launched_recipe`): not
        labelled by spark-bot, removed by `down` because a recipe names them."""
        named: dict[str, list[str]] = {}
        for name, recipe in self.recipes.items():
            if recipe.launcher is not None:
                named.setdefault(recipe.launcher.container, []).append(name)
        return named

    @property
    def head(self) -> NodeConfig:
        return self.nodes[0]

    @property
    def workers(self) -> list[NodeConfig]:
        return self.nodes[1:]

    def node(self, name: str) -> NodeConfig:
        for node in self.nodes:
            if node.name == name:
                return node
        raise KeyError(name)

    def with_paths_relative_to(self, base: Path) -> ClusterConfig:
        """Resolve `~` and relative key/known_hosts/ssh config/mount paths against the config's folder."""

        def resolve(path: Path | None) -> Path | None:
            if path is None:
                return None
            path = home_expanded(path)
            return path if path.is_absolute() else (base / path).resolve()

        nodes = [
            node.model_copy(
                update={
                    "ssh": node.ssh.model_copy(
                        update={
                            "key": resolve(node.ssh.key),
                            "known_hosts": resolve(node.ssh.known_hosts),
                            "config_file": resolve(node.ssh.config_file),
                        }
                    )
                }
            )
            if node.ssh
            else node
            for node in self.nodes
        ]
        return self.model_copy(update={"nodes": nodes})


class Secrets:
    """Secret values resolved from the environment at the edge; never printed."""

    def __init__(self, values: dict[str, str]):
        self._values = dict(values)

    def container_env(self) -> dict[str, str]:
        return dict(self._values)

    @property
    def api_key(self) -> str | None:
        """The key the API asks for, if the config names one (api.key_env)."""
        return self._values.get(API_KEY_ENV)

    def redact(self, text: str) -> str:
        """`text` with these values, and anything shaped like a secret, masked."""
        return redact(text, self._values.values())

    def __repr__(self) -> str:
        return f"Secrets({sorted(self._values)})"


def shown_cluster(
    config: ClusterConfig, environ: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """The cluster section as data fit to show: variables whose name or value looks secret
    masked, `secret_env` as the names it reads (set or not, when `environ` is given), never
    the values. Callers redact the text they make of it as well (a token may sit elsewhere,
    as in serve.extra_args)."""
    data = config.model_dump(mode="json")
    container = data["container"]
    container["env"] = {
        key: (MASK if secret_name(key) or looks_secret(str(value)) else value)
        for key, value in container["env"].items()
    }

    def hidden(src: str) -> str:
        if environ is None:
            return f"${src} (value hidden)"
        return f"${src} ({'set' if environ.get(src) else 'NOT SET'}, value hidden)"

    container["secret_env"] = {dest: hidden(src) for dest, src in container["secret_env"].items()}
    return data


def resolve_secrets(config: ClusterConfig, environ: dict[str, str]) -> Secrets:
    wanted = dict(config.container.secret_env)
    if config.api.key_env is not None:
        wanted[API_KEY_ENV] = config.api.key_env
    missing = [src for src in wanted.values() if not environ.get(src)]
    if missing:
        raise ConfigError(
            f"container.secret_env or api.key_env refer to environment variables that are not "
            f"set: {', '.join(missing)}. Export them before starting spark-bot."
        )
    return Secrets({dest: environ[src] for dest, src in wanted.items()})
