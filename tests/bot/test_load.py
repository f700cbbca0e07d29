"""Load through the Slack stand-in (Socket Mode) with the real bot and the handler doubles' cluster
(no lab): a burst of commands from many users is acknowledged, none lost or late, one job runs,
every other job is told who holds the cluster, every read is answered. How fast the acks come
(Slack's 3 s) is a speed: benchmarks/command_load.py measures it, these tests print it."""

from __future__ import annotations

import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from benchmarks.command_load import (
    JOBS,
    USERS,
    ack_figures,
    load_controllers,
    mixed_commands,
    send_spread,
)
from testkit.doubles import CLUSTER, Hold
from testkit.slack_bot import CH, GREEN, attachment_color, block_text, header, settings, slack_bot

pytestmark = pytest.mark.timeout(60)

BUSY = "Busy: one job at a time on this cluster"


async def test_fifty_commands_from_twenty_users_in_one_second(slack, tmp_path):
    for user in USERS:
        slack.add_user(user)
    hold = Hold()
    controllers = load_controllers(hold)
    commands = mixed_commands(50)
    assert len({user for user, _ in commands}) == 20
    async with slack_bot(
        slack, CLUSTER, settings(tmp_path, operators=tuple(USERS)), controllers=controllers
    ):
        await slack.wait_for_connection()
        # the first `up` takes the lock; the other 49 follow, spread over a second (on a busy
        # machine the burst may take longer to send: its shape, not what is asserted)
        [first] = await send_spread(slack, commands[:1], 0)
        await hold.reached.wait()
        rest = await send_spread(slack, commands[1:], 1)
        acks = [first, *rest]
        sent_within = max(a.sent_at for a in acks) - first.sent_at

        kinds = Counter(text.split()[0] for _, text in commands)
        busy_expected = sum(n for kind, n in kinds.items() if kind in JOBS) - 1
        reads_expected = kinds["status"] + kinds["logs"]

        def shown(title: str) -> list[dict]:
            return [e for e in slack.ephemerals() if e.get("blocks") and header(e) == title]

        await slack.wait_until(
            lambda: (
                len(shown(BUSY)) >= busy_expected
                and len([e for e in slack.ephemerals() if e["source"] == "response_url"])
                >= busy_expected + reads_expected
            ),
            45,
        )
        busy = shown(BUSY)
        holder = {
            re.search(r"Job #\d+ `/spark up` by <@(\w+)>", block_text(e)).group(1) for e in busy
        }
        statuses = shown(f"Status of `{CLUSTER.name}`")
        logs = [
            e
            for e in slack.ephemerals()
            if e.get("blocks") and header(e).startswith("Last 20 lines")
        ]
        hold.release.set()
        launch = slack.calls("chat.postMessage")[0]
        await slack.wait_until(
            lambda: attachment_color(slack.message(CH, launch.result["ts"])) == GREEN
        )

    figures = ack_figures(acks)
    print(
        f"\n50 commands, 20 users, sent within {sent_within:.3f} s: ack p50 {figures['p50'] * 1000:.1f} ms, "
        f"p99 {figures['p99'] * 1000:.1f} ms, max {figures['max'] * 1000:.1f} ms"
    )
    assert len(acks) == 50 and not slack.late_acks, "every command acknowledged, none lost"
    assert [c.operation for c in controllers.calls].count("up") == 1, "exactly one up runs"
    assert not {"down", "bench", "verify"} & {c.operation for c in controllers.calls}
    assert len(busy) == busy_expected and holder == {USERS[0]}, (
        "every other job is told who holds the cluster"
    )
    assert len(statuses) == kinds["status"] and len(logs) == kinds["logs"], "every read is answered"
    help_acks = [a for a, (_, text) in zip(acks, commands, strict=True) if text == "help"]
    assert len(help_acks) == kinds["help"] and all("/spark up" in str(a.payload) for a in help_acks)
    assert len([m for m in slack.messages(CH) if "Launch" in header(m)]) == 1


def test_the_load_benchmark_runs():
    """benchmarks/command_load.py, shortened to 50 status commands in 2 s, so it cannot rot. Its
    goal (every ack within Slack's 3 s: exit 1 when missed) is the benchmark's verdict on this
    machine at this moment, not this test's: a run that missed it still ran."""
    script = Path(__file__).resolve().parents[2] / "benchmarks" / "command_load.py"
    done = subprocess.run(
        [sys.executable, str(script), "--seconds", "2", "--status", "50"],
        capture_output=True,
        text=True,
        timeout=180,  # a hang guard: ~10 s alone, over 50 s at load 17
    )
    out = done.stdout
    missed = re.search(r"^goal missed: (\d+) command", out, re.M)
    assert done.returncode == (1 if missed else 0), done.stderr
    rows = [line for line in out.splitlines() if re.match(r"^(50 mixed|50 status)", line)]
    assert len(rows) == 2, out
    late = 0
    for row in rows:
        figures = re.search(
            r"\s50\s+[\d.]+ms\s+[\d.]+ms\s+[\d.]+ms\s+(\d+)\s+[\d.]+ms\s+[\d.]+s$", row
        )
        assert figures, row
        late += int(figures[1])
    assert late == (int(missed[1]) if missed else 0), out
