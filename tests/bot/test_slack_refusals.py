"""Every refusal the bot can meet from Slack (the stand-in's fidelity extract, `BOT_MEETS`)
becomes one of the chat's own errors: a refusal no retry changes is `ChatRefused` with what a
person can do about it, the rest `ChatError`; never a library's exception. A private answer
refused in its channel still reaches the asker, in their DM with the bot."""

from __future__ import annotations

import pytest

from bot.slack import REFUSALS, SlackChat, make_client
from handlers.chat import Posted
from handlers.errors import ChatError, ChatRefused
from handlers.messages import Attachment, Message
from testkit.slack_bot import ALICE, CH, private_answers
from tests.testkit.slack_standin.test_fidelity import BOT_MEETS

pytestmark = pytest.mark.timeout(30)

MESSAGE = Message(title="Status", text="all well")


async def call(chat: SlackChat, method: str, slack) -> None:
    """The Chat port's call that makes `method` (Slack's Web API) first."""
    if method == "chat.postMessage":
        await chat.post(CH, MESSAGE)
    elif method == "chat.update":
        posted = await chat.post(CH, MESSAGE)
        await chat.update(posted, MESSAGE)
    elif method == "chat.getPermalink":
        await chat.permalink(Posted(CH, "1.000001"))
    elif method == "conversations.open":
        await chat.upload_private(ALICE, Attachment(filename="a.log", title="a", content="x"), "")
    else:  # the two steps of an upload
        posted = await chat.post(CH, MESSAGE)
        await chat.upload(CH, posted.ts, Attachment(filename="a.log", title="a", content="x"), "")


REFUSED_CALLS = sorted(
    (method, code)
    for method, codes in BOT_MEETS.items()
    for code in codes
    if method not in {"conversations.info", "chat.postEphemeral"} and code != "ratelimited"
)


@pytest.mark.parametrize(
    ("method", "code"), REFUSED_CALLS, ids=[f"{m}-{c}" for m, c in REFUSED_CALLS]
)
async def test_each_refusal_is_the_chats_own_error_saying_what_to_do(slack, method, code):
    chat = SlackChat(make_client(slack.bot_token, slack.api_url))
    slack.fail(method, code)
    with pytest.raises(ChatError) as raised:
        await call(chat, method, slack)
    assert code in str(raised.value)
    if code in REFUSALS:
        assert isinstance(raised.value, ChatRefused) and raised.value.fix == REFUSALS[code]


def test_every_refusal_of_where_the_bot_posts_has_a_fix():
    where = {"channel_not_found", "not_in_channel", "is_archived", "user_not_in_channel"}
    assert where | {"messages_tab_disabled", "cant_update_message"} <= set(REFUSALS)


@pytest.mark.parametrize("code", sorted(BOT_MEETS["chat.postEphemeral"] & set(REFUSALS)))
async def test_a_private_answer_refused_in_its_channel_reaches_the_asker_in_their_dm(slack, code):
    chat = SlackChat(make_client(slack.bot_token, slack.api_url))
    slack.fail("chat.postEphemeral", code)
    await chat.reply_private(CH, ALICE, MESSAGE)
    [answer] = private_answers(slack, ALICE)
    assert answer["source"] == "direct message" and "all well" in str(answer["blocks"])
