"""An embedded cluster: one emulated Docker engine per node on this machine, and the
ClusterConfig (driver `local`) that points spark-bot's controller at them.

    async with embedded_cluster(nodes=2, fault="nccl_error") as cluster:
        controller = Controller(cluster.config, Secrets({}))

On exit (Ctrl-C included: cancellation runs the same path) every container's processes are
killed, the sockets unlinked and the work directory removed when this module made it.
"""

from __future__ import annotations

import os
import shutil
import socket
import tempfile
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

from cluster.config import (
    ClusterConfig,
    ContainerConfig,
    MemoryConfig,
    NodeConfig,
    ServeConfig,
    Timeouts,
)
from demo.docker_api import EngineServer
from demo.engine import Engine
from demo.machine import DEMO_IMAGE, NodeMachine, build_image

CLUSTER_MARKER = "SPARK_DEMO_CLUSTER"  # on every container process: finds leftovers by workdir
CONTAINER_NAME = "vllm_demo"
MODEL = "Qwen/Qwen3.5-122B-A10B-FP8"
# The seed's profile: what a pair of DGX Sparks shows for Qwen3.5-122B-A10B-FP8 (27 tok/s
# single stream, TTFT 2.3 s); its startup (689 s nominal, mostly loading the weights) at 0.2 %.
TIME_SCALE = "0.002"
PROFILE = "spark-pair-qwen35"
# The sample completion ends a launch: 32 tokens (about 3.5 s at the seed's pace), not 128.
SAMPLE_TOKENS = 32


@dataclass(frozen=True)
class EmbeddedCluster:
    config: ClusterConfig
    workdir: Path
    machines: tuple[NodeMachine, ...]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("0.0.0.0", 0))
        return probe.getsockname()[1]


def demo_config(machines: list[NodeMachine], *, fault: str | None, host_path: str) -> ClusterConfig:
    env = {"SPARK_EMU_TIME_SCALE": TIME_SCALE, "SPARK_EMU_PROFILE": PROFILE, "NCCL_DEBUG": "INFO"}
    if fault:
        env["SPARK_EMU_FAULT"] = fault
    return ClusterConfig(
        name="demo",
        nodes=[
            NodeConfig(
                name=m.name,
                driver="local",
                fabric_ip=m.ip,
                docker_socket=str(m.docker_socket),
                local_env={"PATH": f"{m.bin_dir}:{host_path}", "HOME": str(m.home)},
            )
            for m in machines
        ],
        container=ContainerConfig(
            image=DEMO_IMAGE,
            name=CONTAINER_NAME,
            privileged=False,
            gpus=False,
            shm_size=None,
            ulimits={},
            env=env,
        ),
        serve=ServeConfig(
            model=MODEL,
            served_model_name="qwen35",
            backend="ray",
            tensor_parallel_size=len(machines),
            max_model_len=32768,
            reasoning_parser="qwen3",
            port=free_port(),
            ray_port=free_port(),
            master_port=free_port(),
        ),
        timeouts=Timeouts(
            connect=5,
            preflight=20,
            containers=30,
            ray=30,
            weights=60,
            engine=60,
            api=60,
            stall=15,
            down=10,
        ),
        # the demo's nodes read this machine's /proc/meminfo, which no GPU shares
        memory=MemoryConfig(unified=False),
        log_tail_lines=10,
    )


@asynccontextmanager
async def embedded_cluster(
    nodes: int = 2, *, fault: str | None = None, workdir: Path | None = None
) -> AsyncIterator[EmbeddedCluster]:
    if not 1 <= nodes <= 8:
        raise ValueError("an embedded cluster has 1 to 8 nodes")
    owned = workdir is None
    # Short, under /tmp: a unix socket path must stay under 108 bytes.
    root = Path(tempfile.mkdtemp(prefix="spark-demo-", dir="/tmp")) if owned else workdir
    assert root is not None
    try:
        async with AsyncExitStack() as stack:
            image = build_image(root / "image")
            machines = []
            for index in range(nodes):
                machine = NodeMachine(index, root / f"node{index}")
                machine.build()
                engine = Engine(
                    machine.engine_root,
                    image,
                    {
                        "SPARK_EMU_SYS_CLASS_NET": str(machine.sys_class_net),
                        CLUSTER_MARKER: str(root),
                    },
                )
                server = EngineServer(engine, machine.docker_socket)
                stack.push_async_callback(server.aclose)
                await server.start()
                machines.append(machine)
            config = demo_config(
                machines, fault=fault, host_path=os.environ.get("PATH", "/usr/bin:/bin")
            )
            yield EmbeddedCluster(config, root, tuple(machines))
    finally:
        if owned:
            shutil.rmtree(root, ignore_errors=True)
