"""HTTP mode with signatures, /health, and the console adapter driven through its input."""

from __future__ import annotations

import io
import time

import aiohttp
import pytest

from bot.app import run_console
from bot.config import SparkBotConfig
from testkit.lab_cluster import cluster_for
from testkit.slack_bot import ALICE, CH, containers_present, down, settings, slack_bot
from testkit.slack_standin import SlackStandIn

pytestmark = [pytest.mark.lab, pytest.mark.timeout(120)]


async def test_http_mode_checks_signatures_and_reports_health(lab, tmp_path):
    cluster = cluster_for(lab)
    async with (
        SlackStandIn() as slack,
        slack_bot(slack, cluster, settings(tmp_path), http=True) as bot,
    ):
        url = f"http://127.0.0.1:{bot.port}/slack/events"
        ok = await slack.send_slash_command_http(url, ALICE, CH, "help")
        assert ok.status == 200 and "/spark up" in ok.body and ok.latency < 3
        forged = await slack.send_slash_command_http(
            url, ALICE, CH, "help", signing_secret="not-the-secret"
        )
        assert forged.status == 401
        expired = await slack.send_slash_command_http(
            url, ALICE, CH, "help", timestamp=int(time.time()) - 600
        )
        assert expired.status == 401
        async with (
            aiohttp.ClientSession() as http,
            http.get(f"http://127.0.0.1:{bot.port}/health") as response,
        ):
            assert response.status == 200
            assert await response.json() == {"ok": True, "mode": "http", "connected": True}
    audit = sorted((a["command"], a["outcome"].split(" (")[0]) for a in await _audit(tmp_path))
    assert audit == [
        ("/spark help", "refused: a forged HTTP request"),
        ("/spark help", "refused: a stale HTTP request"),
        ("help", "answered"),
    ], "refused requests never reach the handlers: only their audit lines"


async def _audit(tmp_path):
    from handlers.store import Store

    store = Store(tmp_path / "spark-bot.db")
    await store.open()
    try:
        return await store.audit_trail()
    finally:
        await store.close()


async def test_socket_mode_health_follows_the_connection(lab, tmp_path):
    cluster = cluster_for(lab)
    async with SlackStandIn() as slack, slack_bot(slack, cluster, settings(tmp_path)) as bot:
        await slack.wait_for_connection()
        async with (
            aiohttp.ClientSession() as http,
            http.get(f"http://127.0.0.1:{bot.port}/health") as response,
        ):
            assert response.status == 200 and (await response.json())["connected"] is True


async def lines(*texts):
    for text in texts:
        yield text + "\n"


async def test_console_runs_up_status_and_down_with_a_prompt(lab, tmp_path):
    cluster = cluster_for(lab)
    await down(cluster)
    config = SparkBotConfig(
        cluster=cluster, store={"path": tmp_path / "console.db"}, jobs={"update_interval": 0}
    )
    out = io.StringIO()
    try:
        await run_console(
            config,
            {},
            lines=lines(
                "/spark help",
                "/spark up",
                "/spark status",
                "/spark down",
                "n",
                "/spark down",
                "y",
                "/spark launch",
            ),
            out=out,
            files_dir=tmp_path / "files",
        )
    finally:
        await down(cluster)
    text = out.getvalue()
    assert "┌ 🚀 Launch on `lab`" in text
    assert "#1 ↳ ┌ ✔ SSH to every node" in text and "#1 ↳ ┌ ✅ Ready" in text and "tok/s" in text
    assert "┌ Status of `lab`" in text and "API: healthy" in text
    assert text.count("Tear down? [y/N]") == 2 and "Not confirmed: nothing was done." in text
    assert "┌ 🧹 Tear down `lab`" in text and "Removed 2 container(s)" in text
    assert "unknown command `launch`" in text
    assert await containers_present(cluster) == []
    assert list((tmp_path / "files").iterdir()), "long log tails written as files"
