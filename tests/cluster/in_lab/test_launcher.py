"""The operator's own launcher on the lab: `lab/launchers/launch-pair.sh` (a container per node, Ray
head and worker, `vllm serve` through `docker exec`, its own sleeps and tails) started by `up` on
the head, proven with the same checkpoints as spark-bot's own launch; a failing one; a cancel."""

from __future__ import annotations

import asyncio
import re
import shlex
import shutil
import signal
import sys
from pathlib import Path

import pytest
import yaml

from cluster.config import ClusterConfig, LauncherConfig, Recipe, Secrets
from cluster.controller import Controller
from cluster.events import CheckpointPassed, Failed, Progress, Ready, parse_event
from cluster.operations.operator_launcher import live_in_group
from cluster.progress.checkpoints import launch_plan
from lab.api import LabInfo
from testkit.lab_cluster import FAST as LAB_FAST
from testkit.lab_cluster import LAB_CONFIG, cluster_for, collect, controller_for
from testkit.terminal import sigint_as_a_terminal_sends_it
from tests.cluster.in_lab.test_cli import spark_bot
from tests.lab.helpers import ssh_to

pytestmark = [pytest.mark.lab, pytest.mark.timeout(180)]

LAUNCH_PAIR = Path(__file__).resolve().parents[3] / "lab" / "launchers" / "launch-pair.sh"
FAST = {**LAB_FAST, "stall": 6}
RECIPE = "pair-script"
OTHER_RECIPE = "other-script"


def script_on_head(lab: LabInfo) -> str:
    """launch-pair.sh copied into the head's home, where an operator keeps such a script (the
    repository may be where the nodes cannot see it: each has its own /tmp); its folder there."""
    folder = Path(lab.head.home) / "spark-vllm-docker"
    folder.mkdir(exist_ok=True)
    shutil.copy2(LAUNCH_PAIR, folder / LAUNCH_PAIR.name)
    return "/root/spark-vllm-docker"


def script_cluster(lab: LabInfo, *options: str, serve_flags: tuple[str, ...] = ()) -> ClusterConfig:
    """The lab config with a recipe whose launcher is launch-pair.sh, run as an operator would
    run it on the head (its options, then vLLM's after `--`), then running that recipe."""
    base = cluster_for(lab, timeouts=FAST)
    worker = lab.workers[0]
    serve = base.serve
    command = [
        "./" + LAUNCH_PAIR.name,
        "--worker",
        worker.fabric_ip,  # reached with `ssh` from the head, as on a Spark pair
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
        launcher=LauncherConfig(command=command, cwd=script_on_head(lab), container="vllm_node"),
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
    """Whether a process of group `pgid` lives on the head (a zombie the lab's lazy init has
    not reaped yet does not)."""
    async with ssh_to(lab, lab.head) as conn:
        result = await conn.run("ps -A -o pgid=,stat=", check=True)
    return live_in_group(str(result.stdout), pgid)


def passed(events) -> dict[str, CheckpointPassed]:
    return {e.checkpoint: e for e in events if isinstance(e, CheckpointPassed)}


def pgid_of(events) -> int:
    evidence = passed(events)["launcher"].evidence
    return int(evidence.split("process group ")[1].split(";")[0])


def with_launcher_script(config: ClusterConfig, folder: Path, name: str, text: str, *args: str):
    """`config` whose recipe runs the script `text` (written to `folder` on the head as `name`)
    with `args` instead of launch-pair.sh."""
    script = folder / name
    script.write_text(text)
    script.chmod(0o755)
    assert config.launcher is not None
    launcher = config.launcher.model_copy(update={"command": ["./" + name, *args]})
    recipe = config.recipes[RECIPE].model_copy(update={"launcher": launcher})
    return config.model_copy(update={"recipes": {RECIPE: recipe}}).with_recipe(RECIPE)


def config_file(
    lab: LabInfo, folder: Path, *options: str, launched: ClusterConfig | None = None
) -> str:
    """configs/lab.yaml with the launcher recipe in it (that of `launched` if given), as an
    operator writes it."""
    data = yaml.safe_load(LAB_CONFIG.read_text())
    launcher = (launched or script_cluster(lab, *options)).launcher
    assert launcher is not None
    data["cluster"]["timeouts"].update(FAST)
    recipe = {
        "description": "the operator's own script",
        "serve": {"model": data["cluster"]["serve"]["model"], "served_model_name": "qwen35"},
        "launcher": launcher.model_dump(exclude_defaults=True),
    }
    # another recipe whose launcher names the same container, listed after it
    other = {**recipe, "serve": {**recipe["serve"], "served_model_name": "qwen35-other"}}
    data["cluster"]["recipes"] = {RECIPE: recipe, OTHER_RECIPE: other}
    path = folder / "sparks.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return str(path)


async def test_a_launcher_script_reaches_ready_from_the_cli_with_the_same_checkpoints(
    clean_launcher, tmp_path
):
    """vLLM in the script's foreground: its lines are the script's output, not a container's."""
    config = config_file(clean_launcher, tmp_path)
    code, out, _ = await spark_bot("up", "--recipe", RECIPE, "--json", config=config)
    events = [parse_event(line) for line in out.splitlines()]
    failures = [e for e in events if isinstance(e, Failed)]
    assert code == 0 and not failures, failures[0].model_dump_json(indent=1)
    launched = script_cluster(clean_launcher)
    plan = [c.id for c in launch_plan(launched)]
    by_id = passed(events)
    after_preflight = plan.index("api_port") + 1
    assert list(by_id) == plan and plan[after_preflight:][:2] == ["launcher", "containers"]
    assert "launch-pair.sh" in by_id["launcher"].evidence
    offline = by_id["model"].evidence
    assert "HF_HUB_OFFLINE=1 in the containers" not in offline, "spark-bot sets none in them"
    assert "HF_HUB_OFFLINE is the launcher's to set" in offline
    containers = by_id["containers"].evidence
    assert containers.count("vllm_node") == 2 and "started by the launcher" in containers
    said = ("Detected head IP", "Starting container", "Starting the Ray", "Ray runtime started.")
    assert any(line.startswith(said) for line in by_id["containers"].log_tail), "its own lines"
    assert "2 active node(s)" in by_id["ray_cluster"].evidence
    assert by_id["weights"].evidence.count("Loading weights took") == 2
    assert "Application startup complete." in by_id["api_server"].evidence
    ready = events[-1]
    assert isinstance(ready, Ready) and ready.recipe == RECIPE and ready.model == "qwen35"
    assert not [e for e in events if isinstance(e, Progress) and e.phase == "launcher"]
    pgid = pgid_of(events)
    assert await group_alive(clean_launcher, pgid), "it serves on in the foreground after Ready"
    async with ssh_to(clean_launcher, clean_launcher.head) as conn:
        processes = str((await conn.run("ps -A -o args=", check=True)).stdout)
    assert f"launcher/{launched.name}/output" not in processes, "its follower ended with `up`"

    code, out, _ = await spark_bot("verify", config=config)  # the recipe found running
    assert code == 0 and "✔ Containers running on every node" in out, out
    code, out, _ = await spark_bot("recipes", config=config)
    assert code == 0 and f"running: {RECIPE}" in out, out
    code, out, _ = await spark_bot("status", config=config)
    assert out.count("vllm_node running") == 2 and f"(recipe {RECIPE})" in out, out
    assert OTHER_RECIPE not in out, "the recipe launched, not another naming its container"
    code, out, _ = await spark_bot("logs", config=config)
    assert code == 0 and "of vllm_node on" in out and "no container" not in out, out

    code, out, _ = await spark_bot("down", config=config)
    assert code == 0 and f"stopped the launcher's process group {pgid}" in out, out
    assert out.count("removed vllm_node") == 2 and "started by the launcher of recipe" in out
    assert not await group_alive(clean_launcher, pgid), "down stops the script"


async def test_a_launcher_that_fails_gives_its_failure_with_its_lines(clean_launcher):
    config = script_cluster(clean_launcher, "--gpu-count", "2")
    events = await collect(Controller(config, Secrets({})).up())
    failure = events[-1]
    assert isinstance(failure, Failed) and failure.signature == "launcher_failed", failure
    assert failure.checkpoint == "containers", "the checkpoint it was waiting for"
    assert "exited with status 1" in failure.summary and "launch-pair.sh" in failure.summary
    assert (
        failure.evidence
        == f"Usage: ./{LAUNCH_PAIR.name} --worker IP [-t image] [--name name] [-e VAR=value] [-v src:dst] [--rm] [-d] -- MODEL [vllm serve flags]"
    )
    assert "Error: Unknown argument: --gpu-count" in failure.log_tail
    assert "launch-pair.sh" in failure.fix and "cd /root/spark-vllm-docker" in failure.fix


# A script that waits on for its containers after its `docker run` failed, as
# eugr/spark-vllm-docker's launch-cluster.sh does (to its own timeout). --cap-add SYS_RESOURCE:
# the lab's host lacks it in its bounding set, so runc refuses the container.
WAITS_AFTER_A_FAILED_RUN = """#!/bin/bash
echo "Starting container vllm_node on the head"
docker run -d --name vllm_node --network host --cap-add SYS_RESOURCE {image} sleep infinity
echo "Waiting for the cluster to form (up to 120 s)"
for _ in $(seq 120); do
    [ "$(docker inspect -f '{{{{.State.Running}}}}' vllm_node 2>/dev/null)" = true ] && exit 0
    sleep 1
done
echo "Error: the cluster did not form"
exit 1
"""


async def test_a_launcher_whose_docker_run_failed_is_stopped_with_dockers_reason_at_once(
    clean_launcher,
):
    base = script_cluster(clean_launcher)
    config = with_launcher_script(
        base,
        Path(clean_launcher.head.home) / "spark-vllm-docker",
        "waits-after-a-failed-run.sh",
        WAITS_AFTER_A_FAILED_RUN.format(image=base.container.image),
    )
    events = await collect(Controller(config, Secrets({})).up())
    failure = events[-1]
    assert isinstance(failure, Failed) and failure.signature == "docker_caps_refused", failure
    started = passed(events)["launcher"].elapsed_s
    limit = config.timeouts.containers
    assert failure.elapsed_s - started < limit / 2, (
        f"told {failure.elapsed_s - started:.1f} s after the launcher started, not at the "
        f"containers' timeout ({limit:g} s)"
    )
    assert failure.checkpoint == "containers" and "unable to apply caps" in failure.evidence
    assert "--cap-add" in failure.fix
    assert "SIGTERM" in failure.cause, "the script was stopped: it would have waited on"
    assert not await group_alive(clean_launcher, pgid_of(events))


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


async def test_preflight_warns_of_a_launcher_that_leaves_rays_memory_monitor_on(
    clean_launcher, tmp_path
):
    code, out, _ = await spark_bot(
        "preflight", "--recipe", RECIPE, config=config_file(clean_launcher, tmp_path)
    )
    assert code == 0, out
    assert "⚠ the launcher (`./launch-pair.sh`) does not set RAY_memory_monitor_refresh_ms=0" in out
    assert "`-e RAY_memory_monitor_refresh_ms=0`" in out

    quiet = config_file(clean_launcher, tmp_path, "-e", "RAY_memory_monitor_refresh_ms=0")
    code, out, _ = await spark_bot("preflight", "--recipe", RECIPE, config=quiet)
    assert code == 0 and "RAY_memory_monitor_refresh_ms" not in out, out


async def test_preflight_warns_when_the_config_turns_rays_memory_monitor_back_on(clean):
    controller = controller_for(clean, env={"RAY_memory_monitor_refresh_ms": "250"})
    memory = next(
        e for e in await collect(controller.preflight()) if getattr(e, "checkpoint", "") == "memory"
    )
    assert isinstance(memory, CheckpointPassed), memory
    assert memory.warning and memory.warning.startswith(
        "container.env sets RAY_memory_monitor_refresh_ms=250"
    )


# A script that gives up on its server after vLLM started (the emulator's NCCL set-up hangs),
# whose trap stops its containers before it exits 1: the stop is its own, not on request.
STOPS_ITS_OWN_CONTAINERS = """#!/bin/bash
worker=$1; shift
stop() {
    docker stop vllm_node >/dev/null
    ssh -o BatchMode=yes "$worker" docker stop vllm_node >/dev/null
}
trap stop EXIT
./launch-pair.sh "$@"
echo "Waiting for vLLM's NCCL set-up"
until docker logs vllm_node 2>&1 | grep -q ncclCommInitRank; do sleep 0.2; done
echo "Error: NCCL did not finish its set-up"
exit 1
"""


def self_stopping_cluster(lab: LabInfo) -> ClusterConfig:
    pair = script_cluster(lab, "-d", "-e", "SPARK_EMU_FAULT=nccl_hang")
    assert pair.launcher is not None
    return with_launcher_script(
        pair,
        Path(lab.head.home) / "spark-vllm-docker",
        "stops-its-own-containers.sh",
        STOPS_ITS_OWN_CONTAINERS,
        lab.workers[0].fabric_ip,
        *pair.launcher.command[1:],
    )


async def test_a_launcher_that_stops_its_own_containers_then_fails_is_its_failure_not_a_request(
    clean_launcher, tmp_path
):
    config = config_file(clean_launcher, tmp_path, launched=self_stopping_cluster(clean_launcher))
    code, out, _ = await spark_bot("up", "--recipe", RECIPE, "--json", config=config)
    events = [parse_event(line) for line in out.splitlines()]
    failure = events[-1]
    assert code == 1 and isinstance(failure, Failed), out
    assert failure.signature == "launcher_failed", failure.model_dump_json(indent=1)
    assert "exited with status 1" in failure.summary and "on request" not in failure.summary
    assert failure.evidence == "Error: NCCL did not finish its set-up"
    assert "stopped its own containers" in failure.cause
    assert "containers" in passed(events), "it failed after its containers started"


async def up_until_its_ray_cluster(
    config: str, stderr: int
) -> tuple[asyncio.subprocess.Process, list]:
    """`spark-bot up --json` of the launcher's recipe, its events read until its Ray cluster
    formed (the launcher's script is then running on the head)."""
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "bot.cli",
        "up",
        "--recipe",
        RECIPE,
        "--json",
        "--config",
        config,
        stdout=asyncio.subprocess.PIPE,
        stderr=stderr,
        preexec_fn=sigint_as_a_terminal_sends_it,
    )
    assert process.stdout is not None
    seen: list = []
    while not (
        seen and isinstance(seen[-1], CheckpointPassed) and seen[-1].checkpoint == "ray_cluster"
    ):
        line = await asyncio.wait_for(process.stdout.readline(), 60)
        assert line, f"up ended before its Ray cluster formed: {seen[-1:]}"
        seen.append(parse_event(line.decode()))
    return process, seen


async def test_ctrl_c_of_a_launcher_up_prints_a_summary_and_leaves_nothing(
    clean_launcher, tmp_path
):
    config = config_file(clean_launcher, tmp_path)
    process, seen = await up_until_its_ray_cluster(config, asyncio.subprocess.PIPE)
    process.send_signal(signal.SIGINT)
    ssh = passed(seen)["ssh"]
    slowest_ms = max(int(ms) for ms in re.findall(r"connected in (\d+) ms", ssh.evidence))
    assert ssh.elapsed_s * 1000 >= slowest_ms, "the clock starts with the command, before SSH"
    _, stderr = await asyncio.wait_for(process.communicate(), 60)
    said = stderr.decode()
    assert process.returncode == 130
    assert "interrupted (Ctrl-C)" in said and "status --config" in said, said
    assert "DockerRefused(" not in said, said
    assert not await group_alive(clean_launcher, pgid_of(seen))
    [status] = await collect(Controller(script_cluster(clean_launcher), Secrets({})).status())
    assert not [c for c in status.containers if c.present], status.containers


# As eugr/spark-vllm-docker's launch-cluster.sh (commit 74c02c37c280c64d07119350a7d42225f1b154ba)
# does: its containers run with `docker run --rm`, and its cleanup trap (EXIT INT TERM HUP)
# stops them, the head's, then each worker's over ssh: Docker removes each as it stops, while
# `down` removes them too.
REMOVES_ITS_OWN_CONTAINERS = """#!/bin/bash
worker=$1; shift
cleanup() {
    trap - EXIT INT TERM HUP
    echo "Stopping cluster..."
    docker stop vllm_node >/dev/null 2>&1 || true
    ssh -o BatchMode=yes "$worker" docker stop vllm_node >/dev/null 2>&1 || true
    echo "Cluster stopped."
}
trap cleanup EXIT INT TERM HUP
./launch-pair.sh --rm "$@"
"""


def self_removing_cluster(lab: LabInfo) -> ClusterConfig:
    pair = script_cluster(lab)
    assert pair.launcher is not None
    return with_launcher_script(
        pair,
        Path(lab.head.home) / "spark-vllm-docker",
        "removes-its-own-containers.sh",
        REMOVES_ITS_OWN_CONTAINERS,
        lab.workers[0].fabric_ip,
        *pair.launcher.command[1:],
    )


async def test_down_while_the_launcher_removes_its_own_containers_says_so_and_leaves_nothing(
    clean_launcher, tmp_path
):
    config = config_file(clean_launcher, tmp_path, launched=self_removing_cluster(clean_launcher))
    code, out, _ = await spark_bot("up", "--recipe", RECIPE, "--json", config=config)
    events = [parse_event(line) for line in out.splitlines()]
    assert code == 0 and isinstance(events[-1], Ready), out
    pgid = pgid_of(events)

    code, out, err = await spark_bot("down", config=config)  # its trap runs as down removes
    assert code == 0, out + err
    assert f"stopped the launcher's process group {pgid}" in out, out
    assert "could not remove" not in out and "journalctl" not in out, out
    said = [line for line in out.splitlines() if "vllm_node" in line]
    assert len(said) <= 2 and all(line.split("] ")[1].startswith("removed: ") for line in said)
    assert not await group_alive(clean_launcher, pgid)
    [status] = await collect(Controller(script_cluster(clean_launcher), Secrets({})).status())
    assert not [c for c in status.containers if c.present], status.containers


def run_of(events) -> str:
    """The launcher run's folder on the head, as its checkpoint names it."""
    evidence = passed(events)["launcher"].evidence
    return evidence.split("its output is followed in ")[1].split("/output")[0]


async def on_head(lab: LabInfo, *argv: str) -> str:
    async with ssh_to(lab, lab.head) as conn:
        result = await conn.run(shlex.join(argv), check=True, timeout=90)
    return str(result.stdout)


# On the head: until no live process of group $1 is left (a zombie not reaped yet is none), a
# bounded wait for that event.
GROUP_ENDED = (
    "while ps -A -o pgid=,stat= | awk -v g=\"$1\" '$1 == g && $2 !~ /^Z/ {f = 1} END {exit !f}'; "
    "do sleep 0.1; done"
)


# A launcher whose end lags its containers' (as launch-cluster.sh's cleanup trap stops each node
# in turn): once its server has ended (its container removed), it ends only when the cluster's
# container runs again (the next run's): left alone, the old run would end while the next one
# runs (and drive its containers until then).
# waits for a container other than its own (the next run's), then ends as a failure: its own
# may still run when launch-pair.sh returns, so its ID is told apart
ENDS_AFTER_THE_NEXT_RUN_STARTS = """#!/bin/bash
./launch-pair.sh "$@"
first=$(docker inspect -f '{{.Id}}' vllm_node 2>/dev/null)
echo "Stopping cluster..."
while :; do
    now=$(docker inspect -f '{{.State.Running}} {{.Id}}' vllm_node 2>/dev/null)
    [ "${now%% *}" = true ] && [ "${now#* }" != "$first" ] && break
    sleep 0.2
done
echo "Cluster stopped."
exit 1
"""


async def test_kill_9_of_the_cli_mid_launch_then_up_replace_gives_the_new_run_state_of_its_own(
    clean_launcher, tmp_path
):
    """`kill -9` of the CLI during a launcher `up` leaves its launcher running (its own session);
    `up --replace` then: the old run, no launch's now, is stopped before the new one starts,
    its end touches none of the new run's state, the new run's output is its own from its
    first line (no end mark of the old run), `status` shows the new run, and `down` stops the
    new launcher."""
    pair = script_cluster(clean_launcher)
    assert pair.launcher is not None
    lagging = with_launcher_script(
        pair,
        Path(clean_launcher.head.home) / "spark-vllm-docker",
        "ends-after-the-next-run-starts.sh",
        ENDS_AFTER_THE_NEXT_RUN_STARTS,
        *pair.launcher.command[1:],
    )
    config = config_file(clean_launcher, tmp_path, launched=lagging)
    process, seen = await up_until_its_ray_cluster(config, asyncio.subprocess.DEVNULL)
    process.kill()  # SIGKILL: nothing of it runs on, no cleanup
    assert await process.wait() == -signal.SIGKILL
    old_pgid, old_run = pgid_of(seen), run_of(seen)
    assert await group_alive(clean_launcher, old_pgid), "its launcher outlives it"

    code, out, _ = await spark_bot("up", "--replace", "--recipe", RECIPE, "--json", config=config)
    events = [parse_event(line) for line in out.splitlines()]
    assert code == 0 and isinstance(events[-1], Ready), out
    new_pgid, new_run = pgid_of(events), run_of(events)
    assert new_pgid != old_pgid and new_run != old_run
    await on_head(clean_launcher, "timeout", "60", "sh", "-c", GROUP_ENDED, "sh", str(old_pgid))
    recorded = await on_head(clean_launcher, "sh", "-c", 'cat "$1" || :', "sh", f"{new_run}/pgid")
    assert recorded.strip() == str(new_pgid), "the old run's end removed none of the new run's"
    # the old run, no launch's, was stopped before the new one started (not left to drive the
    # new run's containers), and only its own folder's state went with it
    said = passed(events)["launcher"].evidence
    assert (
        f"an earlier run still ran, no launch's: stopped the launcher's process group {old_pgid}"
        in said
    )
    left = (await on_head(clean_launcher, "sh", "-c", 'ls "$1" || :', "sh", old_run)).split()
    assert "pgid" not in left, left
    new_output = await on_head(clean_launcher, "cat", f"{new_run}/output")
    assert new_output.startswith("Detected head IP: "), new_output[:300]
    assert "Cluster stopped." not in new_output, "the old run's last words are in its own"
    assert "spark-bot-launcher-end-" not in new_output, "no run's end mark in the new output"
    assert not [
        line for e in passed(events).values() for line in e.log_tail if "launcher-end" in line
    ]

    code, out, _ = await spark_bot("status", config=config)
    assert out.count("vllm_node running") == 2 and f"(recipe {RECIPE})" in out, out
    code, out, _ = await spark_bot("down", config=config)
    assert code == 0 and f"stopped the launcher's process group {new_pgid}" in out, out
    assert not await group_alive(clean_launcher, new_pgid), "down stops the new launcher"


async def test_a_launcher_launch_closed_after_another_took_it_over_leaves_the_new_runs_containers(
    clean_launcher,
):
    """`up --take-over --replace` while an earlier launcher launch is still open: the earlier
    one's cleanup stops its own launcher and removes the containers it saw running, by their
    Ids: the new run's, under the same name, and its launcher serve on."""
    config = script_cluster(clean_launcher)
    old = Controller(config, Secrets({})).up()
    seen = []
    async for event in old:
        seen.append(event)
        assert not isinstance(event, Failed), event.model_dump_json(indent=1)
        if isinstance(event, CheckpointPassed) and event.checkpoint == "containers":
            break  # its launcher's containers run; it waits there, open
    try:
        new = await collect(Controller(config, Secrets({})).up(replace=True, take_over=True))
        assert isinstance(new[-1], Ready), new[-1].model_dump_json(indent=1)
    finally:
        await old.aclose()  # the old launch's cleanup runs now
    assert not await group_alive(clean_launcher, pgid_of(seen)), "it stopped its own launcher"
    assert await group_alive(clean_launcher, pgid_of(new)), "not the new one"
    [status] = await collect(Controller(config, Secrets({})).status())
    running = [c for c in status.containers if c.container == "vllm_node" and c.running]
    assert len(running) == 2 and status.api_healthy is True, status
