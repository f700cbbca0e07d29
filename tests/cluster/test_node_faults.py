"""Node faults while the cluster serves (issue 10's matrix, issue 12): a worker's Docker engine
killed and started again, or its SSH sessions dropped, is monitoring lost, not serving lost, and
the node is followed again; a serving hang behind a healthy /health is caught by the canary; a
worker's fabric link set down is reported with that cause."""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from cluster.config import WatchConfig
from cluster.events import CheckpointPassed, Failed, Progress, Ready, StatusReport
from lab import api as lab_api
from testkit.lab_cluster import collect, controller_for
from tests.cluster.test_faults import lab_docker_kill

pytestmark = pytest.mark.lab


@contextlib.asynccontextmanager
async def watched(controller, health_interval: float):
    """`watch` running in a task; yields a function that waits for its next event."""
    events: asyncio.Queue = asyncio.Queue()

    async def watching():
        async for event in controller.watch(health_interval=health_interval):
            await events.put(event)

    async def next_event(timeout: float):
        return await asyncio.wait_for(events.get(), timeout)

    task = asyncio.create_task(watching())
    try:
        yield next_event, task
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def next_failure(next_event, timeout: float) -> Failed:
    """The next Failed, past the Progress a watch may say meanwhile (a memory warning)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        event = await next_event(max(0.1, deadline - loop.time()))
        if isinstance(event, Failed):
            return event
        assert isinstance(event, Progress) and event.phase == "memory_low", event


async def test_a_worker_engine_killed_while_serving_is_monitoring_lost_then_resumed(clean):
    # no memory warning among the events this test reads one by one (the lab's nodes share the
    # host's memory, whatever else runs on it)
    controller = controller_for(clean, watch=WatchConfig(memory_low_gib=0))
    worker = clean.nodes[1].name
    assert isinstance((await collect(controller.up()))[-1], Ready)
    try:
        async with watched(controller, health_interval=60) as (next_event, task):
            assert (await next_event(30)).phase == "watch"
            # kill -9 of an engine with live-restore: its containers keep running, only the
            # engine's API goes away (the lab's plain stop would take the containers too).
            await asyncio.to_thread(lab_api.kill_dockerd, 1)
            lost = await next_event(30)
            assert isinstance(lost, Progress) and lost.phase == "monitoring_lost", lost
            assert (
                lost.node == worker
                and worker in lost.message
                and "the API still serves" in lost.message
            )
            assert "its Docker engine does not answer, SSH to it does" in lost.message, lost
            [status] = await collect(controller.status())
            assert isinstance(status, StatusReport) and status.api_healthy is True, status
            assert worker in status.api_detail, "the worker's engine does not answer"

            await asyncio.to_thread(lab_api.start_dockerd, 1, keep_containers=True)
            resumed = await next_event(60)
            assert isinstance(resumed, Progress) and resumed.phase == "monitoring_resumed", resumed
            assert resumed.node == worker
            [status] = await collect(controller.status())
            assert [m.node for m in status.memory] == [clean.nodes[0].name, worker], status
            assert all(0 < m.available_gib <= m.total_gib for m in status.memory), status.memory

            # Following really resumed: the worker's death is reported as such.
            await lab_docker_kill(clean, 1, controller.config.container.name)
            failure = await next_event(30)
            assert isinstance(failure, Failed), failure
            assert failure.node == worker and "exited" in failure.summary, failure
            await asyncio.wait_for(task, 10)
    finally:
        await asyncio.to_thread(lab_api.start_dockerd, 1, keep_containers=True)


async def test_a_workers_ssh_sessions_dropped_while_serving_are_reopened_and_followed(clean):
    """The connection to the worker closes under the bot (its sshd's sessions killed, as a
    network drop or an sshd restart ends them): monitoring lost with the API still serving,
    a new connection with backoff, and the worker followed again."""
    controller = controller_for(clean, watch=WatchConfig(memory_low_gib=0))
    worker = clean.nodes[1].name
    assert isinstance((await collect(controller.up()))[-1], Ready)
    async with watched(controller, health_interval=60) as (next_event, task):
        assert (await next_event(30)).phase == "watch"
        assert await asyncio.to_thread(lab_api.drop_ssh_sessions, 1) > 0
        lost = await next_event(30)
        assert isinstance(lost, Progress) and lost.phase == "monitoring_lost", lost
        assert lost.node == worker and "the API still serves" in lost.message, lost
        assert "the connection to it (SSH) is lost" in lost.message, "which part of it went"
        resumed = await next_event(60)
        assert isinstance(resumed, Progress) and resumed.phase == "monitoring_resumed", resumed
        assert resumed.node == worker

        await lab_docker_kill(clean, 1, controller.config.container.name)
        failure = await next_event(30)
        assert isinstance(failure, Failed), failure
        assert failure.node == worker and "exited" in failure.summary, failure
        await asyncio.wait_for(task, 10)


async def test_the_engine_killed_inside_a_running_container_is_the_api_down_failure(clean):
    """With Ray, `vllm serve` runs by `docker exec` in the head's container: killed there, no
    container dies and no log line says so; the health probe is the witness, and the failure
    names the head, the API and the log tail."""
    controller = controller_for(clean)
    assert controller.config.serve.backend == "ray"
    head = clean.nodes[0]
    assert isinstance((await collect(controller.up()))[-1], Ready)
    async with watched(controller, health_interval=1) as (next_event, task):
        assert (await next_event(30)).phase == "watch"
        kill = await asyncio.create_subprocess_exec(
            *("docker", "-H", head.docker_host, "exec", controller.config.container.name),
            *("pkill", "-KILL", "-f", "emulator vllm serve"),
        )
        assert await kill.wait() == 0
        failure = await next_event(30)
        assert isinstance(failure, Failed), failure
        assert failure.node == head.name, failure
        assert "API" in failure.summary, failure
        await asyncio.wait_for(task, 10)
    [status] = await collect(controller.status())
    assert all(c.running for c in status.containers), "the containers themselves still run"
    assert status.api_healthy is False


async def test_the_heads_engine_stopped_with_its_containers_is_told_then_down_cleans_up(clean):
    """Stopping a Docker engine stops its containers with SIGTERM (Docker's kill event): the watch
    says the server was stopped, naming the head and the engine among the ways it happens, and
    ends; after the engine is back, `down` removes what is left."""
    controller = controller_for(clean)
    name = controller.config.container.name
    head = clean.nodes[0].name
    assert isinstance((await collect(controller.up()))[-1], Ready)
    try:
        async with watched(controller, health_interval=1) as (next_event, task):
            assert (await next_event(30)).phase == "watch"
            await asyncio.to_thread(lab_api.stop_dockerd, 0)
            stopped = await next_event(30)
            assert isinstance(stopped, Progress) and stopped.phase == "stopped", stopped
            assert stopped.node == head and "Docker engine stopping" in stopped.message
            await asyncio.wait_for(task, 10)
    finally:
        await asyncio.to_thread(lab_api.start_dockerd, 0)
    [status] = await collect(controller.status())
    assert not status.containers[0].running, (
        "the head's server is stopped (the worker's rank follows it)"
    )
    removed = await collect(controller.down())
    assert [r.node for r in removed if r.removed] == [
        c.node for c in status.containers if c.present
    ]
    [status] = await collect(controller.status())
    assert not any(c.present for c in status.containers), f"no orphan {name} after down"


QUICK_WATCH = WatchConfig(
    canary_interval=2, canary_timeout=2, metrics_interval=0.5, token_stall=60, memory_interval=1
)
HANG_AFTER_S = 5.0  # after the API starts: up's own sample completion is done by then


async def test_a_serving_hang_is_reported_within_the_canary_interval_plus_its_timeout(clean):
    """The engine stops generating while /health says 200: the canary finds it."""
    env = {"SPARK_EMU_FAULT": "serving_hang", "SPARK_EMU_FAULT_AFTER_S": str(HANG_AFTER_S)}
    controller = controller_for(clean, env=env, watch=QUICK_WATCH)
    assert isinstance((await collect(controller.up()))[-1], Ready)
    async with watched(controller, health_interval=1) as (next_event, _):
        assert (await next_event(30)).phase == "watch"
        started = asyncio.get_running_loop().time()
        failed = await next_failure(next_event, 60)
        took = asyncio.get_running_loop().time() - started
    # The hang struck at most HANG_AFTER_S after the watch began (the API started before it).
    bound = HANG_AFTER_S + QUICK_WATCH.canary_interval + QUICK_WATCH.canary_timeout
    assert took <= bound + 2.0, f"reported {took:.1f} s into the watch (bound {bound:g} s + 2)"
    assert failed.signature == "serving_hung", failed
    assert failed.summary.startswith("serving hung: a canary completion"), failed.summary
    assert "canary sent" in failed.evidence and "vllm:num_requests_running=" in failed.evidence
    assert "probed after the failure" in failed.evidence
    heads_lines = "\n".join(failed.log_tail)
    assert "No available shared memory broadcast block found" in heads_lines, heads_lines
    [status] = await collect(controller.status())
    assert status.api_healthy is True, "a hang that /health does not see"


async def test_a_workers_fabric_link_down_while_serving_is_reported_with_that_cause(clean):
    controller = controller_for(
        clean, watch=QUICK_WATCH.model_copy(update={"canary_interval": 600})
    )
    worker = clean.nodes[1].name
    assert isinstance((await collect(controller.up()))[-1], Ready)
    try:
        async with watched(controller, health_interval=1) as (next_event, _):
            assert (await next_event(30)).phase == "watch"
            await asyncio.to_thread(lab_api.set_fabric_link, 1, False)
            failed = await next_failure(next_event, 30)
    finally:
        await asyncio.to_thread(lab_api.set_fabric_link, 1, True)
    assert failed.signature == "fabric_link_down", failed
    assert f"the fabric link enp1s0f1np1 on {worker} is down" in failed.summary, failed.summary
    assert "sudo ip link set enp1s0f1np1 up" in failed.fix
    assert "signature" not in failed.fix, "no advice to edit the bot's source"
    assert f"enp1s0f1np1 on {clean.nodes[0].name} is up" in failed.evidence


async def test_a_workers_fabric_link_dropped_mid_launch_is_reported_then_a_relaunch_succeeds(clean):
    """The cable pulled after Ray has every node, while the weights load: the worker's raylet
    loses the head and the launch fails on a line that says only that something died; the nodes
    are probed before it is reported, so the failure names the link. With the link restored,
    `down` leaves no container and the next `up` reaches Ready."""
    controller = controller_for(clean)
    assert controller.config.serve.backend == "ray"
    name = controller.config.container.name
    worker = clean.nodes[1].name
    events: list = []
    try:
        async with contextlib.aclosing(controller.up()) as launch:
            async for event in launch:
                events.append(event)
                if isinstance(event, CheckpointPassed) and event.checkpoint == "ray_cluster":
                    await asyncio.to_thread(lab_api.set_fabric_link, 1, False)
    finally:
        await asyncio.to_thread(lab_api.set_fabric_link, 1, True)
    failed = events[-1]
    assert isinstance(failed, Failed), failed
    assert any(isinstance(e, CheckpointPassed) and e.checkpoint == "ray_cluster" for e in events), (
        "the link went down after Ray had every node"
    )
    assert not any(isinstance(e, Ready) for e in events)
    assert failed.signature == "fabric_link_down", (
        failed.signature,
        failed.summary,
        failed.evidence,
        failed.cause,
    )
    assert f"the fabric link enp1s0f1np1 on {worker} is down" in failed.summary, failed.summary
    assert "probed after the failure" in failed.evidence, failed.evidence
    assert "sudo ip link set enp1s0f1np1 up" in failed.fix

    removed = await collect(controller.down())
    assert any(r.removed for r in removed), "the failed launch's containers are down's to remove"
    [status] = await collect(controller.status())
    assert not any(c.present for c in status.containers), f"no orphan {name} after down"
    assert isinstance((await collect(controller.up()))[-1], Ready), (
        "relaunched on the restored link"
    )
