"""The bot's /metrics, scraped over HTTP from the real bot on the Slack stand-in while jobs of the
handler doubles' cluster run, fail and are watched: each series moves as the stand-in's own
record of calls and the jobs say it should (prometheus_client's own parser reads the text)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from prometheus_client.parser import text_string_to_metric_families

from cluster.events import CheckpointPassed, Progress
from handlers.metrics import BotMetrics
from testkit.doubles import (
    CLUSTER,
    Hold,
    ScriptedControllers,
    VirtualTime,
    failed,
    launch_passes,
    ready,
)
from testkit.slack_bot import ALICE, CH, Samples, scrape, settings, slack_bot, value

pytestmark = pytest.mark.timeout(60)


def logged_now(event: CheckpointPassed, ago: float) -> CheckpointPassed:
    """The checkpoint as the controller gives it, its evidence logged `ago` seconds back."""
    return event.model_copy(update={"logged_at": datetime.now(UTC) - timedelta(seconds=ago)})


def watch_state(samples: Samples) -> str:
    [state] = [
        dict(labels)["spark_bot_watch_state"]
        for (name, labels), v in samples.items()
        if name == "spark_bot_watch_state" and dict(labels)["cluster"] == CLUSTER.name and v == 1
    ]
    return state


async def test_metrics_follow_jobs_failures_the_watch_and_slacks_refusals(slack, tmp_path):
    name = CLUSTER.name
    lost, then_fail = Hold(), Hold()
    monitoring_lost = Progress(elapsed_s=1, phase="monitoring_lost", message="worker's log lost")
    resumed = Progress(elapsed_s=2, phase="monitoring_resumed", message="worker followed again")
    serving_lost = failed().model_copy(update={"signature": "engine_dead"})
    passes = [logged_now(event, ago=0.2) for event in launch_passes()]
    controllers = ScriptedControllers(
        up=[*passes, ready()], watch=[monitoring_lost, lost, resumed, then_fail, serving_lost]
    )
    async with slack_bot(slack, CLUSTER, settings(tmp_path), controllers=controllers) as bot:
        time = VirtualTime()  # the outboxes' waits after a 429 or an error take no real time
        bot.dispatcher.jobs.deliveries.timing = time.timing()
        before = await scrape(bot)
        assert watch_state(before) == "not_watching"
        assert (
            value(before, "spark_bot_jobs_total", cluster=name, kind="up", outcome="succeeded") == 0
        )
        assert value(before, "spark_bot_uptime_seconds") > 0
        assert (
            abs(value(before, "spark_bot_start_time_seconds") - datetime.now(UTC).timestamp()) < 60
        )

        # a launch that passes, while Slack refuses some of its calls
        slack.rate_limit("chat.update", times=2)
        slack.rate_limit("chat.postMessage", times=1)
        slack.fail("chat.getPermalink", "message_not_found")
        await slack.send_slash_command(ALICE, CH, "up")
        await lost.reached.wait()  # after Ready the watch started, and reported a node lost
        await bot.dispatcher.idle()
        launched = await scrape(bot)
        # no latency can be longer than from the earliest line's timestamp to this scrape
        longest = (datetime.now(UTC) - min(event.logged_at for event in passes)).total_seconds()
        assert (
            value(launched, "spark_bot_jobs_total", cluster=name, kind="up", outcome="succeeded")
            == 1
        )
        assert watch_state(launched) == "monitoring_lost"
        # one latency per checkpoint reply the chat took, each from its line's timestamp (0.2 s
        # back) to the post: over 0.2 s, and within what the test's own clock allows
        count = value(launched, "spark_bot_checkpoint_post_latency_seconds_count", cluster=name)
        total = value(launched, "spark_bot_checkpoint_post_latency_seconds_sum", cluster=name)
        assert count == len(passes)
        assert 0.2 * count <= total <= longest * count
        # every answer Slack gave, as the stand-in recorded them
        for method in ("chat.postMessage", "chat.update", "chat.getPermalink"):
            calls = slack.calls(method)
            assert value(launched, "spark_bot_slack_api_requests_total", method=method) == len(
                calls
            )
            refused = sum(call.status == 429 for call in calls)
            assert (
                value(launched, "spark_bot_slack_api_rate_limited_total", method=method) == refused
            )
        assert value(launched, "spark_bot_slack_api_rate_limited_total", method="chat.update") == 2
        assert (
            value(launched, "spark_bot_slack_api_rate_limited_total", method="chat.postMessage")
            == 1
        )
        errors = {"method": "chat.getPermalink", "error": "message_not_found"}
        assert value(launched, "spark_bot_slack_api_errors_total", **errors) == 1
        assert value(launched, "spark_bot_uptime_seconds") > value(
            before, "spark_bot_uptime_seconds"
        )

        # the watch: the node followed again, then the server fails while serving
        lost.release.set()
        await then_fail.reached.wait()
        assert watch_state(await scrape(bot)) == "watching"
        then_fail.release.set()
        assert bot.dispatcher.watch.task is not None
        await bot.dispatcher.watch.task
        await bot.dispatcher.idle()
        serving = await scrape(bot)
        assert watch_state(serving) == "serving_lost"
        assert (
            value(serving, "spark_bot_failures_total", cluster=name, signature="engine_dead") == 1
        )

        # a launch that fails, diagnosed by a row of cluster/diagnosis/failures.py
        diagnosed = failed().model_copy(update={"signature": "nccl_unhandled_system_error"})
        controllers.scripts["up"] = [passes[0], diagnosed]
        await slack.send_slash_command(ALICE, CH, "up")
        await bot.dispatcher.idle()
        after = await scrape(bot)
        assert value(after, "spark_bot_jobs_total", cluster=name, kind="up", outcome="failed") == 1
        assert (
            value(after, "spark_bot_jobs_total", cluster=name, kind="up", outcome="succeeded") == 1
        )
        failures = "spark_bot_failures_total"
        assert value(after, failures, cluster=name, signature="nccl_unhandled_system_error") == 1
        assert value(after, failures, cluster=name, signature="engine_dead") == 1
        # a launch that failed before it could change the cluster leaves the watch's state alone
        assert watch_state(after) == "serving_lost"

        # a failure no row diagnosed (a node not reached), then a teardown (it asks first)
        controllers.scripts["up"] = [failed()]
        await slack.send_slash_command(ALICE, CH, "up")
        await bot.dispatcher.idle()
        await slack.send_slash_command(ALICE, CH, "down")
        await bot.dispatcher.idle()
        last = await scrape(bot)
        assert value(last, failures, cluster=name, signature="node_error") == 1
        assert value(last, "spark_bot_jobs_total", cluster=name, kind="up", outcome="failed") == 2
        assert (
            value(last, "spark_bot_jobs_total", cluster=name, kind="down", outcome="unconfirmed")
            == 1
        )


async def test_metrics_are_served_in_http_mode_and_each_bot_counts_apart(slack, tmp_path):
    async with (
        slack_bot(slack, CLUSTER, settings(tmp_path / "a"), http=True) as one,
        slack_bot(slack, CLUSTER, settings(tmp_path / "b"), http=False) as other,
    ):
        assert one.http and not other.http
        first, second = await scrape(one), await scrape(other)
        # the HTTP bot proves its token with auth.test at start; the Socket Mode bot opens its
        # connection with apps.connections.open: each bot counts its own client's requests
        requests = "spark_bot_slack_api_requests_total"
        assert value(first, requests, method="auth.test") == 1
        assert value(first, requests, method="apps.connections.open") == 0
        assert value(second, requests, method="apps.connections.open") >= 1
        assert value(second, requests, method="auth.test") == 0
    assert BotMetrics().registry is not BotMetrics().registry


def test_a_latency_from_a_node_ahead_of_the_bot_counts_as_none():
    metrics = BotMetrics(wall_clock=lambda: 1000.0)
    metrics.cluster("c").checkpoint_shown(datetime.fromtimestamp(1002.5, UTC))
    metrics.cluster("c").checkpoint_shown(datetime.fromtimestamp(999.0, UTC))
    samples = {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(metrics.exposition()[0].decode())
        for s in family.samples
    }
    assert value(samples, "spark_bot_checkpoint_post_latency_seconds_sum", cluster="c") == 1.0
    assert value(samples, "spark_bot_checkpoint_post_latency_seconds_count", cluster="c") == 2
