"""A chat that limits the bot's rate (Slack's 429) or stops answering never holds a job up: the job
runs and ends at the controller's pace, its messages follow in order once the chat takes them
again, the parent's latest state wins, and a requester whose channel keeps refusing hears the
outcome privately. Time is virtual: waits move the outboxes' clock, nothing sleeps."""

from __future__ import annotations

import asyncio
import re

import pytest

from handlers.command_context import Invocation
from handlers.dispatch import Dispatcher
from handlers.job_state import JobState
from handlers.messages import Message
from handlers.outbox import MAX_REPLIES, MERGED_LINES, Deliveries, Outbox, Timing
from handlers.settings import JobsConfig
from testkit.doubles import (
    ALICE,
    CH,
    CLUSTER,
    RefusingChat,
    ScriptedControllers,
    VirtualTime,
    failed,
    launch_passes,
    passed,
    ready,
    running_dispatcher,
)

pytestmark = pytest.mark.timeout(20)

LAUNCH_REPLIES = [f"✔ {event.title}" for event in launch_passes()] + ["✅ Ready"]
READY_FOOTER = f"✔ Ready: `{CLUSTER.serve.api_model_name}`"


def launch() -> ScriptedControllers:
    return ScriptedControllers(up=[*launch_passes(), ready()])


async def job_ended(dispatcher: Dispatcher) -> None:
    """The job has run to its end and its end is recorded (messages may still be on their way)."""
    await dispatcher.jobs.idle(chat=False)
    assert await dispatcher.store.locks() == [] and dispatcher.jobs.claim is None
    assert (await dispatcher.store.job(1)).state == JobState.SUCCEEDED


async def test_a_job_waits_for_its_parent_message_and_nothing_runs_before_the_chat_shows_it():
    chat, controllers = RefusingChat(), launch()
    chat.gate.clear()
    async with running_dispatcher(controllers, chat=chat, time=VirtualTime()) as (dispatcher, _):
        await dispatcher.command(Invocation(ALICE, CH, "up"))
        await chat.held.wait()  # the parent's post, waiting at the gate
        assert [call.operation for call in controllers.calls] == ["status"], (
            "only the start-up's look at the nodes: `up` waits for its message"
        )
        chat.gate.set()
        await job_ended(dispatcher)
        assert controllers.cleaned_up == ["status", "up"]
    assert chat.parent().footer.startswith(READY_FOOTER)


async def test_once_its_parent_is_posted_a_job_runs_to_its_end_while_the_chat_holds_every_call():
    chat, controllers = RefusingChat(), launch()
    chat.hold_after_posts(1)  # the parent goes; every later call waits at the gate
    async with running_dispatcher(controllers, chat=chat, time=VirtualTime()) as (dispatcher, _):
        await dispatcher.command(Invocation(ALICE, CH, "up"))
        await job_ended(dispatcher)
        assert controllers.cleaned_up == ["status", "up"] and not controllers.stopped_early
        assert [sent.message.title for sent in chat.posts] == ["🚀 Launch on `lab`"], (
            "the job did not wait for a single message after its parent"
        )

        chat.refuse("post", 5)  # and the chat comes back limiting the rate
        chat.refuse("update", 5)
        chat.gate.set()
        await dispatcher.idle()
    assert [sent.message.title for sent in chat.thread()] == LAUNCH_REPLIES
    assert chat.parent().footer.startswith(READY_FOOTER) and chat.parent().tone == "success"
    assert chat.refused["post"] == 5 and chat.private == []


async def test_the_final_state_reaches_the_parent_after_30_refused_edits():
    chat, time = RefusingChat(retry_after=1.0), VirtualTime()
    chat.refuse("update", 30)
    async with running_dispatcher(launch(), chat=chat, time=time) as (dispatcher, _):
        await dispatcher.command(Invocation(ALICE, CH, "up"))
        await job_ended(dispatcher)
        await dispatcher.idle()
    assert chat.refused["update"] == 30
    assert time.now() >= 30 * 1.0, "each refusal waited its Retry-After"
    parent = chat.parent()
    assert (
        parent.footer.startswith(READY_FOOTER) and parent.tone == "success" and parent.buttons == []
    )
    assert [item.state for item in parent.checklist] == ["done"] * len(parent.checklist)
    assert [sent.message.title for sent in chat.thread()] == LAUNCH_REPLIES
    assert chat.private == []


async def test_a_job_whose_parent_the_chat_never_takes_starts_nothing_and_says_so_privately():
    chat, time = RefusingChat(), VirtualTime()
    chat.refuse("post")
    controllers = ScriptedControllers(up=[passed("ssh"), failed("weights")])
    async with running_dispatcher(controllers, chat=chat, time=time) as (dispatcher, _):
        await dispatcher.command(Invocation(ALICE, CH, "up", reply_to="https://answer.example/1"))
        await dispatcher.jobs.idle(chat=False)
        assert (await dispatcher.store.job(1)).state == JobState.REFUSED
        assert await dispatcher.store.locks() == []
        await dispatcher.idle()
    assert "up" not in [call.operation for call in controllers.calls]
    assert time.now() >= dispatcher.settings.jobs.delivery_timeout and chat.posts == []
    [(user, told)] = chat.private
    assert user == ALICE and "did not start" in told.title and "untouched" in told.text


@pytest.mark.parametrize("refused", [["update"]], ids=["no edit"])
async def test_the_requester_hears_the_outcome_privately_when_the_channel_keeps_refusing(refused):
    chat, time = RefusingChat(), VirtualTime()
    for method in refused:
        chat.refuse(method)
    controllers = ScriptedControllers(up=[passed("ssh"), failed("weights")])
    async with running_dispatcher(controllers, chat=chat, time=time) as (dispatcher, _):
        await dispatcher.command(Invocation(ALICE, CH, "up"))
        await dispatcher.jobs.idle(chat=False)
        assert (
            await dispatcher.store.job(1)
        ).state == JobState.FAILED and await dispatcher.store.locks() == []
        await dispatcher.idle()
        timeout = dispatcher.settings.jobs.delivery_timeout
    [(user, outcome)] = chat.private
    assert user == ALICE and time.now() >= timeout
    assert outcome.footer.startswith("✘ Weights loaded on every rank") and outcome.tone == "failure"
    assert f"could not show this in <#{CH}>" in outcome.text and outcome.buttons == []
    if "post" in refused:
        assert chat.posts == [] and "(2 thread replies are lost)" in outcome.text
    else:
        assert [sent.message.title for sent in chat.thread()] == [
            "✔ SSH to every node",
            "✘ Weights loaded on every rank failed",
        ]


async def test_replies_beyond_the_bound_are_merged_in_order_and_a_failure_is_never_merged():
    chat = RefusingChat()
    outbox = Outbox(
        chat,
        CH,
        name="job 1",
        settings=JobsConfig(update_interval=0),
        deliveries=Deliveries(VirtualTime().timing()),
    )
    outbox.open(Message(title="🚀 Launch"))
    await outbox.drained()
    chat.gate.clear()  # the chat holds the first reply; the others wait in the outbox
    for n in range(MAX_REPLIES + 30):
        outbox.reply(Message(title=f"step {n}", text=f"detail {n}"))
        if n == 10:
            outbox.reply(Message(title="✘ failed", tone="failure"), broadcast=True)
    chat.gate.set()
    await outbox.drained()

    thread = [sent.message for sent in chat.thread()]
    assert len(thread) == MAX_REPLIES and outbox.lost == 0
    shown: list[int | str] = []
    for message in thread:
        if message.title == "✘ failed":
            shown.append("failure")
        elif message.title.endswith("held back while the chat refused messages"):
            assert message.text.count("\n") < MERGED_LINES
            shown += [int(n) for n in re.findall(r"\*step (\d+)\*: detail \1", message.text)]
        else:
            shown.append(int(message.title.removeprefix("step ")))
    assert shown == [*range(11), "failure", *range(11, MAX_REPLIES + 30)], (
        "every step, in order, the failure alone"
    )


async def test_a_one_minute_outage_of_the_chat_loses_nothing_and_reorders_nothing():
    time = VirtualTime()
    chat = RefusingChat(clock=time.now)
    chat.down_until = 60.0  # every channel call fails as when Slack's Web API is down
    async with running_dispatcher(launch(), chat=chat, time=time) as (dispatcher, _):
        await dispatcher.command(Invocation(ALICE, CH, "up"))
        await job_ended(dispatcher)
        await dispatcher.idle()
    assert time.now() >= 60.0 and chat.refused["post"] > 0, "the outage was met and waited out"
    assert [sent.message.title for sent in chat.thread()] == LAUNCH_REPLIES, (
        "late, in order, none lost"
    )
    assert chat.parent().footer.startswith(READY_FOOTER) and chat.parent().tone == "success"
    assert chat.private == [], "delivered in the channel: nothing given up"


class RealTime:
    """The real clock, and a flag raised each time an outbox starts waiting."""

    def __init__(self) -> None:
        self.waiting = asyncio.Event()

    async def sleep(self, seconds: float) -> None:
        self.waiting.set()
        await asyncio.sleep(seconds)

    def timing(self) -> Timing:
        return Timing(sleep=self.sleep)


def real_time_outbox(chat: RefusingChat, update_interval: float, time: RealTime) -> Outbox:
    """An outbox on the real clock: what it waits for, it really waits for (the tests below end
    well before any of those waits would)."""
    return Outbox(
        chat,
        CH,
        name="job 1",
        settings=JobsConfig(update_interval=update_interval),
        deliveries=Deliveries(time.timing()),
    )


async def test_a_reply_goes_at_once_while_the_parents_next_edit_waits_out_its_interval():
    chat, time = RefusingChat(), RealTime()
    outbox = real_time_outbox(chat, 60, time)
    outbox.open(Message(title="🚀 Launch"))
    await outbox.drained()
    outbox.parent(Message(title="🚀 Launch", text="1 of 5 done"))  # may go in 60 s
    await time.waiting.wait()
    outbox.reply(Message(title="✔ NCCL over RDMA"))
    try:
        async with asyncio.timeout(5):
            await chat.wait_until(lambda: len(chat.thread()) == 1)
    finally:
        await outbox.deliveries.close(within=0)
    assert chat.parent().text == "", "the edit still waits for its interval"


async def test_the_parent_shows_the_latest_state_while_a_refused_reply_waits_out_its_retry_after():
    chat = RefusingChat(retry_after=60)
    outbox = real_time_outbox(chat, 0, RealTime())
    outbox.open(Message(title="🚀 Launch"))
    await outbox.drained()
    chat.refuse("post", 1)
    outbox.reply(Message(title="✔ NCCL over RDMA"))  # refused: tried again in 60 s
    outbox.parent(Message(title="🚀 Launch", text="1 of 5 done"))
    try:
        async with asyncio.timeout(5):
            await chat.wait_until(lambda: chat.parent().text == "1 of 5 done")
    finally:
        await outbox.deliveries.close(within=0)
    assert chat.refused["post"] == 1 and chat.thread() == [], "the reply waits out its Retry-After"
