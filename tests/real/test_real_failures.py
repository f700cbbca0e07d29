"""Real failures of the real engine, each diagnosed from the engine's own lines: the right
failure signature (cause and fix), on the right node, at the right checkpoint."""

from __future__ import annotations

import asyncio
import subprocess
from contextlib import contextmanager

import pytest

from cluster.events import CheckpointPassed, Failed
from testkit.lab_cluster import collect
from testkit.real_cluster import RAY, real_controller

pytestmark = [pytest.mark.lab, pytest.mark.real_engine, pytest.mark.timeout(300)]

# A failing launch should not wait out the lab's generous limits.
QUICK = {
    "weights": 120,
    "engine": 60,
    "api": 60,
    "stall": 40,
    "ray": 60,
    "containers": 60,
    "down": 6,
}


def the_failure(events) -> Failed:
    failures = [e for e in events if isinstance(e, Failed)]
    assert len(failures) == 1 and events[-1] is failures[0], events[-1]
    return failures[0]


@contextmanager
def squatter(real_lab, port: int):
    """A socket bound to `port` on the head and never listening: invisible to `ss -ltn` (the
    preflight passes), but nothing else may bind the port."""
    head = real_lab.nodes[0]
    code = (
        f"import socket, sys; s = socket.socket(); s.bind(('0.0.0.0', {port})); "
        "print('bound', flush=True); sys.stdin.read()"
    )
    proc = subprocess.Popen(
        ["ip", "netns", "exec", head.netns, "python3", "-c", code],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout.readline().strip() == "bound"
        yield
    finally:
        proc.kill()
        proc.communicate()  # waits, and closes our ends of its pipes


async def test_an_unknown_vllm_flag(real_clean):
    failure = the_failure(
        await collect(
            real_controller(
                serve={"extra_args": ["--load-format=dummy", "--enforce-eager", "--no-such-flag"]},
                timeouts=QUICK,
            ).up()
        )
    )
    assert failure.signature == "vllm_unrecognized_arguments"
    assert "--no-such-flag" in failure.evidence and "--no-such-flag" in failure.cause


async def test_the_api_port_already_taken_on_the_head(real_clean):
    with squatter(real_clean, 8000):
        failure = the_failure(await collect(real_controller(timeouts=QUICK).up()))
    assert failure.signature == "port_in_use" and failure.node == "spark-lab-0"
    assert "Address already in use" in failure.evidence


async def test_the_master_port_already_taken_on_the_head(real_clean):
    with squatter(real_clean, 29501):
        failure = the_failure(await collect(real_controller(timeouts=QUICK).up()))
    assert failure.signature == "port_in_use" and failure.node == "spark-lab-0"
    assert "29501" in failure.evidence or "29501" in "\n".join(failure.context)


async def test_a_gloo_interface_that_does_not_exist(real_clean):
    failure = the_failure(
        await collect(real_controller(env={"GLOO_SOCKET_IFNAME": "eth9"}, timeouts=QUICK).up())
    )
    # both ranks are given the missing interface: whichever node fails first is named
    assert failure.signature == "gloo_interface_missing" and failure.node in {
        "spark-lab-0",
        "spark-lab-1",
    }
    assert "eth9" in failure.evidence and "GLOO_SOCKET_IFNAME" in failure.fix


async def test_a_worker_rank_that_never_starts(real_clean):
    controller = real_controller(timeouts={**QUICK, "stall": 20})
    events = []
    async for event in controller.up():
        events.append(event)
        if isinstance(event, CheckpointPassed) and event.checkpoint == "containers":
            await docker(real_clean, 1, "pause", controller.config.container.name)
    failure = the_failure(events)
    assert failure.signature == "ranks_not_joined" and failure.node == "spark-lab-0"
    assert "198.18.1.10:29501" in failure.cause and "world_size=2 rank=0" in failure.evidence


async def test_a_worker_container_killed_while_the_engine_initialises(real_clean):
    controller = real_controller(timeouts=QUICK)
    events = []
    async for event in controller.up():
        events.append(event)
        if isinstance(event, CheckpointPassed) and event.checkpoint == "containers":
            await asyncio.sleep(15)  # the fault's timing: the engine is mid-initialisation
            await docker(real_clean, 1, "kill", controller.config.container.name)
    failure = the_failure(events)
    assert failure.node == "spark-lab-1" and "exited with code 137" in failure.summary


async def test_a_ray_worker_that_cannot_reach_its_head(real_clean):
    worker = real_clean.nodes[1]
    rule = ["-p", "tcp", "--dport", "6379", "-j", "REJECT"]
    subprocess.run(
        ["ip", "netns", "exec", worker.netns, "iptables", "-I", "OUTPUT", *rule], check=True
    )
    try:
        failure = the_failure(await collect(real_controller(RAY, timeouts=QUICK).up()))
    finally:
        subprocess.run(
            ["ip", "netns", "exec", worker.netns, "iptables", "-D", "OUTPUT", *rule], check=True
        )
    assert failure.signature == "ray_gcs_connect_failed" and failure.node == "spark-lab-1"
    assert "198.18.1.10:6379" in failure.evidence


async def docker(lab, index: int, *args: str) -> None:
    proc = await asyncio.create_subprocess_exec(
        "docker", "-H", lab.nodes[index].docker_host, *args, stdout=asyncio.subprocess.DEVNULL
    )
    assert await proc.wait() == 0
