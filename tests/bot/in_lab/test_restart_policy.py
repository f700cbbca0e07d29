"""The restart policy end to end: Bolt's real client on the Slack stand-in, the lab cluster
behind, an engine that dies a few seconds after it serves (every launch of it)."""

from __future__ import annotations

import sqlite3

import pytest

from cluster.config import RestartPolicy
from testkit.lab_cluster import FAST, cluster_for
from testkit.slack_bot import ALICE, CH, down, header, settings, slack_bot

pytestmark = [pytest.mark.lab, pytest.mark.timeout(240)]


async def test_a_late_engine_death_is_relaunched_once_then_the_maximum_stops_it(
    slack, lab, tmp_path
):
    cluster = cluster_for(
        lab,
        env={"SPARK_EMU_FAULT": "late_engine_death", "SPARK_EMU_FAULT_AFTER_S": "4"},
        timeouts=FAST,
        restart=RestartPolicy(max=1, within=3600),
    )
    await down(cluster)
    try:
        async with slack_bot(slack, cluster, settings(tmp_path)):
            await slack.send_slash_command(ALICE, CH, "up")
            stopped = await slack.wait_for(
                lambda c: c.method == "chat.postMessage" and header(c) == "🛑 Not restarting", 150
            )
            posts = [c for c in slack.calls("chat.postMessage") if c.ok]
    finally:
        await down(cluster)

    launch = posts[0]
    thread = launch.result["ts"]
    assert "thread_ts" not in launch.params and stopped.params["thread_ts"] == thread
    in_thread = [header(c) for c in posts if c.params.get("thread_ts") == thread]
    first_death = in_thread.index("✘ Serving failed")
    restart = in_thread.index("🔁 Restart 1 of 1 within 1h of `lab`")
    assert first_death < restart < len(in_thread) - 1
    # the relaunch's checkpoints and its Ready in the same thread, then the second death
    assert in_thread.count("✅ Ready") == 2
    assert in_thread.count("✘ Serving failed") == 2
    assert in_thread[-1] == "🛑 Not restarting"
    assert "already restarted 1 time(s) within 1h" in str(stopped.params)
    with sqlite3.connect(tmp_path / "spark-bot.db") as db:
        audit = db.execute("SELECT command, outcome FROM audit").fetchall()
        assert db.execute("SELECT * FROM locks").fetchall() == []
    assert ("restart", "succeeded") in audit
    assert sum(1 for c, o in audit if c == "watch" and o.startswith("failed")) == 2
    assert any(c == "restart" and o.startswith("not restarted") for c, o in audit)
