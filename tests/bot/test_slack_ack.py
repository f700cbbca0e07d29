"""Slack wants every command acknowledged within 3 s: the bot acknowledges before it touches its
database, so another program holding the database delays nothing the user sees first, and a
command the bot cannot record is answered, never dropped. The tests show the acks come while the
database is held (the event); how fast they come is benchmarks/command_load.py's figure. The
cluster is the handler doubles' (no lab)."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from testkit.doubles import CLUSTER, Hold, ScriptedControllers, status_report
from testkit.slack_bot import (
    ALICE,
    CH,
    GREEN,
    attachment_color,
    header,
    private_answer,
    settings,
    slack_bot,
)
from testkit.slack_standin import SlackStandIn

pytestmark = pytest.mark.timeout(30)


@contextmanager
def database_held(path: Path) -> Iterator[None]:
    """Another program writing the bot's database: nobody else can write until it lets go."""
    other = sqlite3.connect(path, isolation_level=None)
    other.execute("BEGIN EXCLUSIVE")
    try:
        yield
    finally:
        other.execute("ROLLBACK")
        other.close()


def header_of(slack: SlackStandIn, method: str, title: str):
    return lambda: next((c for c in slack.calls(method) if header(c) == title), None)


async def test_commands_are_acknowledged_while_the_database_is_held_and_run_after(slack, tmp_path):
    hold = Hold()
    controllers = ScriptedControllers(verify=[hold])
    bot_settings = settings(tmp_path)
    async with slack_bot(slack, CLUSTER, bot_settings, controllers=controllers):
        with database_held(bot_settings.store.path):
            # each returns once the bot acknowledged, the database still held (an ack that waited
            # for it would never come: AckTimeout); Slack's 3 s is benchmarks/command_load.py's
            help_ack = await slack.send_slash_command(ALICE, CH, "help")
            status_ack = await slack.send_slash_command(ALICE, CH, "status")
            verify_ack = await slack.send_slash_command(ALICE, CH, "verify")
            cancel_ack = await slack.send_slash_command(ALICE, CH, "cancel")
        assert help_ack.payload["text"].startswith("/spark: run the vLLM cluster from here")
        assert status_ack.payload is None and verify_ack.payload is None
        assert cancel_ack.payload["text"].startswith("Nothing to cancel"), (
            "the verify job could not be recorded yet"
        )

        await private_answer(slack, ALICE, f"Status of `{CLUSTER.name}`")
        await hold.reached.wait()  # the verify job runs
        hold.release.set()
        verify = await slack.wait_until(
            header_of(slack, "chat.postMessage", f"🔍 Verify `{CLUSTER.name}`")
        )
        await slack.wait_until(
            lambda: attachment_color(slack.message(CH, verify.result["ts"])) == GREEN
        )


async def test_a_job_the_database_cannot_record_is_refused_aloud_and_an_answer_still_comes(
    slack, tmp_path
):
    controllers = ScriptedControllers()
    bot_settings = settings(tmp_path)
    async with slack_bot(slack, CLUSTER, bot_settings, controllers=controllers):
        with database_held(bot_settings.store.path):
            await slack.send_slash_command(ALICE, CH, "verify")
            await slack.send_slash_command(ALICE, CH, "status")
            refusal = await private_answer(
                slack, ALICE, "✘ `/spark verify` did not start", timeout=10
            )
            await private_answer(slack, ALICE, f"Status of `{CLUSTER.name}`")
    assert "could not record the job in its database (database is locked)" in str(refusal)
    assert "verify" not in [call.operation for call in controllers.calls], "nothing started"
    assert not slack.calls("chat.postMessage"), "no job message"


async def test_the_bot_connects_and_acknowledges_while_its_start_up_check_waits_for_the_nodes(
    slack, tmp_path
):
    nodes = Hold()  # the nodes answer the start-up reconciliation's status only when released
    controllers = ScriptedControllers(status=[nodes, status_report()], verify=[])
    async with slack_bot(slack, CLUSTER, settings(tmp_path), controllers=controllers):
        await nodes.reached.wait()
        await slack.wait_for_connection()
        help_ack = await slack.send_slash_command(ALICE, CH, "help")
        verify_ack = await slack.send_slash_command(ALICE, CH, "verify")
        # both acknowledged (else AckTimeout) while the start-up check still waits for the nodes
        assert help_ack.payload["text"].startswith("/spark: run the vLLM cluster from here")
        assert verify_ack.payload is None
        assert not slack.calls("chat.postMessage"), (
            "a job waits until the locks of an earlier run are settled"
        )
        nodes.release.set()
        verify = await slack.wait_until(
            header_of(slack, "chat.postMessage", f"🔍 Verify `{CLUSTER.name}`")
        )
        await slack.wait_until(
            lambda: attachment_color(slack.message(CH, verify.result["ts"])) == GREEN
        )
