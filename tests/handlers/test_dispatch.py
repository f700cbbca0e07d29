"""The dispatcher when the cluster misbehaves, and what untrusted text looks like once posted.

No lab: the Slack stand-in, the real bot (Socket Mode, handlers, controller), and nodes whose
Docker engine answers badly (a stand-in engine on a unix socket) or not at all (no socket).
The bench-fingerprint test runs on the demo's embedded cluster (emulated engines, no root).
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
from pathlib import Path

import pytest
from aiohttp import web

from bot.console import render_message
from bot.slack import SlackChat, make_client
from cluster.config import ClusterConfig, ContainerConfig, NodeConfig, ServeConfig
from cluster.events import Failed
from demo.cluster import embedded_cluster
from handlers.render import JobView, failure_message
from handlers.settings import JobsConfig
from tests.bot.helpers import ALICE, CH, block_text, header, settings, slack_bot

pytestmark = pytest.mark.timeout(120)



@pytest.fixture
async def broken_engine(tmp_path):
    """A Docker engine that answers /version but fails every other call with a 500."""

    async def handle(request: web.Request) -> web.Response:
        if request.path.rstrip("/").endswith(("/version", "/_ping")):
            return web.json_response({"ApiVersion": "1.43", "Version": "24.0.0", "MinAPIVersion": "1.12"})
        return web.json_response({"message": "write /var/lib/docker: no space left on device"}, status=500)

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handle)
    runner = web.AppRunner(app)
    await runner.setup()
    socket = Path("/tmp") / f"spark-broken-{tmp_path.name[-20:]}.sock"
    await web.UnixSite(runner, str(socket)).start()
    try:
        yield socket
    finally:
        await runner.cleanup()
        socket.unlink(missing_ok=True)


def broken_cluster(engine: Path, tmp_path: Path) -> ClusterConfig:
    """head: an engine that fails every call; worker: no engine at all (unreachable)."""
    return ClusterConfig(
        name="broken",
        nodes=[NodeConfig(name="spark-a", driver="local", fabric_ip="10.0.0.1", docker_socket=str(engine)),
               NodeConfig(name="spark-b", driver="local", fabric_ip="10.0.0.2",
                          docker_socket=str(tmp_path / "missing.sock"))],
        container=ContainerConfig(image="vllm:test", name="vllm_broken", privileged=False, gpus=False,
                                  shm_size=None, ulimits={}, env={}),
        serve=ServeConfig(model="org/model", served_model_name="model", backend="ray", tensor_parallel_size=2,
                          max_model_len=8192, port=18000, ray_port=16379, master_port=29500),
    )


def db_rows(tmp_path: Path, query: str) -> list[tuple]:
    with sqlite3.connect(tmp_path / "spark-bot.db") as db:
        return db.execute(query).fetchall()


async def test_a_failure_before_the_job_runs_frees_the_lock_and_tells_the_asker(slack, broken_engine, tmp_path):
    cluster = broken_cluster(broken_engine, tmp_path)
    async with slack_bot(slack, cluster, settings(tmp_path)):
        for _ in range(2):  # the second is not refused as busy: the first released the lock
            mark = slack.last_seq()
            await slack.send_slash_command(ALICE, CH, "up")
            reply = await slack.wait_for(lambda c: c.method == "chat.postEphemeral", 20, after=mark)
            assert header(reply) == "✘ `/spark up` did not start", block_text(reply)
            text = block_text(reply)
            assert "no space left on device" in text and "*Try:*" in text and "the cluster is free" in text
        ack = await slack.send_slash_command(ALICE, CH, "cancel")
        assert ack.payload["blocks"][0]["text"]["text"] == "Nothing to cancel"
    assert db_rows(tmp_path, "SELECT * FROM locks") == []
    assert [state for (state,) in db_rows(tmp_path, "SELECT state FROM jobs")] == ["failed", "failed"]
    assert not slack.calls("chat.postMessage"), "no job message: nothing started"


async def test_status_and_logs_errors_reach_the_asker_with_node_problem_and_fix(slack, broken_engine, tmp_path):
    cluster = broken_cluster(broken_engine, tmp_path)
    async with slack_bot(slack, cluster, settings(tmp_path)):
        mark = slack.last_seq()
        await slack.send_slash_command(ALICE, CH, "logs worker")
        logs = await slack.wait_for(lambda c: c.method == "chat.postEphemeral", 20, after=mark)
        mark = slack.last_seq()
        await slack.send_slash_command(ALICE, CH, "status")
        status = await slack.wait_for(lambda c: c.method == "chat.postEphemeral", 20, after=mark)
    assert header(logs) == "✘ `/spark logs spark-b 50` could not answer"
    text = block_text(logs)
    assert "Node `spark-b`: the Docker engine at" in text and "does not answer" in text
    assert "*Try:* Is dockerd running on the node" in text
    assert header(status) == "✘ `/spark status` could not answer"
    assert "no space left on device" in block_text(status) and "*Try:*" in block_text(status)


HOSTILE = "<!channel> see <http://evil.example|the docs> & more"


async def test_untrusted_text_is_posted_escaped_and_cannot_leave_its_code_block(slack):
    view = JobView(SlackChat(make_client(slack.bot_token, slack.api_url)), CH, title="Launch", text="",
                   plan=[], job_id=7, requester=ALICE, settings=JobsConfig(update_interval=0))
    await view.open()
    failure = Failed(elapsed_s=1.0, checkpoint="weights", title="Weights loaded", node="spark-a",
                     summary=f"engine died: {HOSTILE}", evidence=HOSTILE, cause=f"cause {HOSTILE}",
                     fix="fix it", log_tail=["```", HOSTILE, "`<!here>`"])
    await view.failed(failure)
    [reply] = [c for c in slack.calls("chat.postMessage") if c.params.get("thread_ts")]
    sent = json.dumps(reply.params["blocks"]) + reply.params["text"]
    [update] = slack.calls("chat.update")
    sent += json.dumps(update.params)
    assert "<!channel>" not in sent and "<!here>" not in sent and "<http://evil" not in sent
    assert "&lt;!channel&gt; see &lt;http://evil.example|the docs&gt; &amp; more" in sent
    assert f"<@{ALICE}>" in reply.params["text"] and "*Cause:*" in block_text(reply), "our own markup is kept"
    for block in reply.params["blocks"]:
        text = block.get("text", {}).get("text", "")
        if "```" in text:  # exactly one code block, opened and closed by our fences
            assert text.count("```") == 2 and text.rstrip().endswith("```"), text
    # the console shows the same message readably: the text as it was, not entities
    shown = render_message(failure_message(failure, ALICE))
    assert f"engine died: {HOSTILE}" in shown and "&lt;" not in shown and "@U0ALICE" in shown


async def test_bench_is_filed_under_the_launched_setup_and_compared_from_the_store(slack, tmp_path):
    async with embedded_cluster(nodes=2) as embedded:
        bot_settings = settings(tmp_path)
        async with slack_bot(slack, embedded.config, bot_settings) as bot:
            await slack.send_slash_command(ALICE, CH, "up max_model_len=4096")
            await asyncio.wait_for(bot.dispatcher.idle(), 90)  # the job has ended (the watch goes on)
            assert any(header(c) == "✅ Ready" for c in slack.calls("chat.postMessage"))
            for _ in range(2):
                mark = slack.last_seq()
                await slack.send_slash_command(ALICE, CH, "bench max_tokens=16 runs=1")
                result = await slack.wait_for(
                    lambda c: c.method == "chat.postMessage" and header(c) == "📊 Benchmark", 60, after=mark)
                await asyncio.wait_for(bot.dispatcher.idle(), 30)
            assert "vs previous:" in block_text(result), "the second run is compared with the first"
    reports = [json.loads(r) for (r,) in db_rows(tmp_path, "SELECT report_json FROM bench_results ORDER BY id")]
    assert [r["fingerprint"]["serve"]["max_model_len"] for r in reports] == [4096, 4096]
    assert reports[1]["comparisons"] and reports[0]["setup_key"] == reports[1]["setup_key"]
    assert not list(tmp_path.glob("*.jsonl")), "one bench history for the bot: the store"
