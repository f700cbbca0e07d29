"""A command run with `hang_up` ends when its call times out or is cancelled, over real SSH
(lab: real sshd): asyncssh's own run() leaves the channel open, and the command with it."""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest

from cluster.errors import NodeTimedOut
from cluster.nodes.ssh import SSHNode
from testkit.lab_cluster import cluster_for

pytestmark = [pytest.mark.lab, pytest.mark.timeout(120)]


@pytest.fixture
async def node(lab):
    connection = await asyncio.wait_for(
        SSHNode.connect(cluster_for(lab).nodes[0], timeout=10, call_timeout=10), 20
    )
    try:
        yield connection
    finally:
        await connection.aclose()


def a_sleep() -> list[str]:
    """A command no other process on the machine runs: `sleep` for a unique number of seconds."""
    return ["sleep", f"{300 + uuid.uuid4().int % 10_000}.5"]


async def running(node: SSHNode, argv: list[str]) -> bool:
    found = await node.run(["pgrep", "-fx", " ".join(argv)], timeout=10)
    return found.exit_status == 0


async def until(node: SSHNode, argv: list[str], *, present: bool, within: float = 20.0) -> None:
    """Wait for the command to be (or no longer be) among the node's processes."""
    deadline = time.monotonic() + within
    while await running(node, argv) != present:
        assert time.monotonic() < deadline, f"{argv} still {'absent' if present else 'running'}"
        await asyncio.sleep(0.1)  # the next look at the node's process table


async def test_a_command_that_times_out_is_hung_up(node):
    argv = a_sleep()
    with pytest.raises(NodeTimedOut):
        await node.run(argv, timeout=1.0, hang_up=True)
    await until(node, argv, present=False)


async def test_a_cancelled_command_is_hung_up(node):
    argv = a_sleep()
    call = asyncio.create_task(node.run(argv, timeout=60, hang_up=True))
    try:
        await until(node, argv, present=True)
    finally:
        call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await call
    await until(node, argv, present=False)


async def test_a_command_that_ends_gives_its_whole_output_and_status(node):
    result = await node.run(
        ["sh", "-c", "seq 1 20000; echo oops >&2; exit 3"], timeout=20, hang_up=False
    )
    assert result.exit_status == 3
    assert result.stdout.splitlines()[-1] == "20000" and len(result.stdout.splitlines()) == 20000
    assert result.stderr == "oops\n"
