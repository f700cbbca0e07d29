"""The image against the GPU on the lab's nodes (issue 25, item 6): preflight asks the image's
torch (the lab image's stand-in, SPARK_EMU_TORCH_ARCHS) what it was built for and fails before
any container of the launch starts when none of it runs on the GB10 (sm_121); the answer is
asked once per image ID and environment."""

from __future__ import annotations

import asyncio
import time
import uuid
from pathlib import Path

import pytest
import yaml

from cluster.events import CheckpointPassed
from cluster.resources.gpu_arch import CHECK_CONTAINER_SUFFIX
from testkit.lab_cluster import LAB_CONFIG, collect, controller_for
from tests.cluster.in_lab.test_cli import spark_bot

pytestmark = [pytest.mark.lab, pytest.mark.timeout(240)]
HOPPER_ERA = "sm_80,sm_86,sm_89,sm_90,sm_90a"  # a CUDA 12.4 wheel's list: nothing for Blackwell


def lab_config_with_env(tmp_path: Path, **env: str) -> str:
    data = yaml.safe_load(LAB_CONFIG.read_text())
    container = data["cluster"]["container"]
    container["env"] = {**container.get("env", {}), **env}
    path = tmp_path / "lab.yaml"
    path.write_text(yaml.safe_dump(data))
    return str(path)


def fresh() -> dict[str, str]:
    """An environment no earlier run asked the image in: the head's cache has no answer for it."""
    return {"SPARK_LAB_RUN": uuid.uuid4().hex}


async def checks_started(lab, since: float) -> int:
    """The throw-away check containers created on the head since `since` (its engine's events)."""
    name = LAB_CONFIG_CONTAINER + CHECK_CONTAINER_SUFFIX
    process = await asyncio.create_subprocess_exec(
        "docker", "-H", lab.head.docker_host, "events", "--since", f"{since:.3f}",
        "--until", f"{time.time():.3f}", "--filter", f"container={name}",
        "--filter", "event=create", "--format", "{{.Action}}",
        stdout=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, _ = await asyncio.wait_for(process.communicate(), timeout=30)
    assert process.returncode == 0
    return out.decode().split().count("create")


LAB_CONFIG_CONTAINER = yaml.safe_load(LAB_CONFIG.read_text())["cluster"]["container"]["name"]


async def test_an_image_not_built_for_the_gpu_fails_before_the_load_from_the_command_line(
    clean, tmp_path
):
    # the image as it would fail: loaded, then its first kernel (what today's code ran into)
    image = {"SPARK_EMU_TORCH_ARCHS": HOPPER_ERA, "SPARK_EMU_FAULT": "no_kernel_image"}
    config = lab_config_with_env(tmp_path, **image, **fresh())
    code, out, _ = await spark_bot("up", config=config)
    assert code == 1, out
    assert "image spark-lab/vllm-emu:latest is not built for the GPU on spark-lab-0 (sm_121)" in out
    assert "image built for sm_80, sm_86, sm_89, sm_90, sm_90a" in out
    assert "the GPU (NVIDIA GB10) is sm_121: none of them runs on it" in out
    assert "NVIDIA GB10 (compute capability 12.1" in out
    assert "`TORCH_CUDA_ARCH_LIST` naming it (`12.1`, or `12.0+PTX`" in out
    assert "Weights" not in out and "Containers started" not in out, "nothing was loaded"
    [status] = await collect(controller_for(clean).status())
    assert not any(c.present for c in status.containers), "no container of the launch started"


async def test_the_image_is_asked_once_per_image_id(clean, tmp_path):
    env = fresh()
    controller = controller_for(clean, env=env)
    since = time.time()
    first = [e for e in await collect(controller.preflight()) if e.checkpoint == "gpu_arch"]
    assert isinstance(first[0], CheckpointPassed) and first[0].state == "passed", first
    assert "sm_121 is built for exactly it (asked: image sha256:" in first[0].evidence
    assert await checks_started(clean, since) == 1

    since = time.time()
    again = [e for e in await collect(controller.preflight()) if e.checkpoint == "gpu_arch"]
    assert "remembered from an earlier preflight" in again[0].evidence, again
    code, out, _ = await spark_bot("preflight", config=lab_config_with_env(tmp_path, **env))
    assert code == 0, out
    assert "kept on spark-lab-0 in ~/.cache/spark-bot/gpu-arch" in out
    assert await checks_started(clean, since) == 0, "neither the controller nor the CLI asked"


async def test_an_image_without_torch_is_not_checked_never_passed(clean):
    controller = controller_for(clean, env={"SPARK_EMU_TORCH": "absent", **fresh()})
    events = await collect(controller.preflight())
    [check] = [e for e in events if e.checkpoint == "gpu_arch"]
    assert isinstance(check, CheckpointPassed) and check.state == "not_checked", check
    assert check.not_checked and "the image has no torch to ask" in check.not_checked
    assert "No module named 'torch'" in check.not_checked


async def test_a_node_without_a_gpu_seen_is_not_checked_from_the_command_line(clean, tmp_path):
    config = lab_config_with_env(tmp_path, SPARK_EMU_GPUS="0", **fresh())
    code, out, _ = await spark_bot("preflight", config=config)
    assert code == 0, out
    assert "➖ The image built for the GPU (spark-lab-0): not checked: no GPU seen" in out
    assert "✔ The image built for the GPU" not in out
