"""The bot process killed in the middle of a launch and started again: the stale lock is released,
the state reconciled, and the watch resumed, so a later failure lands in the launching job's thread."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import sys
from pathlib import Path

import aiohttp
import pytest
import yaml

from tests.bot.helpers import ALICE, CH, RED, attachment_color, block_text, down, header, settings
from tests.controller.helpers import cluster_for
from tests.controller.test_faults import lab_docker_kill
from tests.slack_standin import SlackStandIn

pytestmark = [pytest.mark.lab, pytest.mark.timeout(180)]

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def start_bot(config_path: Path, slack: SlackStandIn) -> asyncio.subprocess.Process:
    env = {**os.environ, "SLACK_BOT_TOKEN": slack.bot_token, "SLACK_APP_TOKEN": slack.app_token}
    return await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bot.cli", "run", "--config", str(config_path), cwd=ROOT, env=env,
        stdout=asyncio.subprocess.DEVNULL, stderr=open(config_path.with_suffix(".log"), "ab"))


async def healthy(port: int, proc: asyncio.subprocess.Process) -> None:
    async with aiohttp.ClientSession() as http:
        while True:  # polling /health is what a supervisor does; the process gives no other signal
            assert proc.returncode is None, "the bot exited"
            try:
                async with http.get(f"http://127.0.0.1:{port}/health") as response:
                    if response.status == 200:
                        return
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(0.2)


async def test_restart_in_the_middle_of_a_launch(lab, tmp_path):
    cluster = cluster_for(lab, env={"SPARK_EMU_FAULT": "slow_start"})
    await down(cluster)
    port = free_port()
    async with SlackStandIn() as slack:
        data = {"cluster": cluster.model_dump(mode="json"),
                **settings(tmp_path).model_dump(mode="json"),
                "slack": {"port": port, "host": "127.0.0.1", "api_url": slack.api_url}}
        config_path = tmp_path / "bot.yaml"
        config_path.write_text(yaml.safe_dump(data))
        first = await start_bot(config_path, slack)
        try:
            await asyncio.wait_for(healthy(port, first), 30)
            await slack.send_slash_command(ALICE, CH, "up")
            started = await slack.wait_for(
                lambda c: c.method == "chat.postMessage" and header(c).startswith("✔ Ray sees"), 60)
            parent_ts = started.params["thread_ts"]
            first.send_signal(signal.SIGKILL)  # a crash: no cleanup, the lock stays in SQLite
            await first.wait()

            mark = slack.last_seq()
            second = await start_bot(config_path, slack)
            await asyncio.wait_for(healthy(port, second), 30)
            note = await slack.wait_for(lambda c: c.method == "chat.postMessage"
                                        and header(c) == "⚠ The bot restarted during this job", 60, after=mark)
            assert note.params["thread_ts"] == parent_ts
            assert "The lock is released" in block_text(note) and "Watching it again" in block_text(note)
            assert "Interrupted" in str(slack.message(CH, parent_ts)["attachments"])

            # the lock is free: a read command answers, and a new job is not refused as busy
            await slack.send_slash_command(ALICE, CH, "verify")
            verify = await slack.wait_for(lambda c: c.method == "chat.postMessage" and "thread_ts" not in c.params,
                                          30, after=mark)
            assert header(verify) == "🔍 Verify `lab`", "a new job runs: not refused as busy"
            await slack.wait_for(lambda c: c.method == "chat.update" and c.params["ts"] == verify.result["ts"]
                                 and "✋" not in str(c.params) and c.params.get("attachments")
                                 and c.params["attachments"][0]["color"] != "#1d9bd1", 60, after=mark)

            # the watch resumed in the launching job's thread: kill the worker's container
            await lab_docker_kill(lab, 1, cluster.container.name)
            alarm = await slack.wait_for(lambda c: c.method == "chat.postMessage" and c.params.get("thread_ts") ==
                                         parent_ts and header(c).startswith("✘"), 60, after=mark)
            assert alarm.params["reply_broadcast"] is True and f"<@{ALICE}>" in alarm.params["text"]
            assert "while serving" in block_text(alarm)
            await slack.wait_until(lambda: attachment_color(slack.message(CH, parent_ts)) == RED, 10)
            second.send_signal(signal.SIGTERM)
            assert await asyncio.wait_for(second.wait(), 30) == 0
        finally:
            for proc in (first, locals().get("second")):
                if proc is not None and proc.returncode is None:
                    proc.kill()
                    await proc.wait()
            await down(cluster)
