"""The same NCCL on every rank on the lab's nodes (issue 25, item 3): each node's container is
asked which libnccl a rank loads; two builds of one NCCL version on the two nodes (the host's
own library mounted in, as operators bring the system NCCL) are a warning before the load, and
the first suspect when a collective later times out."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

import pytest
import yaml

from cluster.events import CheckpointPassed, Failed, Ready
from lab.emulator import nccl_lib
from testkit.lab_cluster import LAB_CONFIG, collect, controller_for
from testkit.slack_bot import ALICE, CH, block_text, checkpoint_header, header, settings, slack_bot
from tests.cluster.in_lab.test_cli import spark_bot

pytestmark = [pytest.mark.lab, pytest.mark.timeout(300)]

FOLDER = "system-nccl"  # in each node's home: its own "system" NCCL
TARGET = "/opt/system-nccl"
MOUNT = {"source": f"/root/{FOLDER}", "target": TARGET, "read_only": True}
ENV = {"VLLM_NCCL_SO_PATH": f"{TARGET}/libnccl.so.2"}


@pytest.fixture
def system_nccl(clean):
    """Writes each node's own libnccl.so.2 (`builds`: one build tag per node, same version)."""
    written: list[Path] = []

    def write(*builds: str, version: str = "2.28.9") -> None:
        for node, build in zip(clean.nodes, builds, strict=True):
            folder = Path(node.home) / FOLDER
            nccl_lib.make(str(folder / "libnccl.so.2"), version, build)
            written.append(folder)

    yield write
    for folder in written:
        shutil.rmtree(folder, ignore_errors=True)


def config_file(tmp_path: Path) -> str:
    data = yaml.safe_load(LAB_CONFIG.read_text())
    container = data["cluster"]["container"]
    container["mounts"] = [*container.get("mounts", []), MOUNT]
    container["env"] = {**container.get("env", {}), **ENV}
    path = tmp_path / "lab.yaml"
    path.write_text(yaml.safe_dump(data))
    return str(path)


def with_system_nccl(lab, **env: str):
    """The lab's controller with each node's own NCCL mounted in and named for vLLM."""
    base = controller_for(lab).config.container
    container = base.model_copy(
        update={
            "mounts": [*base.mounts, base.mounts[0].model_copy(update=MOUNT)],
            "env": {**base.env, **ENV, **env},
        }
    )
    return controller_for(lab, container=container)


async def test_two_builds_of_one_nccl_version_are_a_warning_before_the_load_from_the_cli(
    clean, system_nccl, tmp_path
):
    system_nccl("A", "B")
    code, out, _ = await spark_bot("up", config=config_file(tmp_path))
    assert code == 0, out
    warned = next(line for line in out.splitlines() if "different NCCL libraries" in line)
    assert "(the same version, different binaries)" in warned, warned
    for node in clean.nodes:
        assert f"{node.name} loads {TARGET}/libnccl.so.2 (NCCL 2.28.9+cuda13.0, sha256 " in out
    assert out.index(warned) < out.index("Containers started"), "before the load"


async def test_the_same_nccl_on_every_node_passes_without_a_warning(clean, system_nccl, tmp_path):
    system_nccl("A", "A")
    code, out, _ = await spark_bot("preflight", config=config_file(tmp_path))
    assert code == 0, out
    assert "different NCCL libraries" not in out
    assert f"spark-lab-1: {TARGET}/libnccl.so.2 (NCCL 2.28.9+cuda13.0, sha256 " in out


async def test_the_images_own_nccl_is_asked_once_per_image_a_mounted_one_every_time(
    clean, system_nccl
):
    controller = controller_for(clean)
    for _ in range(2):
        [check] = [
            e for e in await collect(controller.preflight()) if e.checkpoint == "nccl_library"
        ]
        assert isinstance(check, CheckpointPassed) and not check.warning, check
    assert f"{nccl_lib.BUNDLED} (NCCL 2.27.7+cuda13.0" in check.evidence
    assert "remembered from an earlier preflight" in check.evidence

    system_nccl("A", "A")
    mounted = with_system_nccl(clean)
    for _ in range(2):
        [check] = [e for e in await collect(mounted.preflight()) if e.checkpoint == "nccl_library"]
    assert "remembered" not in check.evidence and "kept on" not in check.evidence, (
        "a node's own file can change without the image: asked again"
    )


async def test_a_collective_timeout_names_the_nccl_mismatch_as_its_first_suspect(
    clean, system_nccl
):
    system_nccl("A", "B")
    controller = with_system_nccl(
        clean, SPARK_EMU_FAULT="late_engine_death", SPARK_EMU_FAULT_AFTER_S="3"
    )
    launched = await collect(controller.up())
    assert isinstance(launched[-1], Ready), launched[-1]
    nccl = next(e for e in launched if isinstance(e, CheckpointPassed) and e.checkpoint == "nccl")
    assert nccl.evidence.count("NCCL 2.28.9+cuda13.0  [spark-lab-") >= 1, nccl.evidence
    assert nccl.evidence.count(f"loads {TARGET}/libnccl.so.2 (NCCL 2.28.9+cuda13.0") == 2
    assert "different NCCL libraries" in nccl.warning
    # the watch of another process (the bot's next job, `spark-bot watch`): a new controller
    watching = with_system_nccl(clean, SPARK_EMU_FAULT="late_engine_death")
    watched = await asyncio.wait_for(collect(watching.watch(health_interval=60)), timeout=60)
    [failure] = [e for e in watched if isinstance(e, Failed)]
    assert failure.signature == "nccl_watchdog_timeout", failure
    assert failure.cause.startswith(
        "The watchdog killed the process: the ranks load different NCCL libraries (the "
        "same version, different binaries): spark-lab-0 loads "
    ), failure.cause
    assert ", the first suspect (operators saw collectives wedge under load" in failure.cause
    assert "make every node load the same libnccl.so.2" in failure.fix.lower()


async def test_the_warning_reaches_the_launchs_thread_in_slack(clean, system_nccl, slack, tmp_path):
    system_nccl("A", "B")
    cluster = with_system_nccl(clean).config
    async with slack_bot(slack, cluster, settings(tmp_path)):
        await slack.send_slash_command(ALICE, CH, "up")
        await slack.wait_for(
            lambda c: c.method == "chat.postMessage" and header(c) == "✅ Ready", 90
        )
    [reply] = [
        c
        for c in slack.calls()
        if c.method == "chat.postMessage"
        and checkpoint_header(c).startswith("✔ The same NCCL on every node")
    ]
    text = block_text(reply)
    assert (
        "⚠ the ranks load different NCCL libraries (the same version, different binaries)" in text
    )
    assert f"spark-lab-1 loads {TARGET}/libnccl.so.2 (NCCL 2.28.9+cuda13.0" in text
