"""`watch` reads one stream: the health probe's verdict arrives among log lines and deaths."""

from __future__ import annotations

from bot.config import load_config
from cluster.checkpoints import SERVING
from cluster.config import Secrets
from cluster.events import Failed, Progress
from cluster.follow import LogFollower
from cluster.monitor import ClusterMonitor, FollowLost, FollowResumed, HealthLost, LogLine
from cluster.reporter import Reporter
from tests.controller.helpers import LAB_CONFIG

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
