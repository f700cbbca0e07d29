"""The bot process SIGKILLed in every phase of `up` and started again (issue 10's matrix, bot
faults): the job's record, the lock and the thread are recovered, the state reconciled, the watch
resumed when containers run, nothing posted twice, and no failure left unreported.

What the product does with a launch interrupted before Ready (README: "a crashed bot's lock is
released and the state reconciled at start-up"): it does not finish nor undo the launch. Its
containers are left as they are; when they all run, the launching job's thread watches them, so a
server that comes up is watched and one that never does is reported there (the API did not
answer in the time a start-up may take). The database is SQLite in WAL mode: after each SIGKILL,
the restarted bot opens it and the test reads it back (integrity, the job's committed record).
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import sqlite3
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import pytest
import yaml

from cluster.config import Secrets
from cluster.controller import Controller
from testkit.lab_cluster import cluster_for, collect
from testkit.slack_bot import (
    ALICE,
    CH,
    GREEN,
    RED,
    attachment_color,
    block_text,
    containers_present,
    down,
    header,
    settings,
)
from testkit.slack_standin import SlackStandIn
from tests.cluster.test_faults import lab_docker_kill

pytestmark = [pytest.mark.lab, pytest.mark.timeout(180)]

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def start_bot(config_path: Path, slack: SlackStandIn) -> asyncio.subprocess.Process:
    env = {**os.environ, "SLACK_BOT_TOKEN": slack.bot_token, "SLACK_APP_TOKEN": slack.app_token}
    # the child keeps its own copy of the log's descriptor: ours is closed once it has started
    with open(config_path.with_suffix(".log"), "ab") as log:
        return await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "bot.cli",
            "run",
            "--config",
            str(config_path),
            cwd=ROOT,
            env=env,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=log,
        )


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


async def serving(cluster) -> None:
    """Until the API answers (a server still loading its weights says nothing when it is done)."""
    controller = Controller(cluster, Secrets({}))
    while True:
        [status] = await collect(controller.status())
        if status.api_healthy:
            return
        await asyncio.sleep(0.5)


def reply(words: str):
    """A reply in a thread whose header holds `words` (a checkpoint's passed or warned)."""
    return lambda c: (
        c.method == "chat.postMessage" and "thread_ts" in c.params and words in header(c)
    )


def parent_post(c) -> bool:
    return (
        c.method == "chat.postMessage"
        and "thread_ts" not in c.params
        and header(c).startswith("🚀")
    )


@dataclass(frozen=True)
class Phase:
    id: str
    kill_when: str  # the reply the bot has just posted when it is killed ("green": its job ended)
    env: dict
    running_after: bool  # the containers run when the bot comes back
    serves: bool  # ... and the API answers (else the watch reports that it never did)
    timeouts: dict | None = None


PHASES = [
    # killed at preflight's first checkpoint: nothing is started yet
    Phase("preflight", "✔ SSH to every node", {}, running_after=False, serves=False),
    # the launch stops before Ray and `vllm serve`: containers idle, the API never answers; a
    # short start-up allowance (weights + engine + api) so the watch says so within seconds
    Phase(
        "containers",
        "✔ Containers started",
        {},
        running_after=True,
        serves=False,
        timeouts={"weights": 3, "engine": 3, "api": 3},
    ),
    # NCCL is up and `vllm serve` runs; slowed so the restart lands while the weights load and
    # the server comes up on its own
    Phase(
        "weights",
        "NCCL over RDMA",
        {"SPARK_EMU_FAULT": "slow_start", "SPARK_EMU_TIME_SCALE": "0.03"},
        running_after=True,
        serves=True,
    ),
    # the job has ended green and its watch runs
    Phase("ready", "green", {}, running_after=True, serves=True),
]


@pytest.mark.parametrize("phase", PHASES, ids=[p.id for p in PHASES])
async def test_sigkill_in_a_phase_of_up_then_restart(lab, tmp_path, phase):
    cluster = cluster_for(lab, env=phase.env, timeouts=phase.timeouts)
    await down(cluster)
    port = free_port()
    store = tmp_path / "spark-bot.db"
    first = second = None
    async with SlackStandIn() as slack:
        data = {
            "cluster": cluster.model_dump(mode="json"),
            **settings(tmp_path).model_dump(mode="json"),
            "slack": {"port": port, "host": "127.0.0.1", "api_url": slack.api_url},
        }
        config_path = tmp_path / "bot.yaml"
        config_path.write_text(yaml.safe_dump(data))
        try:
            first = await start_bot(config_path, slack)
            await asyncio.wait_for(healthy(port, first), 30)
            await slack.send_slash_command(ALICE, CH, "up")
            parent = await slack.wait_for(parent_post, 30)
            parent_ts = parent.result["ts"]
            if phase.kill_when == "green":
                await slack.wait_until(
                    lambda: attachment_color(slack.message(CH, parent_ts)) == GREEN, 60
                )
            else:
                await slack.wait_for(reply(phase.kill_when), 60)
            first.send_signal(signal.SIGKILL)  # a crash: no cleanup, the lock stays in SQLite
            await first.wait()

            mark = slack.last_seq()
            second = await start_bot(config_path, slack)
            await asyncio.wait_for(healthy(port, second), 30)
            interrupted = phase.kill_when != "green"
            expected = (
                "⚠ The bot restarted during this job"
                if interrupted
                else "👀 Watching again after a bot restart"
            )
            note = await slack.wait_for(
                lambda c: c.method == "chat.postMessage" and header(c) == expected, 60, after=mark
            )
            assert note.params["thread_ts"] == parent_ts, (
                "the note is in the launching job's thread"
            )
            if interrupted:
                assert "The lock is released" in block_text(note)
                assert ("Watching it again" in block_text(note)) is phase.running_after
                # the parent's new state follows the note through the job's outbox
                await slack.wait_for(
                    lambda c: (
                        c.method == "chat.update"
                        and c.params.get("ts") == parent_ts
                        and "Interrupted" in str(c.params.get("attachments"))
                    ),
                    30,
                    after=mark,
                )
            present = await containers_present(cluster)
            assert present == ([n.name for n in cluster.nodes] if phase.running_after else []), (
                present
            )

            # The store after the SIGKILL: it opens, it is whole, and it kept the job as committed.
            with sqlite3.connect(store) as db:
                assert db.execute("PRAGMA journal_mode").fetchone() == ("wal",)
                assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)
                jobs = db.execute("SELECT command, state, ts FROM jobs").fetchall()
                assert jobs == [("up", "interrupted" if interrupted else "succeeded", parent_ts)], (
                    jobs
                )
                assert db.execute("SELECT * FROM locks").fetchall() == [], "the lock is released"
                watched = db.execute("SELECT job_id FROM watches").fetchall()

            if phase.running_after and phase.serves:
                assert watched, "the running cluster is watched again"
                await asyncio.wait_for(serving(cluster), 60)
                assert not [c for c in slack.calls("chat.postMessage") if reply("✘")(c)], (
                    "no false alarm while the server was still starting"
                )
                # The watch resumed in the launching job's thread: the worker's death is reported.
                await lab_docker_kill(lab, 1, cluster.container.name)
                alarm = await slack.wait_for(
                    lambda c: reply("✘")(c) and c.params["thread_ts"] == parent_ts, 60, after=mark
                )
                assert "while serving" in block_text(alarm) and "spark-lab-1" in block_text(alarm)
            elif phase.running_after:
                # Containers that never serve: reported in the thread once the start-up allowance ran out.
                alarm = await slack.wait_for(
                    lambda c: reply("✘")(c) and c.params["thread_ts"] == parent_ts, 60, after=mark
                )
                assert "has not answered since the watch began" in block_text(alarm)
            else:
                assert watched == [] and "absent" in block_text(note)
                alarm = None
            if alarm is not None:
                assert (
                    alarm.params["reply_broadcast"] is True
                    and f"<@{ALICE}>" in alarm.params["text"]
                )
                await slack.wait_until(
                    lambda: attachment_color(slack.message(CH, parent_ts)) == RED, 10
                )

            posts = Counter(
                (c.params["channel"], c.params.get("thread_ts"), block_text(c))
                for c in slack.calls("chat.postMessage")
            )
            assert [post for post, count in posts.items() if count > 1] == [], (
                "nothing is posted twice"
            )
            second.send_signal(signal.SIGTERM)
            assert await asyncio.wait_for(second.wait(), 30) == 0
        finally:
            for proc in (first, second):
                if proc is not None and proc.returncode is None:
                    proc.kill()
                    await proc.wait()
            await down(cluster)
