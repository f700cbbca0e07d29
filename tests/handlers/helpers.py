"""A bot on the console adapter over a cluster whose nodes have no Docker engine: commands are
parsed, authorized, audited and refused or failed at preflight, and nothing reaches a node."""

from __future__ import annotations

from pathlib import Path

from bot.config import SparkBotConfig
from cluster.config import ClusterConfig, ContainerConfig, NodeConfig, ServeConfig


def bot_config(tmp_path: Path, overrides: dict | None = None) -> SparkBotConfig:
    cluster = ClusterConfig(
        name="nowhere",
        nodes=[
            NodeConfig(
                name="spark-a",
                driver="local",
                fabric_ip="10.0.0.1",
                docker_socket=str(tmp_path / "a.sock"),
            ),
            NodeConfig(
                name="spark-b",
                driver="local",
                fabric_ip="10.0.0.2",
                docker_socket=str(tmp_path / "b.sock"),
            ),
        ],
        container=ContainerConfig(
            image="vllm:test",
            name="vllm_test",
            privileged=False,
            gpus=False,
            shm_size=None,
            ulimits={},
        ),
        serve=ServeConfig(model="org/model"),
    )
    return SparkBotConfig.model_validate(
        {
            "cluster": cluster.model_dump(),
            "commands": {"overrides": overrides or {"max_model_len": {"min": 1024, "max": 32768}}},
            "store": {"path": str(tmp_path / "spark-bot.db")},
        }
    )


async def lines(*texts: str):
    for text in texts:
        yield text + "\n"
