"""Slack faults through the stand-in with the real bot and the handler doubles' cluster (no lab):
the Web API answering 5xx while a job runs, and the Socket Mode connection dropped while commands
are being sent."""

from __future__ import annotations

import asyncio
from collections import Counter

import pytest

from benchmarks.command_load import send_spread
from cluster.events import LogTail
from testkit.doubles import CLUSTER, Hold, ScriptedControllers, launch_passes, ready
from testkit.slack_bot import (
    ALICE,
    BOB,
    CH,
    GREEN,
    attachment_color,
    block_text,
    header,
    settings,
    slack_bot,
)
from testkit.slack_standin import SlackStandIn

pytestmark = pytest.mark.timeout(60)


def replies_named(slack: SlackStandIn, thread: str, title: str) -> list[dict]:
    return [r for r in slack.thread(CH, thread) if r.get("blocks") and title in header(r)]


async def test_server_errors_during_a_job_lose_no_reply_and_the_message_ends_green(slack, tmp_path):
    passes = launch_passes()
    hold = Hold()
    controllers = ScriptedControllers(up=[*passes[:2], hold, *passes[2:], ready()])
    async with slack_bot(slack, CLUSTER, settings(tmp_path), controllers=controllers):
        await slack.send_slash_command(ALICE, CH, "up")
        await hold.reached.wait()
        launch = await slack.wait_for_call("chat.postMessage", 5)
        # the next reply and the next two updates are answered 500/503 once each, as a Slack
        # outage of a few seconds would: within what the client retries (2 server errors a call)
        slack.fail("chat.postMessage", status=500)
        slack.fail("chat.update", status=503, times=2)
        hold.release.set()
        thread = launch.result["ts"]
        await slack.wait_until(lambda: attachment_color(slack.message(CH, thread)) == GREEN, 20)
    failed = [c for c in slack.calls() if c.status >= 500]
    assert Counter((c.method, c.status) for c in failed) == {
        ("chat.postMessage", 500): 1,
        ("chat.update", 503): 2,
    }
    for event in passes:
        assert len(replies_named(slack, thread, event.title)) == 1, (
            f"{event.title}: one reply, not lost, not doubled"
        )
    final = slack.message(CH, thread)
    assert "✅ Sample completion" in block_text(final) and "Ready" in str(final["attachments"]), (
        "its final state"
    )


async def test_a_dropped_connection_while_commands_are_sent_loses_none_and_runs_none_twice(
    slack, tmp_path
):
    tail = LogTail(
        elapsed_s=0.0, node=CLUSTER.head.name, container=CLUSTER.container.name, lines=["INFO up"]
    )
    controllers = ScriptedControllers(logs=[tail])
    commands = [(ALICE if n % 2 else BOB, f"logs head {n}") for n in range(10, 40)]
    async with slack_bot(slack, CLUSTER, settings(tmp_path), controllers=controllers):
        first = await slack.wait_for_connection()

        # each third of the commands goes out while one socket is the newest: the first while
        # it is dropped abruptly (no disconnect message), the second on the socket the bot
        # opened again, the last after Slack's refresh (`disconnect`: a new socket, then the old
        # one goes); each phase starts on the event that ends the one before
        async def first_third() -> list:
            return await send_spread(slack, commands[:10], 0.5)

        sending = asyncio.create_task(first_third())
        await slack.wait_until(lambda: len(slack.acks) >= 8)
        await slack.close_connections()
        second = await slack.wait_for_connection(2)
        acks = await sending
        acks += await send_spread(slack, commands[10:20], 0.5)
        await slack.disconnect("refresh_requested")
        await slack.wait_for_connection(3)
        await slack.wait_for_closed(second)
        acks += await send_spread(slack, commands[20:], 0.5)
        await slack.wait_until(
            lambda: [c.operation for c in controllers.calls].count("logs") >= len(commands), 30
        )
    assert first.closed_at is not None and len({a.connection_id for a in acks}) == 3, (
        "sent across three sockets"
    )
    assert len(acks) == len(commands), "every command acknowledged (none lost: no AckTimeout)"
    ran = Counter(call.options["lines"] for call in controllers.calls if call.operation == "logs")
    assert ran == Counter(range(10, 40)), "each command ran exactly once"
    assert not slack.late_acks


def logs_ran(controllers: ScriptedControllers) -> list[int]:
    return [c.options["lines"] for c in controllers.calls if c.operation == "logs"]


async def test_an_ack_whose_connection_drops_under_it_goes_out_on_the_next_one(slack, tmp_path):
    # the lenient reading (Slack takes an ack on another connection; undocumented), which the
    # stand-in takes only when told to
    slack.ack_on_any_connection = True
    tail = LogTail(
        elapsed_s=0.0, node=CLUSTER.head.name, container=CLUSTER.container.name, lines=["INFO up"]
    )
    controllers = ScriptedControllers(logs=[tail] * 3)
    async with slack_bot(slack, CLUSTER, settings(tmp_path), controllers=controllers):
        first = await slack.wait_for_connection()
        acks = [
            await slack.send_slash_command(ALICE, CH, f"logs head {n}", drop_after_send=True)
            for n in (11, 12, 13)
        ]
        await slack.wait_until(lambda: len(logs_ran(controllers)) == 3)
    assert first.closed_at is not None
    assert [a.connection_id for a in acks] == [c.id for c in slack.connections[1:4]], (
        "each acknowledged on the connection the bot opened after the one that dropped"
    )
    assert logs_ran(controllers) == [11, 12, 13], "each ran once"
    assert not slack.late_acks


async def test_a_bad_gateway_on_the_final_update_still_ends_the_message_green(slack, tmp_path):
    hold = Hold()
    controllers = ScriptedControllers(up=[*launch_passes(), hold, ready()])
    async with slack_bot(slack, CLUSTER, settings(tmp_path), controllers=controllers) as bot:
        await slack.send_slash_command(ALICE, CH, "up")
        await hold.reached.wait()
        launch = await slack.wait_for_call("chat.postMessage", 5)
        slack.fail("chat.update", status=502)
        hold.release.set()
        await bot.dispatcher.idle()
    assert attachment_color(slack.message(CH, launch.result["ts"])) == GREEN
