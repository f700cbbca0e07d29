"""The head's launch lease (cluster/operations/launch_lease.py) on the `local` driver: a real shell runs
its scripts in a home folder of the test's own; a stand-in Docker engine (none is asked for)."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import time
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from cluster.nodes.local import LocalNode
from cluster.operations.launch_lease import RENEW, STALE_S, LaunchLease, LeaseHeld
from testkit.docker_standin import docker_standin, failing
from testkit.local_cluster import local_cluster

pytestmark = pytest.mark.timeout(30)


@asynccontextmanager
async def head(tmp_path: Path):
    async with docker_standin(tmp_path / "docker.sock", failing) as socket:
        config = local_cluster("lab", [socket]).head
        config = config.model_copy(update={"local_env": {"HOME": str(tmp_path)}})
        node = await LocalNode.connect(config, timeout=5, call_timeout=5)
        try:
            yield node
        finally:
            await node.aclose()


def lease_file(tmp_path: Path) -> Path:
    return tmp_path / ".cache" / "spark-bot" / "lab" / "launch.lease"


async def test_a_live_launch_refuses_another_until_it_gives_the_lease_back(tmp_path):
    async with head(tmp_path) as node:
        console = LaunchLease(node, "lab", "`spark-bot console`", timeout=5)
        await console.take()
        shell = LaunchLease(node, "lab", "`spark-bot` from a shell", timeout=5)
        with pytest.raises(LeaseHeld) as held:
            await shell.take()
        assert held.value.holder.who.startswith("`spark-bot console` on ")
        assert held.value.holder.age_s < STALE_S
        await console.release()
        assert not lease_file(tmp_path).exists()
        await shell.take()
        await shell.release()


async def test_take_over_takes_a_live_launchs_lease(tmp_path):
    async with head(tmp_path) as node:
        first = LaunchLease(node, "lab", "the Slack bot", timeout=5)
        await first.take()
        second = LaunchLease(node, "lab", "`spark-bot` from a shell", timeout=5)
        await second.take(take_over=True)
        assert json.loads(lease_file(tmp_path).read_text())["who"].startswith("`spark-bot` from")
        await first.release()  # no longer its: left alone
        assert lease_file(tmp_path).exists()
        await second.release()
        assert not lease_file(tmp_path).exists()


async def test_a_lease_nobody_renewed_for_its_span_belongs_to_nobody(tmp_path):
    async with head(tmp_path) as node:
        crashed = LaunchLease(node, "lab", "a bot on another host", timeout=5)
        await crashed.take()
        crashed._renewing.cancel()  # it crashed: nothing renews it
        old = time.time() - STALE_S - 5
        os.utime(lease_file(tmp_path), (old, old))
        taker = LaunchLease(node, "lab", "`spark-bot` from a shell", timeout=5)
        await taker.take()
        await taker.release()


async def test_the_lease_of_a_process_gone_from_this_host_is_taken_at_once(tmp_path):
    async with head(tmp_path) as node:
        ended = subprocess.run(["sh", "-c", "echo $$"], capture_output=True, text=True)
        gone = json.dumps(
            {
                "who": "`spark-bot console` killed with -9",
                "since": "2026-12-04 09:00:00 UTC",
                "host": os.uname().nodename,
                "pid": int(ended.stdout),
                "nonce": "0",
            }
        )
        lease_file(tmp_path).parent.mkdir(parents=True)
        lease_file(tmp_path).write_text(gone + "\n")  # fresh: not stale by its age
        taker = LaunchLease(node, "lab", "`spark-bot` from a shell", timeout=5)
        await taker.take()
        assert "killed" not in lease_file(tmp_path).read_text()
        await taker.release()


async def test_of_launches_that_start_at_once_one_holds_the_lease(tmp_path):
    async with head(tmp_path) as node:
        takers = [LaunchLease(node, "lab", f"launch {n}", timeout=10) for n in range(8)]
        outcomes = await asyncio.gather(*(t.take() for t in takers), return_exceptions=True)
        holders = [t for t, outcome in zip(takers, outcomes, strict=True) if outcome is None]
        assert len(holders) == 1, outcomes
        assert all(isinstance(o, LeaseHeld) for o in outcomes if o is not None)
        await holders[0].release()


async def test_a_restarted_process_with_the_same_pid_finds_its_old_lease_gone(tmp_path):
    # a container restarted by Docker keeps its host name and often its pid: the lease of the
    # process that ran before is no live launch
    async with head(tmp_path) as node:
        before = json.dumps(
            {
                "who": "the Slack bot before its restart",
                "since": "2026-12-04 09:00:00 UTC",
                "host": os.uname().nodename,
                "pid": os.getpid(),
                "process": "an earlier process",
                "nonce": "0",
            }
        )
        lease_file(tmp_path).parent.mkdir(parents=True)
        lease_file(tmp_path).write_text(before + "\n")
        taker = LaunchLease(node, "lab", "the Slack bot", timeout=5)
        await taker.take()
        assert "before its restart" not in lease_file(tmp_path).read_text()
        await taker.release()


async def test_a_lease_given_back_by_a_take_over_that_launched_nothing_is_written_again(tmp_path):
    async with head(tmp_path) as node:
        live = LaunchLease(node, "lab", "`spark-bot console`", timeout=5)
        await live.take()
        taker = LaunchLease(node, "lab", "`spark-bot` from a shell", timeout=5)
        await taker.take(take_over=True)
        await taker.release()  # it launched nothing: the lease is gone
        assert not lease_file(tmp_path).exists()
        result = await node.run(
            ["sh", "-c", RENEW, "sh", str(lease_file(tmp_path)), live.line], timeout=5
        )
        assert result.ok and "`spark-bot console`" in lease_file(tmp_path).read_text()
        await live.release()


async def test_a_launch_knows_when_another_took_its_lease_over(tmp_path):
    async with head(tmp_path) as node:
        first = LaunchLease(node, "lab", "the Slack bot", timeout=5)
        await first.take()
        assert await first.still_ours()
        second = LaunchLease(node, "lab", "`spark-bot` from a shell", timeout=5)
        await second.take(take_over=True)
        assert not await first.still_ours() and await second.still_ours()
        await first.release()
        await second.release()
