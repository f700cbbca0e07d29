"""The lab's real-engine configs (configs/lab-real*.yaml), adapted per test."""

from __future__ import annotations

from pathlib import Path

from bot.config import load_config
from cluster.config import ClusterConfig, Secrets
from cluster.controller import Controller

CONFIGS = Path(__file__).resolve().parents[1] / "configs"
MP = CONFIGS / "lab-real.yaml"
RAY = CONFIGS / "lab-real-ray.yaml"
VERSION = "0.32.0"


def real_cluster(
    path: Path = MP,
    *,
    env: dict[str, str] | None = None,
    serve: dict | None = None,
    timeouts: dict | None = None,
) -> ClusterConfig:
    base = load_config(path).cluster
    container = base.container.model_copy(update={"env": {**base.container.env, **(env or {})}})
    return base.model_copy(
        update={
            "container": container,
            "serve": base.serve.model_copy(update=serve or {}),
            "timeouts": base.timeouts.model_copy(update=timeouts or {}),
        }
    )


def real_controller(path: Path = MP, *, secrets: Secrets | None = None, **kwargs) -> Controller:
    return Controller(real_cluster(path, **kwargs), secrets or Secrets({}))


def shm_entries() -> set[str]:
    """What lies in the host's /dev/shm (the engine's segments must not pile up there)."""
    return {p.name for p in Path("/dev/shm").iterdir()}
