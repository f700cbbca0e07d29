"""Slack answering 429 to a third of a job's calls: the bot's real Web API client on the Slack
stand-in, the handler doubles' cluster. The job's message still ends in its final state, every
thread reply arrives once and in order, and each 429's Retry-After is waited (on the outboxes'
virtual clock: the test spends no real seconds on them)."""

from __future__ import annotations

import pytest

from testkit.doubles import CLUSTER, ScriptedControllers, VirtualTime, launch_passes, ready
from testkit.slack_bot import (
    ALICE,
    CH,
    GREEN,
    attachment_color,
    attachment_text,
    block_text,
    header,
    settings,
    slack_bot,
)

pytestmark = pytest.mark.timeout(30)

JOB_CALLS = ["chat.postMessage", "chat.update"]


async def test_a_launch_under_429s_to_a_third_of_its_calls_ends_final_with_every_reply_in_order(
    slack, tmp_path
):
    time = VirtualTime()
    controllers = ScriptedControllers(up=[*launch_passes(), ready()])
    async with slack_bot(slack, CLUSTER, settings(tmp_path), controllers=controllers) as bot:
        bot.dispatcher.jobs.deliveries.timing = time.timing()
        slack.rate_limit_share(3, JOB_CALLS, retry_after=1)
        await slack.send_slash_command(ALICE, CH, "up")
        # leaving waits until the job has ended and its outbox has delivered everything

    [parent] = slack.messages(CH)
    assert header(parent) == f"🚀 Launch on `{CLUSTER.name}`"
    assert attachment_color(parent) == GREEN and attachment_text(parent).startswith("✔ Ready")
    assert "⏳" not in block_text(parent) and not any(
        b["type"] == "actions" for b in parent["blocks"]
    )
    assert [header(reply) for reply in parent["replies"]] == (
        [f"✔ {event.title}" for event in launch_passes()] + ["✅ Ready"]
    )

    refused = [call for call in slack.calls() if call.status == 429]
    job_calls = [call for call in slack.calls() if call.method in JOB_CALLS]
    assert len(refused) == len(job_calls) // 3 >= 5
    # each method is retried apart: after each of its 429s, a second of the outbox's clock goes by
    most_refused = max(sum(call.method == method for call in refused) for method in JOB_CALLS)
    assert time.now() >= most_refused * 1.0, "Retry-After honoured"
    assert slack.ephemerals() == [], "nothing needed saying privately"
