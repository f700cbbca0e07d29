"""One builder for the tests' clusters of local-driver nodes: each node an engine on a Unix
socket of this machine (a Docker stand-in or double, or none at all), nothing over SSH."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from cluster.config import (
    ClusterConfig,
    ContainerConfig,
    MemoryConfig,
    NodeConfig,
    ServeConfig,
    Timeouts,
)


def local_cluster(
    name: str,
    sockets: Sequence[Path | str],
    *,
    names: Sequence[str] | None = None,
    fabric_ips: Sequence[str] | None = None,
    image: str = "vllm:test",
    serve: dict[str, Any] | None = None,
    timeouts: Timeouts | None = None,
) -> ClusterConfig:
    """Nodes `spark-a`, `spark-b`, ... (or `names`) on `sockets`, fabric 10.0.0.1, .2, ...; a
    plain container (no GPUs, no ulimits, no env) named `vllm_<name>`; `serve` on top of the
    model `org/model` over a rank per node (one GPU each), at most 2; this machine's memory is
    no GPU's (`memory.unified` off)."""
    names = names or [f"spark-{chr(ord('a') + i)}" for i in range(len(sockets))]
    fabric_ips = fabric_ips or [f"10.0.0.{i + 1}" for i in range(len(sockets))]
    return ClusterConfig(
        name=name,
        nodes=[
            NodeConfig(name=node, driver="local", fabric_ip=ip, docker_socket=str(socket))
            for node, ip, socket in zip(names, fabric_ips, sockets, strict=True)
        ],
        container=ContainerConfig(
            image=image,
            name=f"vllm_{name}",
            privileged=False,
            gpus=False,
            shm_size=None,
            ulimits={},
            env={},
        ),
        serve=ServeConfig(
            **{"model": "org/model", "tensor_parallel_size": min(2, len(names)), **(serve or {})}
        ),
        memory=MemoryConfig(unified=False),
        **({"timeouts": timeouts} if timeouts else {}),
    )
