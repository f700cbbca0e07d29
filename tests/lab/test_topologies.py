"""A 3-node lab, and isolated workers reached through the head as an SSH jump host."""

from __future__ import annotations

import asyncio

import pytest

from lab import api
from lab import topology as T

from .helpers import connect, ssh_to

pytestmark = pytest.mark.lab


async def test_three_nodes(relab):
    info = relab(nodes=3)
    assert [n.name for n in info.nodes] == ["spark-lab-0", "spark-lab-1", "spark-lab-2"]
    assert info.nodes[2].mgmt_ip == "198.18.0.12" and info.nodes[2].fabric_ip == "198.18.1.12"
    assert api.status()["ok"]
    for node in info.nodes:
        async with ssh_to(info, node) as conn:
            r = await conn.run("docker image inspect -f '{{.Id}}' " + info.image_tag, check=True)
            assert r.stdout.strip() == info.image_id
    async with ssh_to(info, info.nodes[2]) as conn:
        for other in info.nodes[:2]:
            r = await conn.run(
                f"timeout 5 bash -c 'exec 3<>/dev/tcp/{other.fabric_ip}/22 && head -c 7 <&3'"
            )
            assert r.stdout == "SSH-2.0", r.stderr
    # back to 2: node 2 disappears completely
    info2 = relab(nodes=2)
    assert len(info2.nodes) == 2
    assert "sblab2" not in api.netns.list_netns()


async def test_isolated_workers_via_jump_host(relab):
    info = relab(nodes=2, isolated_workers=True)
    head, worker = info.nodes
    assert head.mgmt_ip and worker.mgmt_ip is None and worker.ssh_host == worker.fabric_ip
    assert api.status()["ok"]
    # the worker has no management interface and the host cannot reach it directly
    with pytest.raises((OSError, asyncio.TimeoutError)):
        await asyncio.wait_for(asyncio.open_connection("198.18.0.11", 22), 2)
    async with (
        await connect(info, head) as hconn,
        await connect(info, worker, tunnel=hconn, host=worker.fabric_ip) as wconn,
    ):
        r = await wconn.run("ip -o -4 addr show", check=True)
        assert T.FABRIC_IFNAME in r.stdout and T.MGMT_IFNAME not in r.stdout
        assert worker.fabric_ip in r.stdout
        r = await wconn.run("echo $DOCKER_HOST; docker info -f '{{.ServerVersion}}'", check=True)
        assert r.stdout.splitlines()[0] == worker.docker_host
    # and back: the worker gets its management interface again
    info2 = relab(nodes=2)
    async with await connect(info2, info2.nodes[1]) as conn:
        r = await conn.run("ip -o -4 addr show", check=True)
        assert T.MGMT_IFNAME in r.stdout
