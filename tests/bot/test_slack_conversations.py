"""Every answer reaches its asker in every kind of conversation Slack lets a command be typed in,
or the asker is told why not: on the stand-in that refuses what Slack refuses (a bot that posts
where it is not a member, an ephemeral into a conversation the bot cannot see). The cluster is
a script (ScriptedControllers); Slack is Bolt's real clients against the stand-in."""

from __future__ import annotations

import pytest

from handlers.settings import AccessConfig
from testkit.doubles import (
    CLUSTER,
    Hold,
    ScriptedControllers,
    launch_passes,
    ready,
    status_report,
)
from testkit.slack_bot import (
    ALICE,
    BOB,
    CH,
    GREEN,
    attachment_color,
    block_text,
    header,
    private_answer,
    private_answers,
    settings,
    slack_bot,
)
from testkit.slack_standin import IM, PRIVATE, PUBLIC, SlackStandIn

pytestmark = pytest.mark.timeout(60)

NOT_IN = "C0NOTINVITED"  # a public channel nobody invited the bot to
PRIVATE_CH = "C0PRIVOPS"  # a private channel the bot is in
PEOPLE_DM = "D0ALICEBOB"  # Alice and Bob's DM: no place of the bot's
STATUS = f"Status of `{CLUSTER.name}`"
EVERYWHERE = {"users": ["*"], "channels": ["*"], "direct_messages": True}


def wide_settings(tmp_path):
    """Anyone reads and operates anywhere the access rules can name, DMs with the bot included."""
    base = settings(tmp_path)
    access = AccessConfig.model_validate({"read": EVERYWHERE, "operate": EVERYWHERE})
    return base.model_copy(update={"access": access})


def conversations(slack: SlackStandIn) -> dict[str, str]:
    slack.add_conversation(NOT_IN, PUBLIC, "random", bot_member=False)
    slack.add_conversation(PRIVATE_CH, PRIVATE, "private-ops", members=[ALICE, BOB])
    slack.add_conversation(PEOPLE_DM, IM, members=[ALICE, BOB], bot_member=False)
    return {
        "not invited": NOT_IN,
        "private": PRIVATE_CH,
        "bot dm": slack.bot_dm(ALICE),
        "people dm": PEOPLE_DM,
    }


@pytest.mark.parametrize("where", ["not invited", "private", "bot dm"])
async def test_status_reaches_the_asker_where_the_bot_is_no_member_too(slack, tmp_path, where):
    controllers = ScriptedControllers()
    channel = conversations(slack)[where]
    async with slack_bot(slack, CLUSTER, wide_settings(tmp_path), controllers=controllers):
        await slack.send_slash_command(ALICE, channel, "status")
        answer = await private_answer(slack, ALICE, STATUS)
    assert answer["channel"] == channel or answer["source"] == "direct message"
    refused = [c for c in slack.calls() if c.error]
    assert refused == [], [(c.method, c.error) for c in refused]


@pytest.mark.parametrize("where", ["not invited", "private", "bot dm"])
async def test_help_reaches_the_asker_in_every_conversation(slack, tmp_path, where):
    channel = conversations(slack)[where]
    async with slack_bot(slack, CLUSTER, wide_settings(tmp_path)):
        ack = await slack.send_slash_command(ALICE, channel, "help")
    assert ack.payload["text"].startswith("/spark: run the vLLM cluster from here")
    assert not ack.refused


@pytest.mark.parametrize("command", ["status", "help", "up"])
async def test_a_dm_between_people_is_refused_with_where_to_go_instead(slack, tmp_path, command):
    controllers = ScriptedControllers()
    channel = conversations(slack)["people dm"]
    async with slack_bot(slack, CLUSTER, wide_settings(tmp_path), controllers=controllers):
        ack = await slack.send_slash_command(ALICE, channel, command)
    assert ack.payload is not None and "between people" in ack.payload["text"] + str(
        ack.payload["blocks"]
    )
    assert "up" not in [call.operation for call in controllers.calls]
    assert not slack.calls("chat.postMessage") and not slack.calls("chat.postEphemeral")


async def test_up_where_the_bot_is_not_invited_starts_nothing_and_says_how_to_fix_it(
    slack, tmp_path
):
    controllers = ScriptedControllers(up=[*launch_passes(), ready()])
    async with slack_bot(slack, CLUSTER, wide_settings(tmp_path), controllers=controllers):
        channel = conversations(slack)["not invited"]
        await slack.send_slash_command(ALICE, channel, "up")
        told = await private_answer(slack, ALICE, timeout=20)
    assert header(told).startswith("✘ `/spark up` did not start")
    text = block_text(told)
    assert "not_in_channel" in text and "/invite @spark-bot" in text and "untouched" in text
    assert "up" not in [call.operation for call in controllers.calls], "the cluster untouched"
    assert slack.messages(channel) == []


async def test_up_in_a_private_channel_the_bot_is_in_runs_as_in_any_channel(slack, tmp_path):
    controllers = ScriptedControllers(up=[*launch_passes(), ready()])
    async with slack_bot(slack, CLUSTER, wide_settings(tmp_path), controllers=controllers):
        channel = conversations(slack)["private"]
        await slack.send_slash_command(ALICE, channel, "up")
        parent = await slack.wait_for(lambda c: c.method == "chat.postMessage" and c.ok)
        await slack.wait_until(
            lambda: attachment_color(slack.message(channel, parent.result["ts"])) == GREEN
        )
    assert parent.params["channel"] == channel


@pytest.mark.parametrize("where", ["not invited", "bot dm"])
async def test_a_busy_reply_reaches_the_asker_wherever_they_asked(slack, tmp_path, where):
    hold = Hold()
    controllers = ScriptedControllers(up=[hold])
    async with slack_bot(slack, CLUSTER, wide_settings(tmp_path), controllers=controllers):
        channel = conversations(slack)[where]
        await slack.send_slash_command(BOB, CH, "up")
        await hold.reached.wait()
        await slack.send_slash_command(ALICE, channel, "verify")
        busy = await private_answer(slack, ALICE, "Busy: one job at a time on this cluster")
        hold.release.set()
    assert f"`/spark up` by <@{BOB}>" in block_text(busy)


@pytest.mark.parametrize("where", ["not invited", "bot dm"])
async def test_a_confirmation_is_asked_and_answered_wherever_the_asker_is(slack, tmp_path, where):
    controllers = ScriptedControllers(status=[status_report(running=True)], down=[])
    async with slack_bot(slack, CLUSTER, wide_settings(tmp_path), controllers=controllers):
        channel = conversations(slack)[where]
        await slack.send_slash_command(ALICE, channel, "down")
        question = await private_answer(slack, ALICE, "Confirm")
        answered = len(private_answers(slack, ALICE))
        await slack.click_button(ALICE, channel, question["ts"], "spark_confirm")
        if where == "bot dm":  # the job runs there, in the bot's own conversation
            job = await slack.wait_for(lambda c: c.method == "chat.postMessage" and c.ok)
            ts = job.result["ts"]
            await slack.wait_until(lambda: attachment_color(slack.message(channel, ts)) == GREEN)
            assert "down" in [call.operation for call in controllers.calls]
        else:  # the confirmed job cannot show itself there: the click's answer says so
            told = await private_answer(slack, ALICE, after=answered)
            assert header(told).startswith("✘ `/spark down` did not start")
            assert "down" not in [call.operation for call in controllers.calls]


async def test_a_replys_file_shows_in_the_thread_before_the_next_reply(slack, tmp_path):
    # Slack shares an upload after files.completeUploadExternal returns (the stand-in: 0.2 s
    # later): a reply posted at once would come before the file it follows
    first, *rest = launch_passes()
    long_log = [f"INFO line {n} " + "x" * 100 for n in range(60)]  # over a message: a file
    controllers = ScriptedControllers(
        up=[first.model_copy(update={"log_tail": long_log}), *rest, ready()]
    )
    async with slack_bot(slack, CLUSTER, settings(tmp_path), controllers=controllers):
        await slack.send_slash_command(ALICE, CH, "up")
        parent = await slack.wait_for(lambda c: c.method == "chat.postMessage" and c.ok)
        ts = parent.result["ts"]
        await slack.wait_until(lambda: attachment_color(slack.message(CH, ts)) == GREEN)
    thread = [m for m in slack.seen_by(ALICE) if m.get("thread_ts") == ts]
    with_file = next(i for i, m in enumerate(thread) if m.get("files"))
    assert header(thread[with_file - 1]).startswith(f"✔ {first.title}"), "its file after it"
    assert header(thread[with_file + 1]).startswith(f"✔ {rest[0].title}"), "the next one after"
