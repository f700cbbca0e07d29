"""The operator's launcher supervised (cluster/operations/operator_launcher.py), on the `local` driver: real
processes in a real session of their own, a stand-in Docker engine (no container is asked for).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import stat
import subprocess
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
import yaml
from aiohttp import web

from bot.cli import _print_events
from bot.config import load_config
from bot.render_text import render
from cluster.config import ClusterConfig, LauncherConfig, Recipe, Secrets, Timeouts
from cluster.controller import Controller
from cluster.events import StatusReport
from cluster.nodes.local import LocalNode
from cluster.operations.inventory import remove_container
from cluster.operations.operator_launcher import Launcher, live_in_group, stop_launcher
from cluster.operations.operator_launcher import _ended as ended
from testkit.docker_standin import docker_standin, failing
from testkit.lab_cluster import LAB_CONFIG, collect
from testkit.local_cluster import local_cluster
from testkit.planted_secrets import HF_TOKEN


def cluster(socket: Path, **launcher) -> ClusterConfig:
    """One local node (the head) running a recipe whose launcher is `launcher`."""
    base = local_cluster("lab", [socket], timeouts=Timeouts(down=4, launcher=10))
    return base.model_copy(
        update={"recipe": "mine", "launcher": LauncherConfig(container="vllm_node", **launcher)}
    )


def script(folder: Path, body: str) -> str:
    path = folder / "launch.sh"
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


@asynccontextmanager
async def head_node(tmp_path: Path, **launcher):
    async with docker_standin(tmp_path / "docker.sock", failing) as socket:
        config = cluster(socket, **launcher)
        node = await LocalNode.connect(config.head, timeout=5, call_timeout=5)
        try:
            yield config, node
        finally:
            await node.aclose()


def alive(pgid: int) -> bool:
    """Whether a process of group `pgid` lives (a zombie not yet reaped by init does not)."""
    listing = subprocess.run(["ps", "-A", "-o", "pgid=,stat="], capture_output=True, text=True)
    return live_in_group(listing.stdout, pgid)


async def test_output_is_followed_kept_bounded_and_redacted_and_the_exit_status_read(tmp_path):
    command = script(
        tmp_path,
        f'echo "in $(pwd) with {{$1}}"\necho "token {HF_TOKEN}"\n'
        "i=0; while [ $i -lt 50 ]; do echo line $i; i=$((i+1)); done\n"
        "printf 'no newline at the end'\nexit 3\n",
    )
    seen: list[str] = []
    async with head_node(
        tmp_path, command=[command, "two words; $(rm -rf /)"], cwd=str(tmp_path), output_lines=10
    ) as (config, node):
        launcher = Launcher(
            config, Secrets({"HF_TOKEN": HF_TOKEN}), node, str(tmp_path), on_line=seen.append
        )
        pgid = await launcher.start()
        assert pgid > 1 and pgid != os.getpgid(0), "a process group of its own"
        status = await launcher.follow()
    assert status == 3
    assert seen[0] == f"in {tmp_path} with {{two words; $(rm -rf /)}}", "one argv word, unquoted"
    assert HF_TOKEN not in "\n".join(seen) and "token" in seen[1], "redacted as it is read"
    assert launcher.total_lines == 53 and len(launcher.lines) == 10, "kept: the last 10"
    assert list(launcher.lines)[-1] == "no newline at the end"
    run = Path(launcher.run)
    assert run.parent == tmp_path / ".cache/spark-bot/launcher" / config.name
    assert (run / "status").read_text().strip() == "3" and not (run / "pgid").exists()


async def test_a_missing_folder_or_command_is_its_exit_status_with_the_shells_words(tmp_path):
    async with head_node(tmp_path, command=["./nowhere.sh"], cwd=str(tmp_path / "gone")) as (
        config,
        node,
    ):
        launcher = Launcher(config, Secrets({}), node, str(tmp_path))
        await launcher.start()
        assert await launcher.follow() == 126
        assert "gone" in "\n".join(launcher.lines)
    async with head_node(tmp_path, command=["./nowhere.sh"], cwd=str(tmp_path)) as (config, node):
        launcher = Launcher(config, Secrets({}), node, str(tmp_path))
        await launcher.start()
        assert await launcher.follow() == 127


async def test_stop_ends_the_whole_process_group_even_a_child_that_ignores_sigterm(tmp_path):
    command = script(
        tmp_path,
        "sleep 300 &\nsh -c 'trap \"\" TERM; echo trapped; while :; do sleep 1; done' &\nwait\n",
    )
    trapped = asyncio.Event()
    async with head_node(tmp_path, command=[command]) as (config, node):
        launcher = Launcher(
            config,
            Secrets({}),
            node,
            str(tmp_path),
            on_line=lambda line: trapped.set() if line == "trapped" else None,
        )
        pgid = await launcher.start()
        following = asyncio.create_task(launcher.follow())
        await asyncio.wait_for(trapped.wait(), 10)  # the child that ignores SIGTERM is in place
        assert alive(pgid)
        done = await launcher.stop()
        assert "SIGKILL" in done, done
        assert not alive(pgid), "no process of the group is left"
        assert await following is None, "killed: no exit status"
        assert await stop_launcher(config, node, str(tmp_path)) is None, "nothing left to stop"


async def test_down_stops_a_launcher_still_running_and_leaves_another_groups_id_alone(tmp_path):
    command = script(tmp_path, "echo serving; exec sleep 300\n")
    async with head_node(tmp_path, command=[command]) as (config, node):
        launcher = Launcher(config, Secrets({}), node, str(tmp_path))
        pgid = await launcher.start()
        done = await stop_launcher(config, node, str(tmp_path))
        assert done is not None and f"process group {pgid}" in done and not alive(pgid)

        # A stale id (its process gone, the id given to an unrelated group) is not signalled.
        run = Path(launcher.run)
        other = await asyncio.create_subprocess_exec("sleep", "30", start_new_session=True)
        (run / "pgid").write_text(f"{other.pid}\n")
        assert await stop_launcher(config, node, str(tmp_path)) is None
        assert alive(other.pid)
        other.kill()
        await other.wait()


@pytest.mark.parametrize(
    ("launcher", "problem"),
    [
        ({"command": "./launch.sh -d", "container": "vllm_node"}, "launcher.command"),
        ({"command": [], "container": "vllm_node"}, "launcher.command"),
        ({"command": ["./launch.sh", "a\nb"], "container": "vllm_node"}, "launcher.command.1"),
        ({"command": ["./launch.sh"], "container": "vllm node"}, "launcher.container"),
        ({"command": ["./launch.sh"]}, "launcher.container"),
        ({"command": ["./launch.sh"], "container": "x", "cwd": "rel/dir"}, "launcher.cwd"),
        ({"command": ["./launch.sh"], "container": "x", "shell": True}, "launcher.shell"),
        ({"command": ["./l.sh", "-e", f"HF_TOKEN={HF_TOKEN}"], "container": "x"}, "secret"),
    ],
)
def test_a_bad_launcher_is_refused_naming_the_recipe_and_the_field(tmp_path, launcher, problem):
    data = yaml.safe_load(LAB_CONFIG.read_text())
    serve = {"model": "org/m", "served_model_name": "m"}
    data["cluster"]["recipes"] = {"mine": {"serve": serve, "launcher": launcher}}
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(Exception) as caught:
        load_config(path)
    assert "recipe mine" in str(caught.value) or "recipes.mine" in str(caught.value)
    assert problem in str(caught.value), str(caught.value)
    assert HF_TOKEN not in str(caught.value)


def test_a_launcher_recipe_names_its_container_and_down_knows_it(tmp_path):
    data = yaml.safe_load(LAB_CONFIG.read_text())
    data["cluster"]["recipes"] = {
        "mine": {
            "serve": {"model": "org/m"},
            "launcher": {"command": ["./launch.sh"], "container": "vllm_node"},
        }
    }
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(data))
    base = load_config(path).cluster
    mine = base.with_recipe("mine")
    assert base.launcher is None and base.container.name == "vllm_lab"
    assert mine.launcher is not None and mine.container.name == "vllm_node"
    assert base.launcher_containers == {"vllm_node": ["mine"]}


def test_the_docs_example_launcher_recipe_loads(tmp_path):
    readme = (Path(__file__).resolve().parents[2] / "docs" / "recipes.md").read_text()
    start = readme.index("```yaml\n# configs/recipes/minimax-m2.5-script.yaml")
    example = readme[start + len("```yaml\n") : readme.index("```", start + 8)]
    (tmp_path / "recipes").mkdir()
    (tmp_path / "recipes" / "minimax-m2.5-script.yaml").write_text(example)
    (tmp_path / "sparks.yaml").write_text(LAB_CONFIG.read_text())
    config = load_config(tmp_path / "sparks.yaml").cluster.with_recipe("minimax-m2.5-script")
    assert config.launcher is not None and config.launcher.command[:4] == [
        "./launch-cluster.sh",
        "-t",
        "vllm-node",
        "--ray",
    ]
    assert config.container.name == "vllm_node" and config.serve.served_model_name == "minimax-m2.5"


async def test_the_output_file_is_rotated_at_its_bound_and_followed_across(tmp_path):
    """Five batches of about 3.3 KB through a 4 KiB bound: the file is rotated four times, the
    follower reads every line in order across each rotation (lines cut by it too), and the head
    keeps at most two files of 4 KiB. Each batch waits for the follower to have read the one
    before (a file the test makes), so the test proves the follower, not a race."""
    batch = 'i=0; while [ $i -lt 150 ]; do echo "line $i of batch $1 ....."; i=$((i+1)); done'
    command = script(
        tmp_path,
        f'for b in 1 2 3 4 5; do\n  set -- $b; {batch}\n  echo "batch $b done"\n'
        f'  while [ ! -e "{tmp_path}/read-$b" ]; do sleep 0.02; done\ndone\n',
    )
    seen: list[str] = []

    def read(line: str) -> None:
        seen.append(line)
        if line.startswith("batch ") and line.endswith(" done"):
            (tmp_path / f"read-{line.split()[1]}").touch()

    async with head_node(tmp_path, command=[command], output_file_bytes=4096) as (config, node):
        launcher = Launcher(config, Secrets({}), node, str(tmp_path), on_line=read)
        await launcher.start()
        try:
            status = await asyncio.wait_for(launcher.follow(), 30)
        finally:
            await launcher.stop()  # a follower lost at a rotation leaves the script waiting
    assert status == 0
    expected = [
        line
        for b in range(1, 6)
        for line in [*(f"line {i} of batch {b} ....." for i in range(150)), f"batch {b} done"]
    ]
    assert seen == expected
    run = Path(launcher.run)
    written = sum(len(line) + 1 for line in expected)
    assert written > 4 * 4096
    assert (run / "output").stat().st_size <= 4096
    assert (run / "output.1").stat().st_size == 4096
    assert (run / "output").read_bytes().endswith(f"{launcher._mark} 0\n".encode())


async def test_each_run_has_state_of_its_own_that_an_earlier_run_ending_does_not_touch(tmp_path):
    """A run left by a spark-bot that was killed (nobody follows it) ends while the next run
    serves: the next run's pgid is still recorded, its output holds none of the earlier run's,
    `down` stops it; the next start removes the folders of both ended runs."""
    go = tmp_path / "go"
    earlier_script = script(tmp_path, f'echo earlier\nwhile [ ! -e "{go}" ]; do sleep 0.05; done\n')
    later_script = tmp_path / "later.sh"
    later_script.write_text("#!/bin/sh\necho later\nexec sleep 300\n")
    later_script.chmod(0o755)
    async with head_node(tmp_path, command=[earlier_script]) as (config, node):
        earlier = Launcher(config, Secrets({}), node, str(tmp_path))
        await earlier.start()
        later_config = config.model_copy(
            update={"launcher": config.launcher.model_copy(update={"command": [str(later_script)]})}
        )
        later = Launcher(later_config, Secrets({}), node, str(tmp_path))
        pgid = await later.start()
        assert later.run != earlier.run and Path(later.run).parent == Path(earlier.run).parent
        go.touch()
        assert await earlier.follow() == 0  # the earlier run has ended, its wrapper cleaned up
        assert (Path(later.run) / "pgid").read_text().strip() == str(pgid)
        assert earlier._mark not in (Path(later.run) / "output").read_text()
        done = await stop_launcher(config, node, str(tmp_path))
        assert done is not None and f"process group {pgid}" in done and not alive(pgid)
        third = Launcher(config, Secrets({}), node, str(tmp_path))
        await third.start()
        await third.stop()
        assert [p.name for p in Path(third.run).parent.iterdir()] == [Path(third.run).name]


async def test_a_removal_already_in_progress_is_no_error_once_the_container_is_gone(tmp_path):
    """The launcher's own `docker rm` on its way out races `down`'s: Docker answers 409, the
    container goes; `down` says so, and raises nothing."""
    inspected = 0

    async def racing(request):
        nonlocal inspected
        if request.method == "GET" and request.path.endswith("/json"):
            inspected += 1
            if inspected > 2:
                return web.json_response({"message": "No such container: vllm_node"}, status=404)
            state = {"Status": "exited", "Running": False}
            return web.json_response({"Id": "f" * 64, "State": state, "Config": {"Labels": {}}})
        message = "removal of container vllm_node is already in progress"
        return web.json_response({"message": message}, status=409)

    async with docker_standin(tmp_path / "docker.sock", racing) as socket:
        config = cluster(socket, command=["./launch.sh"])
        node = await LocalNode.connect(config.head, timeout=5, call_timeout=5)
        try:
            removed, detail = await remove_container(node, "vllm_node", owner=None, timeout=5)
        finally:
            await node.aclose()
    assert removed and "removed meanwhile by another" in detail, detail


async def test_a_removal_by_id_leaves_a_container_of_the_same_name_with_another_id(tmp_path):
    """After `up --take-over --replace`, the old launch's cleanup finds the new launch's
    container under the name it knew: another Id, so it is neither stopped nor removed."""
    changes: list[str] = []

    async def taken_over(request):
        if request.method == "GET" and request.path.endswith("/json"):
            state = {"Status": "running", "Running": True}
            labels = {"spark-bot.cluster": "lab"}
            return web.json_response({"Id": "b" * 64, "State": state, "Config": {"Labels": labels}})
        changes.append(f"{request.method} {request.path}")
        return web.json_response({}, status=204)

    async with docker_standin(tmp_path / "docker.sock", taken_over) as socket:
        config = cluster(socket, command=["./launch.sh"])
        node = await LocalNode.connect(config.head, timeout=5, call_timeout=5)
        try:
            removed, detail = await remove_container(
                node, "vllm_node", owner="lab", timeout=5, container_id="a" * 64
            )
        finally:
            await node.aclose()
    assert not removed and "another container now (bbbbbbbbbbbb" in detail, detail
    assert changes == [], "nothing stopped or removed"


@asynccontextmanager
async def runs_unreadable(tmp_path: Path):
    """A head running a launcher's container that two recipes name (so the head's runs must say
    which ran) whose runs' listing hangs past timeouts.launcher (1 s): a `pgid` it cannot finish
    reading (a FIFO with no writer, as a hung file system would)."""

    async def engine(request):
        if request.method == "GET" and request.path.endswith("/vllm_node/json"):
            state = {"Status": "running", "Running": True, "StartedAt": "2026-12-04T21:00:00Z"}
            return web.json_response(
                {"Id": "d" * 64, "Image": "sha256:" + "e" * 64, "State": state, "Config": {}}
            )
        return web.json_response({"message": "No such container"}, status=404)

    runs = tmp_path / ".cache" / "spark-bot" / "launcher" / "lab" / "1796000000-4242"
    runs.mkdir(parents=True)
    os.mkfifo(runs / "pgid")  # no writer: reading it never ends
    async with docker_standin(tmp_path / "docker.sock", engine) as socket:
        base = cluster(socket, command=["./launch.sh"])
        head = base.head.model_copy(update={"local_env": {"HOME": str(tmp_path)}})
        launcher = LauncherConfig(command=["./launch.sh"], container="vllm_node")
        recipe = Recipe(serve=base.serve, launcher=launcher)
        try:
            yield base.model_copy(
                update={
                    "nodes": [head],
                    "timeouts": base.timeouts.model_copy(update={"launcher": 1}),
                    "recipes": {"one": recipe, "two": recipe},
                }
            )
        finally:
            with contextlib.suppress(OSError):  # the reader left blocked: let it end
                os.close(os.open(runs / "pgid", os.O_WRONLY | os.O_NONBLOCK))


async def test_status_says_the_launched_recipe_is_unknown_when_the_heads_runs_cannot_be_read(
    tmp_path,
):
    """The part that cannot be known is unknown, with why; the rest of the status is shown all
    the same."""
    async with runs_unreadable(tmp_path) as config:
        [status] = await collect(Controller(config, Secrets({})).status())
    assert isinstance(status, StatusReport)
    [launched] = [c for c in status.containers if c.container == "vllm_node"]
    assert launched.running and launched.recipe is None
    unknown = launched.recipe_unknown
    assert unknown and unknown.startswith("its launcher's runs on spark-a could not be read: ")
    assert "did not finish within 1 s" in unknown, unknown
    assert status.memory, "the rest is shown: the node's memory"
    said = render(status)
    assert "vllm_node running" in said and "(recipe unknown: " in said, said


def follower_pid(run: str) -> int:
    """The pid of the `tail` that follows run `run`'s output."""
    listing = subprocess.run(
        ["ps", "-A", "-ww", "-o", "pid=,args="], capture_output=True, text=True
    )
    [pid] = [
        int(line.split()[0])
        for line in listing.stdout.splitlines()
        if "tail " in line and f"{run}/output" in line
    ]
    return pid


async def test_a_new_run_prunes_no_ended_run_whose_follower_has_not_read_its_end(tmp_path):
    """A run ends (its pgid removed, its end written) while its follower has not read the end
    yet (stopped here with SIGSTOP: a slow link, a busy head), and a new run starts then: the
    ended run's folder stays for its follower, which reads its last line and its exit status;
    once read, the next start removes it."""
    go = tmp_path / "go"
    ending = script(
        tmp_path, f'echo first\nwhile [ ! -e "{go}" ]; do sleep 0.05; done\necho last\n'
    )
    first = asyncio.Event()
    started: list[Launcher] = []
    async with head_node(tmp_path, command=[ending]) as (config, node):
        try:
            earlier = Launcher(
                config,
                Secrets({}),
                node,
                str(tmp_path),
                on_line=lambda line: first.set() if line == "first" else None,
            )
            pgid = await earlier.start()
            started.append(earlier)
            following = asyncio.create_task(earlier.follow())
            await asyncio.wait_for(first.wait(), 10)  # its follower reads
            reader = follower_pid(earlier.run)
            os.kill(reader, signal.SIGSTOP)
            try:
                go.touch()
                assert await ended(node, pgid, 10, 10), "the earlier run's wrapper has ended"
                assert not (Path(earlier.run) / "pgid").exists()
                later = Launcher(config, Secrets({}), node, str(tmp_path))
                await later.start()
                started.append(later)
                assert Path(earlier.run).is_dir(), "its follower has not read its end yet"
            finally:
                os.kill(reader, signal.SIGCONT)
            assert await asyncio.wait_for(following, 10) == 0
            assert list(earlier.lines)[-1] == "last"
            await later.stop()
            third = Launcher(config, Secrets({}), node, str(tmp_path))
            await third.start()
            started.append(third)
            await third.stop()
            assert not Path(earlier.run).exists() and not Path(later.run).exists(), "read: pruned"
        finally:
            go.touch()  # a run still waiting ends: nothing outlives the test
            for launcher in started:
                await launcher.stop()


async def test_a_removal_that_fails_is_said_as_failed_and_down_exits_1(tmp_path, capsys):
    """Not a race: the engine refuses the removal. `down` says it failed (not "nothing to
    remove") and the CLI exits 1: something may be left."""

    async def refusing(request):
        if request.method == "GET" and request.path.endswith("/json"):
            state = {"Status": "exited", "Running": False}
            labels = {"spark-bot.cluster": "lab"}
            return web.json_response({"Id": "f" * 64, "State": state, "Config": {"Labels": labels}})
        message = "driver overlay2 failed to remove root filesystem: device or resource busy"
        return web.json_response({"message": message}, status=500)

    async with docker_standin(tmp_path / "docker.sock", refusing) as socket:
        config = local_cluster("lab", [socket], timeouts=Timeouts(down=4))
        code = await _print_events(Controller(config, Secrets({})).down(), as_json=False)
    said = capsys.readouterr().out
    assert code == 1, said
    assert (
        "FAILED: could not remove vllm_lab from spark-a" in said
        and "device or resource busy" in said
    )
