"""`watch` reads one stream: the health probe's verdict arrives among log lines and deaths."""

from __future__ import annotations

from cluster.checkpoints import SERVING
from cluster.config import Secrets
from cluster.events import Failed, Progress
from cluster.follow import LogFollower
from cluster.monitor import ClusterMonitor, HealthLost, LogLine
from cluster.reporter import Reporter
from tests.controller.helpers import LAB_CONFIG
from bot.config import load_config

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
    assert isinstance(failed, Failed) and failed.checkpoint == "health" and failed.signature == "api_down"
    assert failed.evidence == "GET /health failed: ReadTimeout" and failed.node == head


async def test_after_a_logged_shutdown_a_lost_probe_is_teardown_not_a_failure():
    monitor = ClusterMonitor("vllm", Secrets({}), 10)
    head = CONFIG.head.name
    monitor.publish(LogLine(head, "(APIServer pid=1) INFO 12-01 10:00:00 [launcher.py:110] "
                                  "[shutdown] API server: shutdown triggered"))
    monitor.publish(HealthLost(head, "GET /health failed: ConnectError"))
    stopped = await first(monitor)
    assert isinstance(stopped, Progress) and stopped.phase == "stopped"
