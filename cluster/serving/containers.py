"""What our containers look like: the Docker create body and the commands, built from config.

Everything here is pure: values come from validated config and detected interfaces, and
commands are argv lists (never shell strings), so no chat text can reach a shell.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping
from typing import Any, Literal

from cluster.config import ClusterConfig, NodeConfig, Secrets
from cluster.nodes.interfaces import NodeInterfaces

Role = Literal["head", "worker"]
LABEL_CLUSTER = "spark-bot.cluster"
LABEL_ROLE = "spark-bot.role"
LABEL_RECIPE = "spark-bot.recipe"

ALL_GPUS = [{"Driver": "nvidia", "Count": -1, "Capabilities": [["gpu"]]}]  # --gpus all
_SIZE_UNITS = {"": 1, "b": 1, "k": 1024, "m": 1024**2, "g": 1024**3}


def size_in_bytes(size: str) -> int:
    match = re.fullmatch(r"(\d+)([bkmgBKMG]?)", size)
    assert match, size
    return int(match[1]) * _SIZE_UNITS[match[2].lower()]


def node_environment(
    config: ClusterConfig, interfaces: NodeInterfaces, secrets: Secrets
) -> dict[str, str]:
    """The per-node NCCL/Gloo/Ray/vLLM environment the real launchers set, then config's own."""
    env = {
        "VLLM_HOST_IP": interfaces.local_ip,
        "RAY_NODE_IP_ADDRESS": interfaces.local_ip,
        "RAY_OVERRIDE_NODE_IP_ADDRESS": interfaces.local_ip,
        "NCCL_SOCKET_IFNAME": interfaces.eth_if,
        "GLOO_SOCKET_IFNAME": interfaces.eth_if,
        "TP_SOCKET_IFNAME": interfaces.eth_if,
        "UCX_NET_DEVICES": interfaces.eth_if,
        "OMPI_MCA_btl_tcp_if_include": interfaces.eth_if,
        "NCCL_IB_HCA": ",".join(interfaces.ib_if),
        "NCCL_IB_DISABLE": "0",
        "NCCL_IGNORE_CPU_AFFINITY": "1",
        "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True",
        "RAY_memory_monitor_refresh_ms": "0",
        # Ray folds lines that differ only in numbers across workers ("[repeated 1x across
        # cluster]", seconds later): every rank's own line must reach the log as it happens.
        "RAY_DEDUP_LOGS": "0",
    }
    env.update(config.container.env)
    env.update(secrets.container_env())
    return env


def create_body(
    config: ClusterConfig,
    node: NodeConfig,
    role: Role,
    command: list[str],
    env: dict[str, str],
    home: str,
    labels: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """`labels`: more of them, beside the cluster's, role, node and recipe."""
    container = config.container
    host: dict[str, Any] = {
        "NetworkMode": "host",
        "Init": container.init,
        "Privileged": container.privileged,
        "CapAdd": list(container.cap_add),
        "Devices": [
            {"PathOnHost": d, "PathInContainer": d, "CgroupPermissions": "rwm"}
            for d in container.devices
        ],
        "Ulimits": [
            {"Name": name, "Soft": soft, "Hard": hard}
            for name, (soft, hard) in container.ulimits.items()
        ],
        "Binds": binds(config, home),
    }
    if container.ipc == "host":
        host["IpcMode"] = "host"
    elif container.shm_size:
        host["ShmSize"] = size_in_bytes(container.shm_size)
    if container.gpus:
        host["DeviceRequests"] = ALL_GPUS
    return {
        "Image": container.image,
        "Cmd": command,
        "Env": [f"{key}={value}" for key, value in env.items()],
        "Labels": {
            LABEL_CLUSTER: config.name,
            LABEL_ROLE: role,
            "spark-bot.node": node.name,
            **({LABEL_RECIPE: config.recipe} if config.recipe else {}),
            **(labels or {}),
        },
        "HostConfig": host,
    }


def binds(config: ClusterConfig, home: str, *, read_only: bool = False) -> list[str]:
    """The config's mounts as Docker binds on a node whose SSH user's home is `home`."""
    return [
        f"{expand_home(m.source, home)}:{m.target}{':ro' if m.read_only or read_only else ''}"
        for m in config.container.mounts
    ]


def throwaway_body(
    config: ClusterConfig, command: list[str], *, mounts_home: str | None = None
) -> dict[str, Any]:
    """A short command in the configured image with the GPUs and the environment the launch
    gives its containers (no secrets, no host network: it only asks the image); with
    `mounts_home`, the node's mounts too, read-only (what they bring into the image counts)."""
    container = config.container
    host: dict[str, Any] = {"DeviceRequests": ALL_GPUS} if container.gpus else {}
    if mounts_home is not None:
        host["Binds"] = binds(config, mounts_home, read_only=True)
    return {
        "Image": container.image,
        "Cmd": command,
        "Entrypoint": [],  # the image's own (`vllm serve`, NGC's script) would wrap the command
        "Env": [f"{key}={value}" for key, value in container.env.items()],
        "Labels": {LABEL_CLUSTER + ".check": config.name},
        "HostConfig": host,
    }


def expand_home(path: str, home: str) -> str:
    """`~` at the start of a path on a node as its SSH user's home."""
    return home.rstrip("/") + path[1:] if path.startswith("~") else path


def ray_head_command(config: ClusterConfig, interfaces: NodeInterfaces) -> list[str]:
    return [
        "ray",
        "start",
        "--block",
        "--head",
        "--port",
        str(config.serve.ray_port),
        "--node-ip-address",
        interfaces.local_ip,
    ]


def ray_worker_command(
    config: ClusterConfig, interfaces: NodeInterfaces, head_ip: str
) -> list[str]:
    return [
        "ray",
        "start",
        "--block",
        f"--address={head_ip}:{config.serve.ray_port}",
        "--node-ip-address",
        interfaces.local_ip,
    ]


def serve_command(config: ClusterConfig, *, rank: int = 0, head_ip: str | None = None) -> list[str]:
    serve = config.serve
    argv = [
        "vllm",
        "serve",
        serve.model,
        "--host",
        config.api.bind,
        "--port",
        str(serve.port),
        "--tensor-parallel-size",
        str(serve.tensor_parallel_size),
        "--pipeline-parallel-size",
        str(serve.pipeline_parallel_size),
        "--distributed-executor-backend",
        serve.backend,
        "--gpu-memory-utilization",
        repr(serve.gpu_memory_utilization),  # exactly, not :g's 6 digits
    ]
    if serve.served_model_name:
        argv += ["--served-model-name", serve.served_model_name]
    if serve.max_model_len:
        argv += ["--max-model-len", str(serve.max_model_len)]
    if serve.max_num_seqs:
        argv += ["--max-num-seqs", str(serve.max_num_seqs)]
    if serve.reasoning_parser:
        argv += ["--reasoning-parser", serve.reasoning_parser]
    if serve.trust_remote_code:
        argv.append("--trust-remote-code")
    if serve.backend == "mp" and len(config.nodes) > 1:
        assert head_ip is not None
        argv += [
            "--nnodes",
            str(len(config.nodes)),
            "--node-rank",
            str(rank),
            "--master-addr",
            head_ip,
            "--master-port",
            str(serve.master_port),
        ]
        if rank > 0:
            argv.append("--headless")
    return argv + list(serve.extra_args)


def into_container_log(argv: list[str]) -> list[str]:
    """Run argv inside the container with its output in the container's log (PID 1's stdout).

    `docker logs` then shows vLLM's lines next to Ray's, a follower reads them as one stream,
    and they survive the bot restarting, unlike an attached exec stream.
    """
    return ["sh", "-c", f"exec {shlex.join(argv)} >/proc/1/fd/1 2>/proc/1/fd/2"]
