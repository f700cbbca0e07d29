"""A worker's Docker engine stopped and started again, or its SSH sessions dropped, while the
cluster serves: monitoring lost, not serving lost, and the node followed again (issue 10's
matrix, node faults)."""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from cluster.events import Failed, Progress, Ready, StatusReport
from lab import api as lab_api
from tests.controller.helpers import collect, controller_for
from tests.controller.test_faults import lab_docker_kill

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


async def test_a_worker_engine_restarted_while_serving_is_monitoring_lost_then_resumed(clean):
    controller = controller_for(clean)
    worker = clean.nodes[1].name
    assert isinstance((await collect(controller.up()))[-1], Ready)
    try:
        async with watched(controller, health_interval=60) as (next_event, task):
            assert (await next_event(30)).phase == "watch"
            # The lab's stop_dockerd takes the containers with the engine, as a crash does; with
            # live-restore they keep running and only the engine's API goes away.
            await asyncio.to_thread(lab_api.stop_dockerd, 1, keep_containers=True)
            lost = await next_event(30)
            assert isinstance(lost, Progress) and lost.phase == "monitoring_lost", lost
            assert (
                lost.node == worker
                and worker in lost.message
                and "the API still serves" in lost.message
            )
            [status] = await collect(controller.status())
            assert isinstance(status, StatusReport) and status.api_healthy is True, status
            assert worker in status.api_detail, "the worker's engine does not answer"

            await asyncio.to_thread(lab_api.start_dockerd, 1, keep_containers=True)
            resumed = await next_event(60)
            assert isinstance(resumed, Progress) and resumed.phase == "monitoring_resumed", resumed
            assert resumed.node == worker

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
    controller = controller_for(clean)
    worker = clean.nodes[1].name
    assert isinstance((await collect(controller.up()))[-1], Ready)
    async with watched(controller, health_interval=60) as (next_event, task):
        assert (await next_event(30)).phase == "watch"
        assert await asyncio.to_thread(lab_api.drop_ssh_sessions, 1) > 0
        lost = await next_event(30)
        assert isinstance(lost, Progress) and lost.phase == "monitoring_lost", lost
        assert lost.node == worker and "the API still serves" in lost.message, lost
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
