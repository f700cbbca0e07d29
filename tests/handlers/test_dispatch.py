"""The dispatcher when the cluster misbehaves, and what untrusted text looks like once posted.

No lab: the real controller against nodes whose Docker engine answers badly (a stand-in engine
on a unix socket) or not at all (no socket), heard through the RecordingChat; the bench
fingerprint on the demo's embedded cluster (emulated engines, no root). What Slack receives
(escaping inside Block Kit) goes through SlackChat to the Slack stand-in.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
from pathlib import Path

import pytest

from bot.console import render_message
from bot.slack import SlackChat, make_client
from cluster.config import ClusterConfig, Secrets
from cluster.controller import Controller
from cluster.events import Failed
from demo.cluster import embedded_cluster
from handlers.command_context import Invocation
from handlers.render import JobView, failure_message
from handlers.settings import JobsConfig
from testkit.docker_standin import docker_standin, failing
from testkit.doubles import ALICE, CH, running_dispatcher, settings
from testkit.local_cluster import local_cluster
from testkit.slack_bot import block_text
from tests.cluster.test_launcher import runs_unreadable

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
async def broken_engine(tmp_path):
    """A Docker engine that answers /version but fails every other call with a 500."""
    async with docker_standin(
        Path("/tmp") / f"spark-broken-{tmp_path.name[-20:]}.sock", failing
    ) as socket:
        yield socket


def broken_cluster(engine: Path, tmp_path: Path) -> ClusterConfig:
    """head: an engine that fails every call; worker: no engine at all (unreachable)."""
    return local_cluster(
        "broken",
        [engine, tmp_path / "missing.sock"],
        serve={
            "served_model_name": "model",
            "backend": "ray",
            "tensor_parallel_size": 2,
            "max_model_len": 8192,
            "port": 18000,
            "ray_port": 16379,
            "master_port": 29500,
        },
    )


def db_rows(tmp_path: Path, query: str) -> list[tuple]:
    with sqlite3.connect(tmp_path / "spark-bot.db") as db:
        return db.execute(query).fetchall()


def real_controller(config: ClusterConfig) -> Controller:
    return Controller(config, Secrets({}))


async def test_a_launch_on_broken_nodes_fails_in_its_thread_and_frees_the_lock(
    broken_engine, tmp_path
):
    cluster = broken_cluster(broken_engine, tmp_path)
    async with running_dispatcher(real_controller, settings(tmp_path), cluster=cluster) as (
        dispatcher,
        chat,
    ):
        for _ in range(2):  # the second is not refused as busy: the first released the lock
            await dispatcher.command(Invocation(ALICE, CH, "up"))
            await asyncio.wait_for(dispatcher.idle(), 20)
        cancel = await dispatcher.command(Invocation(ALICE, CH, "cancel"))
    assert cancel is not None and cancel.title == "Nothing to cancel"
    failures = [p.message for p in chat.posts if p.thread and p.message.tone == "failure"]
    assert len(failures) == 2, [p.message.title for p in chat.posts]
    for failure in failures:
        assert f"<@{ALICE}>" in failure.text and "spark-b" in failure.text
        assert "does not answer" in failure.text and "*Fix:*" in failure.text, failure.text
    assert db_rows(tmp_path, "SELECT * FROM locks") == []
    assert [state for (state,) in db_rows(tmp_path, "SELECT state FROM jobs")] == [
        "failed",
        "failed",
    ]
    assert chat.private == [], "the launch itself met the nodes: no look at them before it"


async def test_status_and_logs_errors_reach_the_asker_with_node_problem_and_fix(
    broken_engine, tmp_path
):
    cluster = broken_cluster(broken_engine, tmp_path)
    async with running_dispatcher(real_controller, settings(tmp_path), cluster=cluster) as (
        dispatcher,
        chat,
    ):
        for text in ["logs worker", "status"]:
            await dispatcher.command(Invocation(ALICE, CH, text))
            await asyncio.wait_for(dispatcher.idle(), 20)
    [(_, logs), (_, status)] = chat.private
    assert logs.title == "✘ `/spark logs spark-b 50` could not answer"
    assert "Node `spark-b`: the Docker engine at" in logs.text and "does not answer" in logs.text
    assert "*Try:* Is dockerd running on the node" in logs.text
    assert status.title == "✘ `/spark status` could not answer"
    assert "no space left on device" in status.text and "*Try:*" in status.text


HOSTILE = "<!channel> see <http://evil.example|the docs> & more"


async def test_untrusted_text_is_posted_escaped_and_cannot_leave_its_code_block(slack):
    view = JobView(
        SlackChat(make_client(slack.bot_token, slack.api_url)),
        CH,
        title="Launch",
        text="",
        plan=[],
        job_id=7,
        requester=ALICE,
        settings=JobsConfig(update_interval=0),
    )
    view.open()
    await view.delivered()  # posted first, so that the failure is an update
    failure = Failed(
        elapsed_s=1.0,
        checkpoint="weights",
        title="Weights loaded",
        node="spark-a",
        summary=f"engine died: {HOSTILE}",
        evidence=HOSTILE,
        cause=f"cause {HOSTILE}",
        fix="fix it",
        log_tail=["```", HOSTILE, "`<!here>`"],
    )
    await view.failed(failure)
    await view.delivered()
    [reply] = [c for c in slack.calls("chat.postMessage") if c.params.get("thread_ts")]
    sent = json.dumps(reply.params["blocks"]) + reply.params["text"]
    [update] = slack.calls("chat.update")
    sent += json.dumps(update.params)
    assert "<!channel>" not in sent and "<!here>" not in sent and "<http://evil" not in sent
    assert "&lt;!channel&gt; see &lt;http://evil.example|the docs&gt; &amp; more" in sent
    assert f"<@{ALICE}>" in reply.params["text"] and "*Cause:*" in block_text(reply), (
        "our own markup is kept"
    )
    for block in reply.params["blocks"]:
        text = block.get("text", {}).get("text", "")
        if "```" in text:  # exactly one code block, opened and closed by our fences
            assert text.count("```") == 2 and text.rstrip().endswith("```"), text
    # the console shows the same message readably: the text as it was, not entities
    shown = render_message(failure_message(failure, ALICE))
    assert f"engine died: {HOSTILE}" in shown and "&lt;" not in shown and "@U0ALICE" in shown


async def test_bench_is_filed_under_the_launched_setup_and_compared_from_the_store(tmp_path):
    async with (
        embedded_cluster(nodes=2) as embedded,
        running_dispatcher(real_controller, settings(tmp_path), cluster=embedded.config) as (
            dispatcher,
            chat,
        ),
    ):
        await dispatcher.command(Invocation(ALICE, CH, "up max_model_len=4096"))
        await asyncio.wait_for(dispatcher.idle(), 90)  # the job has ended (the watch goes on)
        assert any(p.message.title == "✅ Ready" for p in chat.posts)
        for _ in range(2):
            await dispatcher.command(Invocation(ALICE, CH, "bench max_tokens=16 runs=1"))
            await asyncio.wait_for(dispatcher.idle(), 60)
    results = [p.message for p in chat.posts if p.message.title == "📊 Benchmark"]
    assert len(results) == 2 and "vs previous:" in results[1].text, (
        "the second run is compared with the first"
    )
    reports = [
        json.loads(r)
        for (r,) in db_rows(tmp_path, "SELECT report_json FROM bench_results ORDER BY id")
    ]
    assert [r["fingerprint"]["serve"]["max_model_len"] for r in reports] == [4096, 4096]
    assert reports[1]["comparisons"] and reports[0]["setup_key"] == reports[1]["setup_key"]
    assert not list(tmp_path.glob("*.jsonl")), "one bench history for the bot: the store"


async def test_status_in_chat_says_the_launched_recipe_is_unknown_and_why(tmp_path):
    async with (
        runs_unreadable(tmp_path) as cluster,
        running_dispatcher(real_controller, settings(tmp_path), cluster=cluster) as (
            dispatcher,
            chat,
        ),
    ):
        await dispatcher.command(Invocation(ALICE, CH, "status"))
        await asyncio.wait_for(dispatcher.idle(), 20)
    [(_, status)] = chat.private
    assert status.title == f"Status of `{cluster.name}`", status.title
    assert "vllm_node: *running*" in status.text, status.text
    assert "(recipe unknown: its launcher's runs on spark-a could not be read: " in status.text
