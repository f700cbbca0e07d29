"""`watch` reads one stream: the health probe's verdict arrives among log lines and deaths."""

from __future__ import annotations

import asyncio

import pytest

from bot.config import load_config
from cluster.config import Secrets
from cluster.errors import DockerUnavailable
from cluster.events import Failed, Progress
from cluster.logs.container_stream import (
    ClusterMonitor,
    FollowLost,
    FollowResumed,
    HealthLost,
    LogLine,
)
from cluster.progress.checkpoint_follower import LogFollower
from cluster.progress.checkpoints import SERVING
from cluster.progress.reporter import Reporter
from testkit.lab_cluster import LAB_CONFIG, FakeNode

CONFIG = load_config(LAB_CONFIG).cluster


async def first(monitor: ClusterMonitor):
    follower = LogFollower(CONFIG, monitor, Reporter())
    failures = follower.failures(SERVING)
    try:
        return await anext(failures)
    finally:
        await failures.aclose()


async def test_a_lost_health_probe_is_the_api_down_failure_with_the_head_tail():
    monitor = ClusterMonitor("vllm", Secrets({}), 10)
    head = CONFIG.head.name
    monitor.publish(LogLine(head, "INFO: still serving"))
    monitor.publish(HealthLost(head, "GET /health failed: ReadTimeout"))
    failed = await first(monitor)
    assert (
        isinstance(failed, Failed)
        and failed.checkpoint == "health"
        and failed.signature == "api_down"
    )
    assert failed.evidence == "GET /health failed: ReadTimeout" and failed.node == head


async def test_after_a_logged_shutdown_a_lost_probe_is_teardown_not_a_failure():
    monitor = ClusterMonitor("vllm", Secrets({}), 10)
    head = CONFIG.head.name
    monitor.publish(
        LogLine(
            head,
            "(APIServer pid=1) INFO 12-01 10:00:00 [launcher.py:110] "
            "[shutdown] API server: shutdown triggered",
        )
    )
    monitor.publish(HealthLost(head, "GET /health failed: ConnectError"))
    stopped = await first(monitor)
    assert isinstance(stopped, Progress) and stopped.phase == "stopped"


async def test_a_lost_stream_while_the_api_serves_is_monitoring_lost_then_resumed():
    monitor = ClusterMonitor("vllm", Secrets({}), 10)
    follower = LogFollower(CONFIG, monitor, Reporter())
    asked: list[str] = []

    async def still_serving(item: FollowLost) -> str | None:
        asked.append(item.node)
        return "its Docker engine does not answer (SSH to it does)"

    worker = CONFIG.nodes[1].name
    monitor.publish(
        FollowLost(worker, "log stream broke: lost the connection to the Docker engine")
    )
    monitor.publish(
        FollowLost(worker, "Docker event stream ended")
    )  # the same cause, once reported
    monitor.publish(FollowResumed(worker, 3.2))
    monitor.publish(FollowLost(worker, "Docker event stream ended"))
    monitor.publish(HealthLost(CONFIG.head.name, "GET /health failed: ConnectError"))
    failures = follower.failures(SERVING, still_serving=still_serving)
    try:
        events = [event async for event in failures]
    finally:
        await failures.aclose()
    assert [getattr(e, "phase", None) for e in events[:3]] == [
        "monitoring_lost",
        "monitoring_resumed",
        "monitoring_lost",
    ]
    assert asked == [worker, worker], "asked again only after it was followed again"
    lost = events[0]
    assert lost.node == worker and worker in lost.message and "the API still serves" in lost.message
    assert "log stream broke" in lost.message
    assert "its Docker engine does not answer" in lost.message, "which part of the node was lost"
    failed = events[-1]
    assert (
        isinstance(failed, Failed)
        and failed.signature == "api_down_node_lost"
        and failed.node == worker
    )
    assert worker in failed.summary and "Docker event stream ended" in failed.cause


async def test_a_lost_stream_when_the_api_does_not_answer_is_the_failure():
    monitor = ClusterMonitor("vllm", Secrets({}), 10)
    follower = LogFollower(CONFIG, monitor, Reporter())

    async def not_serving(item: FollowLost) -> str | None:
        return None

    worker = CONFIG.nodes[1].name
    monitor.publish(FollowLost(worker, "Docker event stream ended"))
    failures = follower.failures(SERVING, still_serving=not_serving)
    try:
        [failed] = [event async for event in failures]
    finally:
        await failures.aclose()
    assert (
        isinstance(failed, Failed) and failed.signature == "follow_lost" and failed.node == worker
    )


class StoppingEngine:
    """A Docker engine double stopping with its container (SIGTERM, then the container's end),
    whose log stream ends before its event stream has delivered the `kill` and the `die` (two
    connections: either may be read first). After the end, `inspect` fails (the engine's API
    has closed) or says the container has exited."""

    def __init__(self, inspect_after_the_end: str):
        self.inspect_after_the_end = inspect_after_the_end
        self.log_ended = asyncio.Event()

    async def follow_log(self, name: str, **options: object):
        yield "2026-12-01T10:00:00.000000000Z INFO:     Shutting down\n"
        self.log_ended.set()

    async def events(self, container: str, actions: list[str]):
        await self.log_ended.wait()
        yield {"Action": "kill", "Actor": {"Attributes": {"signal": "15"}}}
        yield {"Action": "die", "Actor": {"Attributes": {"exitCode": "0"}}}

    async def inspect_container(self, name: str):
        if self.inspect_after_the_end == "fails":
            raise DockerUnavailable("spark-lab-0", "the Docker engine does not answer", "start it")
        return {"State": {"Running": False, "ExitCode": 0, "OOMKilled": False}}


@pytest.mark.parametrize("inspect_after_the_end", ["fails", "says exited"])
async def test_a_stop_is_told_as_a_stop_when_the_log_stream_ends_before_the_kill_event(
    inspect_after_the_end,
):
    """Docker orders a container's events (the kill before the die), not its two streams: what
    the log stream's end says waits for the event stream to tell the container's end."""
    head = CONFIG.head.name
    monitor = ClusterMonitor("vllm", Secrets({}), 10)
    monitor.follow(FakeNode(head, {}, {}, StoppingEngine(inspect_after_the_end)))
    follower = LogFollower(CONFIG, monitor, Reporter())

    async def still_serving(item: FollowLost) -> str | None:
        return "its Docker engine does not answer"

    failures = follower.failures(SERVING, still_serving=still_serving)
    try:
        first_event = await asyncio.wait_for(anext(failures), 10)
    finally:
        await failures.aclose()
        await monitor.aclose()
    assert isinstance(first_event, Progress) and first_event.phase == "stopped", first_event
    assert "Docker engine stopping" in first_event.message
