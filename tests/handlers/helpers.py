"""A bot on the console adapter over a cluster whose nodes have no Docker engine: commands are
parsed, authorized, audited and refused or failed at preflight, and nothing reaches a node."""

from __future__ import annotations

from pathlib import Path

from bot.config import SparkBotConfig
from testkit.local_cluster import local_cluster


def bot_config(tmp_path: Path, overrides: dict | None = None) -> SparkBotConfig:
    cluster = local_cluster("nowhere", [tmp_path / "a.sock", tmp_path / "b.sock"])
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
