"""The node never receives the bot's SSH agent, whatever an OpenSSH config says (lab: real sshd)."""

from __future__ import annotations

import asyncio
import os
import subprocess

import asyncssh
import pytest

from cluster.nodes.ssh import SSHNode
from testkit.lab_cluster import cluster_for

pytestmark = [pytest.mark.lab, pytest.mark.timeout(120)]
FORWARD_EVERYTHING = "Host *\n  ForwardAgent yes\n"


@pytest.fixture
def agent(tmp_path, monkeypatch):
    """A running ssh-agent, and a home whose ~/.ssh/config forwards it to every host."""
    socket = tmp_path / "agent.sock"
    process = subprocess.Popen(["ssh-agent", "-D", "-a", str(socket)], stdout=subprocess.DEVNULL)
    try:
        subprocess.run(
            ["sh", "-c", f"until [ -S {socket} ]; do sleep 0.05; done"], timeout=10, check=True
        )
        (tmp_path / ".ssh").mkdir()
        (tmp_path / ".ssh" / "config").write_text(FORWARD_EVERYTHING)
        monkeypatch.setenv("HOME", str(tmp_path))
        monkeypatch.setenv("SSH_AUTH_SOCK", str(socket))
        yield socket
    finally:
        process.terminate()
        process.wait()


async def forwarded_agent(conn_run) -> str:
    result = await conn_run(["sh", "-c", "printenv SSH_AUTH_SOCK || true"])
    return result.strip()


@pytest.mark.parametrize("named_config", [False, True], ids=["home-config", "named-config"])
async def test_agent_forwarding_stays_off(lab, agent, tmp_path, named_config):
    node = cluster_for(lab).nodes[0]
    if named_config:
        named = tmp_path / "ssh_config"
        named.write_text(FORWARD_EVERYTHING)
        node = node.model_copy(update={"ssh": node.ssh.model_copy(update={"config_file": named})})

    # The control: asked to, this sshd does hand the session an agent, so its absence below
    # is our doing.
    info = lab.head
    async with asyncssh.connect(
        info.ssh_host,
        port=lab.ssh_port,
        username=lab.ssh_user,
        client_keys=[lab.key_path],
        known_hosts=lab.known_hosts_path,
        agent_forwarding=True,
        config=None,
    ) as control:
        shown = (await control.run("printenv SSH_AUTH_SOCK || true")).stdout.strip()
        assert shown, "sshd should offer agent forwarding when asked"

    connection = await asyncio.wait_for(SSHNode.connect(node, timeout=10, call_timeout=10), 20)
    try:

        async def run(argv):
            return (await connection.run(argv, timeout=10)).stdout

        assert await forwarded_agent(run) == ""
    finally:
        await connection.aclose()
    assert os.environ["SSH_AUTH_SOCK"] == str(agent)
