"""The error seam: library errors become ours, and a hung Docker engine is a bounded,
per-node error, not a wait without end (no lab: stand-in engines on unix sockets)."""

from __future__ import annotations

import ast
import asyncio
import gc
import os
import re
import signal
import subprocess
from pathlib import Path

import aiodocker
import aiohttp
import asyncssh
import httpx
import pytest

from bot.config import load_config
from cluster.config import ClusterConfig, Secrets, Timeouts
from cluster.controller import Controller
from cluster.errors import (
    ContainerMissing,
    DockerRefused,
    DockerUnavailable,
    ImageMissing,
    NodeTimedOut,
    NodeUnreachable,
)
from cluster.events import Failed
from cluster.nodes.local import LocalNode
from cluster.nodes.seam import command_error, docker_error, ssh_login_errors
from cluster.serving.api import error_text
from testkit.docker_standin import docker_standin, hanging
from testkit.lab_cluster import LAB_CONFIG, collect
from testkit.local_cluster import local_cluster

pytestmark = pytest.mark.timeout(60)
ROOT = Path(__file__).resolve().parents[2]
CALL_TIMEOUT = 0.5


@pytest.mark.parametrize(
    ("error", "about", "expected", "says"),
    [
        (
            aiodocker.DockerError(404, "No such container: vllm"),
            {"container": "vllm"},
            ContainerMissing,
            "no container vllm on spark-a",
        ),
        (
            aiodocker.DockerError(404, "No such image: vllm:x"),
            {"image": "vllm:x"},
            ImageMissing,
            "image vllm:x is not on spark-a",
        ),
        (
            aiodocker.DockerError(409, "Conflict. The name is in use"),
            {"container": "vllm"},
            DockerRefused,
            "refused creating it: Conflict. The name is in use",
        ),
        (
            aiodocker.DockerError(900, "Cannot connect to Docker Engine"),
            {},
            DockerUnavailable,
            "lost the connection to the Docker engine while creating it",
        ),
        (aiohttp.ServerDisconnectedError(), {}, DockerUnavailable, "lost the connection"),
        (
            ConnectionResetError(104, "Connection reset by peer"),
            {},
            DockerUnavailable,
            "Connection reset by peer",
        ),
        (TimeoutError(), {}, NodeTimedOut, "did not finish creating it within 2.5 s"),
    ],
)
def test_docker_library_errors_map_to_node_errors_with_a_fix(error, about, expected, says):
    mapped = docker_error("spark-a", "creating it", error, timeout=2.5, **about)
    assert type(mapped) is expected
    assert mapped.node == "spark-a" and says in mapped.problem and mapped.fix
    if isinstance(mapped, DockerRefused):
        assert mapped.status == 409


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        (TimeoutError(), NodeTimedOut),
        (ConnectionResetError(104, "Connection reset by peer"), NodeUnreachable),
    ],
)
def test_a_command_that_cannot_run_names_the_node_and_the_command(error, expected):
    mapped = command_error("spark-b", ["ibdev2netdev"], 7, error)
    assert (
        type(mapped) is expected and "`ibdev2netdev`" in mapped.problem and mapped.node == "spark-b"
    )


def test_no_library_error_is_caught_outside_the_seam():
    """asyncssh, aiohttp and aiodocker errors are caught in cluster/nodes/seam.py only, and no
    code above the drivers tests an aiodocker status."""
    libraries = {"asyncssh", "aiohttp", "aiodocker"}
    offenders = []
    for folder in ("cluster", "handlers"):
        for path in (ROOT / folder).rglob("*.py"):
            if path == ROOT / "cluster/nodes/seam.py":
                continue
            source = path.read_text()
            if ".status == 900" in source or "status == 404" in source:
                offenders.append(f"{path.relative_to(ROOT)}: tests a Docker status")
            for node in ast.walk(ast.parse(source)):
                if isinstance(node, ast.ExceptHandler) and node.type is not None:
                    named = {
                        n.value.id
                        for n in ast.walk(node.type)
                        if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name)
                    }
                    if named & libraries:
                        offenders.append(
                            f"{path.relative_to(ROOT)}:{node.lineno} catches {sorted(named & libraries)}"
                        )
    assert offenders == []


def hung_cluster(socket: Path) -> ClusterConfig:
    return local_cluster(
        "hung",
        [socket],
        fabric_ips=["127.0.0.1"],
        serve={
            "served_model_name": "model",
            "backend": "mp",
            "tensor_parallel_size": 1,
            "max_model_len": 8192,
            "port": 18000,
            "master_port": 29500,
        },
        timeouts=Timeouts(connect=5, docker=CALL_TIMEOUT, down=5),
    )


@pytest.fixture
async def hung_engine(tmp_path):
    """An engine that answers /version and hangs on everything else (as a wedged dockerd does)."""
    reached = asyncio.Event()
    async with docker_standin(
        Path("/tmp") / f"spark-hung-{tmp_path.name[-20:]}.sock", hanging(reached)
    ) as socket:
        yield socket, reached


async def test_a_hung_engine_is_a_bounded_node_error_in_status_logs_preflight_and_down(hung_engine):
    socket, reached = hung_engine
    controller = Controller(hung_cluster(socket), Secrets({}))

    async with asyncio.timeout(20):
        with pytest.raises(NodeTimedOut) as timed_out:
            await collect(controller.status())
        assert reached.is_set() and timed_out.value.node == "spark-a"
        assert (
            "the Docker engine did not finish inspecting container vllm_hung within 0.5 s"
            in str(timed_out.value)
        )

        # (logs inspects the container first: the launcher's may stand in for ours)
        with pytest.raises(
            NodeTimedOut,
            match=r"(?:reading container vllm_hung's log|inspecting container vllm_hung) within 0\.5 s",
        ):
            await collect(controller.logs())

        events = await collect(controller.preflight())
        failed = events[-1]
        assert isinstance(failed, Failed) and failed.node == "spark-a"
        assert "within 0.5 s" in failed.summary and "raise timeouts.docker" in failed.fix

        [removed] = await collect(controller.down())
        assert not removed.removed and "within 0.5 s" in removed.detail


async def test_a_connect_cancelled_while_the_engine_answers_leaks_no_session(tmp_path):
    """Cancelling while the Docker connection opens closes its HTTP session (aiohttp reports an
    unclosed one through the loop's exception handler when it is collected)."""
    reached = asyncio.Event()
    loop = asyncio.get_running_loop()
    reported: list[str] = []
    loop.set_exception_handler(lambda _, context: reported.append(context.get("message", "")))
    socket = Path("/tmp") / f"spark-slow-{tmp_path.name[-20:]}.sock"
    async with docker_standin(socket, hanging(reached), hang_version=True):
        node = hung_cluster(socket).nodes[0]
        connecting = asyncio.create_task(LocalNode.connect(node, timeout=30, call_timeout=30))
        await reached.wait()
        connecting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await connecting
    del connecting
    gc.collect()
    assert not [m for m in reported if "Unclosed" in m], reported


# --- the words of a refused or silent SSH login ---------------------------------------------------

AGENT_NODE = load_config(LAB_CONFIG).cluster.nodes[0]
NO_KEY = AGENT_NODE.model_copy(
    update={"ssh": AGENT_NODE.ssh.model_copy(update={"key": None})}  # type: ignore[union-attr]
)


async def refused(config, error: Exception, connect_timeout: float = 10.0) -> NodeUnreachable:
    with pytest.raises(NodeUnreachable) as caught:
        async with ssh_login_errors(config, "root@198.18.0.10:22", connect_timeout):
            raise error
    return caught.value


@pytest.fixture
def empty_agent(tmp_path):
    """A real ssh-agent holding no key, on a socket of the test's own (it forks once it
    listens, and says its pid)."""
    socket = tmp_path / "agent.sock"
    said = subprocess.run(
        ["ssh-agent", "-s", "-a", str(socket)], capture_output=True, text=True, check=True
    ).stdout
    pid = int(re.search(r"SSH_AGENT_PID=(\d+)", said).group(1))  # type: ignore[union-attr]
    try:
        yield str(socket)
    finally:
        os.kill(pid, signal.SIGTERM)


async def test_a_refused_login_says_whether_there_was_no_agent_or_an_agent_with_no_key(
    monkeypatch, empty_agent
):
    denied = asyncssh.PermissionDenied("Permission denied")
    monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)
    no_agent = await refused(NO_KEY, denied)
    assert "no ssh.key is set and there is no SSH agent (SSH_AUTH_SOCK is not set)" in str(
        no_agent
    ), no_agent
    monkeypatch.setenv("SSH_AUTH_SOCK", empty_agent)
    keyless = await refused(NO_KEY, denied)
    assert f"the SSH agent at {empty_agent} holds none" in str(keyless), keyless
    assert "ssh-add" in keyless.fix
    with_key = await refused(AGENT_NODE, denied)
    assert f"refused with {AGENT_NODE.ssh.key}" in str(with_key)  # type: ignore[union-attr]


async def test_a_connect_timeout_names_the_setting_and_how_long_it_waited():
    silent = await refused(AGENT_NODE, TimeoutError(), connect_timeout=10)
    assert "did not answer within 10 s (timeouts.connect)" in silent.problem, silent
    assert "raise timeouts.connect" in silent.fix


def test_an_http_error_without_words_says_what_it_means():
    assert error_text(httpx.ReadError("")) == (
        "ReadError (no reason given: the server closed the connection)"
    )
    assert error_text(httpx.ConnectError("refused")) == "ConnectError: refused"
