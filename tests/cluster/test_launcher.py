"""The operator's launcher supervised (cluster/operations/operator_launcher.py), on the `local` driver: real
processes in a real session of their own, a stand-in Docker engine (no container is asked for).
"""

from __future__ import annotations

import asyncio
import os
import stat
import subprocess
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
import yaml
from aiohttp import web

from bot.config import load_config
from cluster.config import ClusterConfig, LauncherConfig, Secrets, Timeouts
from cluster.nodes.local import LocalNode
from cluster.operations.inventory import remove_container
from cluster.operations.operator_launcher import Launcher, live_in_group, stop_launcher
from testkit.docker_standin import docker_standin, failing
from testkit.lab_cluster import LAB_CONFIG
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
