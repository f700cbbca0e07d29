"""The operator's own launcher on the lab: `lab/launchers/launch-pair.sh` (a container per node, Ray
head and worker, `vllm serve` through `docker exec`, its own sleeps and tails) started by `up` on
the head, proven with the same checkpoints as spark-bot's own launch; a failing one; a cancel."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from cluster.checkpoints import launch_plan
from cluster.config import ClusterConfig, LauncherConfig, Recipe, Secrets
from cluster.controller import Controller
from cluster.events import CheckpointPassed, Failed, Progress, Ready, Removed
from lab.api import LabInfo
from tests.controller.helpers import cluster_for, collect
from tests.lab.helpers import ssh_to

pytestmark = [pytest.mark.lab, pytest.mark.timeout(180)]

LAUNCH_PAIR = Path(__file__).resolve().parents[2] / "lab" / "launchers" / "launch-pair.sh"
FAST = {"stall": 6, "containers": 20, "ray": 10, "weights": 30, "engine": 30, "api": 30}
RECIPE = "pair-script"


def script_cluster(lab: LabInfo, *options: str, serve_flags: tuple[str, ...] = ()) -> ClusterConfig:
    """The lab config with a recipe whose launcher is launch-pair.sh, run as an operator would
    run it on the head (its options, then vLLM's after `--`), then running that recipe."""
    base = cluster_for(lab, timeouts=FAST)
    worker = lab.workers[0]
    serve = base.serve
    command = [
        str(LAUNCH_PAIR),
        "--worker",
        worker.fabric_ip,
        "--worker-docker-host",
        worker.docker_host,
        "-t",
        base.container.image,
        "--name",
        "vllm_node",
        *(w for key, value in base.container.env.items() for w in ("-e", f"{key}={value}")),
        *(w for m in base.container.mounts for w in ("-v", f"{m.source}:{m.target}")),
        *options,
        "--",
        serve.model,
        "--served-model-name",
        str(serve.served_model_name),
        "--tensor-parallel-size",
        "2",
        "--max-model-len",
        str(serve.max_model_len),
        "--reasoning-parser",
        str(serve.reasoning_parser),
        *serve_flags,
    ]
    recipe = Recipe(
        description="the operator's own script",
        serve=serve,
        launcher=LauncherConfig(command=command, cwd="/tmp", container="vllm_node"),
    )
    return base.model_copy(update={"recipes": {RECIPE: recipe}}).with_recipe(RECIPE)


@pytest.fixture
async def clean_launcher(lab):
    """No container of ours nor the script's before and after; the script stopped after."""
    base = script_cluster(lab)
    await collect(Controller(base, Secrets({})).down())
    yield lab
    await collect(Controller(base, Secrets({})).down())


async def group_alive(lab: LabInfo, pgid: int) -> bool:
    async with ssh_to(lab, lab.head) as conn:
        result = await conn.run(f"kill -0 -- -{pgid}", check=False)
    return result.exit_status == 0


def passed(events) -> dict[str, CheckpointPassed]:
    return {e.checkpoint: e for e in events if isinstance(e, CheckpointPassed)}


def pgid_of(events) -> int:
    evidence = passed(events)["launcher"].evidence
    return int(evidence.split("process group ")[1].split(";")[0])


@pytest.mark.parametrize("detached", [False, True], ids=["foreground", "detached"])
async def test_a_launcher_script_reaches_ready_with_the_same_checkpoints(clean_launcher, detached):
    config = script_cluster(clean_launcher, *(["-d"] if detached else []))
    controller = Controller(config, Secrets({}))
    events = await collect(controller.up())
    failures = [e for e in events if isinstance(e, Failed)]
    assert not failures, failures[0].model_dump_json(indent=1)
    plan = [c.id for c in launch_plan(config)]
    assert list(passed(events)) == plan and plan[8:10] == ["launcher", "containers"]
    by_id = passed(events)
    assert "launch-pair.sh" in by_id["launcher"].evidence
    containers = by_id["containers"]
    assert (
        containers.evidence.count("vllm_node") == 2
        and "started by the launcher" in containers.evidence
    )
    said = ("Detected head IP", "Starting container", "Starting the Ray", "Ray runtime started.")
    assert any(line.startswith(said) for line in containers.log_tail), "the script's own lines"
    assert "2 active node(s)" in by_id["ray_cluster"].evidence
    assert by_id["weights"].evidence.count("Loading weights took") == 2
    assert "Application startup complete." in by_id["api_server"].evidence
    ready = events[-1]
    assert isinstance(ready, Ready) and ready.recipe == RECIPE and ready.model == "qwen35"
    exited = [e for e in events if isinstance(e, Progress) and e.phase == "launcher"]
    pgid = pgid_of(events)
    if detached:
        # its exit 0 is no failure: said when it came before Ready (it usually does), else after
        assert not exited or "exited 0" in exited[0].message
        async with ssh_to(clean_launcher, clean_launcher.head) as conn:
            status = await conn.run(f"cat ~/.cache/spark-bot/launcher/{config.name}/status")
        assert status.stdout.strip() == "0" and not await group_alive(clean_launcher, pgid)
    else:
        assert not exited and await group_alive(clean_launcher, pgid), "it serves on after Ready"

    verified = await collect(controller.verify())
    assert not [e for e in verified if isinstance(e, Failed)]

    removed = await collect(Controller(config, Secrets({})).down())
    assert [(e.node, e.container) for e in removed if isinstance(e, Removed) and e.removed] == [
        (n.name, "vllm_node") for n in config.nodes
    ]
    assert not await group_alive(clean_launcher, pgid), "down stops the script"
    stopped = [e for e in removed if isinstance(e, Progress)]
    assert bool(stopped) is not detached, stopped


async def test_a_launcher_that_fails_gives_its_failure_with_its_lines(clean_launcher):
    config = script_cluster(clean_launcher, "--gpu-count", "2")
    events = await collect(Controller(config, Secrets({})).up())
    failure = events[-1]
    assert isinstance(failure, Failed) and failure.signature == "launcher_failed", failure
    assert failure.checkpoint == "containers", "the checkpoint it was waiting for"
    assert "exited with status 1" in failure.summary and "launch-pair.sh" in failure.summary
    assert (
        failure.evidence
        == f"Usage: {LAUNCH_PAIR} --worker IP [-t image] [--name name] [-e VAR=value] [-v src:dst] [-d] -- MODEL [vllm serve flags]"
    )
    assert "Error: Unknown argument: --gpu-count" in failure.log_tail
    assert "launch-pair.sh" in failure.fix and "cd /tmp" in failure.fix


async def test_cancel_mid_launch_stops_the_script_and_leaves_no_container(clean_launcher):
    config = script_cluster(clean_launcher)
    controller = Controller(config, Secrets({}))
    seen: list = []

    async def launch() -> None:
        async for event in controller.up():
            seen.append(event)
            if isinstance(event, CheckpointPassed) and event.checkpoint == "ray_cluster":
                reached.set()

    reached = asyncio.Event()
    task = asyncio.create_task(launch())
    await asyncio.wait_for(reached.wait(), 60)  # the script is serving in the foreground
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert not await group_alive(clean_launcher, pgid_of(seen)), "the script's group is gone"
    [status] = await collect(controller.status())
    assert not [c for c in status.containers if c.present], status.containers
