"""Hooks for the controller's infrastructure-fault tests: image variant, sshd, dockerd."""

from __future__ import annotations

import asyncssh
import pytest

from lab import api, dockerd, image
from lab import topology as T

from .helpers import connect

pytestmark = pytest.mark.lab


def test_image_variant_and_restore(lab):
    try:
        new_id = api.set_image_variant(1)
        assert new_id != lab.image_id
        assert image.image_id(T.Node(1)) == new_id
        assert image.image_id(T.Node(0)) == lab.image_id
        assert api.status()["ok"]  # a requested variant is not a fault of the lab
    finally:
        api.restore_image()
    assert image.image_id(T.Node(1)) == lab.image_id


async def test_stop_and_start_sshd(lab):
    api.stop_sshd(1)
    try:
        with pytest.raises((OSError, asyncssh.Error)):
            await connect(lab, lab.nodes[1])
        assert not api.status()["ok"]
    finally:
        api.start_sshd(1)
    async with await connect(lab, lab.nodes[1]) as conn:
        assert (await conn.run("true")).exit_status == 0


def test_stop_and_start_dockerd(lab):
    api.stop_dockerd(1)
    try:
        assert not dockerd.ping(T.Node(1))
        assert not api.status()["ok"]
    finally:
        api.start_dockerd(1)
    assert dockerd.ping(T.Node(1))
    assert image.image_id(T.Node(1)) == lab.image_id


def test_stop_and_start_dockerd_keeping_the_containers(lab):
    """With live-restore the engine's API goes away and its containers keep running; started
    again, the engine restores them and runs without live-restore as before."""
    node = T.Node(1)
    cid = (
        dockerd.cli(node, "run", "-d", "--network", "host", lab.image_tag, "sleep", "infinity")
        .stdout.decode()
        .strip()
    )
    try:
        pids = dockerd.cgroup_pids(node)
        assert pids
        api.stop_dockerd(1, keep_containers=True)
        try:
            assert not dockerd.ping(node)
            assert dockerd.cgroup_pids(node) == pids, "the container survives its engine"
        finally:
            api.start_dockerd(1, keep_containers=True)
        state = (
            dockerd.cli(node, "inspect", "-f", "{{.State.Running}}", cid).stdout.decode().strip()
        )
        assert state == "true"
        assert (
            dockerd.cli(node, "info", "-f", "{{.LiveRestoreEnabled}}").stdout.decode().strip()
            == "false"
        )
    finally:
        dockerd.cli(node, "rm", "-f", cid, check=False)


def test_up_after_a_crash_cleans_stale_state(lab):
    """kill -9 a node's engine and sshd with a container running: `up` recovers, and the
    stale container and its processes are gone."""
    import os
    import signal

    from lab import proc, sshd

    node = T.Node(1)
    cid = (
        dockerd.cli(node, "run", "-d", "--network", "host", lab.image_tag, "sleep", "infinity")
        .stdout.decode()
        .strip()
    )
    assert dockerd.cgroup_pids(node)
    for pidfile in (node.docker_pidfile, node.sshd_pidfile):
        os.kill(proc.read_pidfile(pidfile), signal.SIGKILL)
    info = api.lab_up(nodes=2)
    assert api.status()["ok"]
    assert sshd.alive(node) and dockerd.ping(node)
    assert dockerd.cli(node, "ps", "-aq").stdout.decode().split() == []
    assert cid
    assert dockerd.cgroup_pids(node) == []
    assert image.image_id(node) == info.image_id
