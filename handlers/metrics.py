"""The bot's own metrics, for Prometheus: what its jobs became, which failure rows matched, how
long a checkpoint took from its log line to the chat, what Slack refused, what the watch sees.

Each bot has its own registry (never prometheus_client's global one), so two bots in one process,
and two tests, count apart. `exposition()` is what the adapters serve at `/metrics`.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import datetime
from typing import Literal

from prometheus_client import CollectorRegistry, Counter, Enum, Gauge, Histogram
from prometheus_client.exposition import choose_encoder

WatchState = Literal["not_watching", "watching", "monitoring_lost", "serving_lost"]
WATCH_STATES: tuple[WatchState, ...] = (
    "not_watching",
    "watching",
    "monitoring_lost",  # a node's log or event stream broke while the API still serves
    "serving_lost",  # the watch reported a failure while serving; until the next watch starts
)

# seconds; the goal is under 1 s (docs/performance.md), a chat that refuses for minutes lands in the last ones
CHECKPOINT_POST_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 300.0)

NODE_ERROR = "node_error"  # the signature label of a failure no row diagnosed (a node not reached)
MAX_LABEL = 64  # Slack's error codes are short; anything longer is cut, never a new long series


class BotMetrics:
    """Every series of one bot. `cluster(name)` is the part a cluster's job manager writes."""

    def __init__(self, *, wall_clock: Callable[[], float] = time.time) -> None:
        self.registry = CollectorRegistry()
        self.wall_clock = wall_clock
        registry = self.registry
        self.jobs = Counter(
            "spark_bot_jobs",
            "Jobs that ended, by command (up, verify, bench, down...) and end state "
            "(succeeded, failed, cancelled, refused, ...).",
            ["cluster", "kind", "outcome"],
            registry=registry,
        )
        self.failures = Counter(
            "spark_bot_failures",
            "Failures reported in jobs and by the watch, by the id of the row of "
            f"cluster/diagnosis/failures.py that diagnosed them ({NODE_ERROR}: a node that could not be "
            "reached or driven).",
            ["cluster", "signature"],
            registry=registry,
        )
        self.checkpoint_post = Histogram(
            "spark_bot_checkpoint_post_latency_seconds",
            "From Docker's timestamp of a checkpoint's log line to the chat accepting the "
            "checkpoint's thread reply.",
            ["cluster"],
            buckets=CHECKPOINT_POST_BUCKETS,
            registry=registry,
        )
        self.slack_requests = Counter(
            "spark_bot_slack_api_requests",
            "Slack Web API requests the bot made (each retry counts), by method.",
            ["method"],
            registry=registry,
        )
        self.slack_errors = Counter(
            "spark_bot_slack_api_errors",
            "Slack Web API requests answered with an error (ok: false, or an HTTP error other "
            "than 429) or not answered (the exception's name), by method and error.",
            ["method", "error"],
            registry=registry,
        )
        self.slack_rate_limited = Counter(
            "spark_bot_slack_api_rate_limited",
            "Slack Web API requests answered 429 (rate limited), by method.",
            ["method"],
            registry=registry,
        )
        self.watch = Enum(
            "spark_bot_watch_state",
            "What the watch of a running cluster sees now.",
            ["cluster"],
            states=list(WATCH_STATES),
            registry=registry,
        )
        started_wall, started = wall_clock(), time.monotonic()
        Gauge(
            "spark_bot_start_time_seconds",
            "When this bot started, in seconds since the epoch.",
            registry=registry,
        ).set(started_wall)
        Gauge(
            "spark_bot_uptime_seconds", "Seconds since this bot started.", registry=registry
        ).set_function(lambda: time.monotonic() - started)

    def cluster(self, name: str) -> ClusterMetrics:
        return ClusterMetrics(self, name)

    def slack_answer(self, method: str, *, status: int | None, error: str | None) -> None:
        """One answer of the Web API (`status` None: none came; `error`: as Slack or the client
        named it)."""
        self.slack_requests.labels(method).inc()
        if status == 429:
            self.slack_rate_limited.labels(method).inc()
        elif error is not None:
            self.slack_errors.labels(method, error[:MAX_LABEL]).inc()

    def exposition(self, accept: str = "") -> tuple[bytes, str]:
        """The series and their content type, in the format the scraper's Accept header asks
        for: Prometheus's text format (0.0.4) by default, OpenMetrics when asked."""
        encode, content_type = choose_encoder(accept)
        return encode(self.registry), content_type


class ClusterMetrics:
    """The series of one cluster's jobs and watch."""

    def __init__(self, metrics: BotMetrics, cluster: str) -> None:
        self.metrics = metrics
        self.name = cluster
        metrics.watch.labels(cluster).state("not_watching")

    def job_ended(self, command: str, outcome: str) -> None:
        kind = command.split(maxsplit=1)[0] if command.strip() else "unknown"
        self.metrics.jobs.labels(self.name, kind, outcome).inc()

    def failed(self, signature: str | None) -> None:
        self.metrics.failures.labels(self.name, signature or NODE_ERROR).inc()

    def checkpoint_shown(self, logged_at: datetime) -> None:
        """The chat took a checkpoint's reply now; its evidence line was logged at `logged_at`.
        (The node's clock against the bot's: a node ahead of the bot counts as no delay.)"""
        latency = self.metrics.wall_clock() - logged_at.timestamp()
        self.metrics.checkpoint_post.labels(self.name).observe(max(0.0, latency))

    def watching(self, state: WatchState) -> None:
        self.metrics.watch.labels(self.name).state(state)
