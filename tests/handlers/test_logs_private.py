"""A long log goes to the asker alone: the last lines privately, the whole tail as a file only
they see; nothing of it in the channel."""

from __future__ import annotations

from cluster.events import LogTail
from handlers.command_context import Invocation
from handlers.errors import ChatError
from testkit.doubles import BOB, CH, RecordingChat, ScriptedControllers, running_dispatcher

TAIL = [f"INFO line {n}" for n in range(300)]


def long_tail() -> ScriptedControllers:
    return ScriptedControllers(
        logs=[LogTail(elapsed_s=0.1, node="spark-lab-0", container="vllm_lab", lines=TAIL)]
    )


async def test_a_long_log_goes_to_the_asker_alone():
    async with running_dispatcher(long_tail()) as (dispatcher, chat):
        await dispatcher.command(Invocation(BOB, CH, "logs head 300"))
        await dispatcher.idle()
    assert chat.posts == [], "nothing in the channel"
    [(user, file)] = chat.private_uploads
    assert user == BOB and file.content.splitlines() == TAIL
    [(to, reply)] = chat.private
    assert to == BOB and reply.code[-1] == "INFO line 299" and "direct messages" in reply.text


class NoDirectMessages(RecordingChat):
    async def upload_private(self, user, attachment, comment):
        raise ChatError("conversations.open: Slack answered missing_scope")


async def test_when_the_file_cannot_be_sent_the_asker_still_gets_the_last_lines():
    async with running_dispatcher(long_tail(), chat=NoDirectMessages()) as (dispatcher, chat):
        await dispatcher.command(Invocation(BOB, CH, "logs head 300"))
        await dispatcher.idle()
    [(_, reply)] = chat.private
    assert reply.code[-1] == "INFO line 299" and "could not be sent as a file" in reply.text
    assert chat.posts == []
