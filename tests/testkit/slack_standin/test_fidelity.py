"""The stand-in held against what Slack documents (web_api_methods.json: Slack's OpenAPI
description and its method docs, with their sources).

- Every code the stand-in can answer a method with is one Slack documents for that method.
- Every code it can answer is one it does answer, made to by a scenario driven through Bolt's
  Web API client (slack_sdk's AsyncWebClient), a test per code: the refusals the bot meets
  (membership, DMs, archived channels, the Messages tab, blocks, text length, threads, tokens,
  rate limits) are produced, not just declared.
- A call without a required argument is refused, with a documented code.
- The check fails on a stand-in that lets the bot post where it is not a member.
"""

from __future__ import annotations

import copy
import json
import warnings
from collections.abc import Awaitable, Callable

import aiohttp
import pytest
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from testkit.slack_standin import SlackStandIn
from testkit.slack_standin.conversations import IM, PRIVATE, PUBLIC
from testkit.slack_standin.documented import (
    documented_errors,
    documented_methods,
    extract,
    required_arguments,
)
from testkit.slack_standin.server import METHOD_ERRORS, TOKEN_ERRORS

pytestmark = pytest.mark.timeout(60)

CH = "C0SPARKOPS"
ALICE, BOB, CAROL = "U0ALICE", "U0BOB", "U0CAROL"
EVERY_METHOD_GIVES = TOKEN_ERRORS | {"ratelimited"}

# The refusals the bot can meet from the methods it calls: each must be documented and produced.
BOT_MEETS = {
    "chat.postMessage": {
        "channel_not_found",
        "not_in_channel",
        "is_archived",
        "messages_tab_disabled",
        "invalid_blocks",
        "msg_blocks_too_long",
        "thread_not_found",
        "ratelimited",
        "invalid_auth",
        "token_revoked",
    },
    "chat.postEphemeral": {
        "channel_not_found",
        "not_in_channel",
        "user_not_in_channel",
        "is_archived",
        "messages_tab_disabled",
        "invalid_blocks",
        "msg_too_long",
        "ratelimited",
        "invalid_auth",
        "token_revoked",
    },
    "chat.update": {
        "channel_not_found",
        "cant_update_message",
        "message_not_found",
        "invalid_blocks",
        "msg_too_long",
        "ratelimited",
        "token_revoked",
    },
    "chat.getPermalink": {"channel_not_found", "message_not_found", "ratelimited"},
    "conversations.open": {"user_not_found", "ratelimited", "token_revoked"},
    "conversations.info": {"channel_not_found", "ratelimited", "token_revoked"},
    "files.getUploadURLExternal": {"ratelimited", "invalid_auth", "token_revoked"},
    "files.completeUploadExternal": {
        "channel_not_found",
        "not_in_channel",
        "invalid_thread_ts",
        "file_not_found",
        "ratelimited",
        "invalid_auth",
        "token_revoked",
    },
}


def section(text: str) -> dict:
    return {"type": "section", "text": {"type": "mrkdwn", "text": text}}


async def answer(call: Awaitable) -> str:
    """The error code Slack answered (or "ok")."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # slack_sdk warns of a missing text: that is the test
            await call
    except SlackApiError as error:
        return error.response["error"]
    return "ok"


def private_without_bot(slack: SlackStandIn) -> str:
    return slack.add_conversation("C0SECRET", PRIVATE, "secret", bot_member=False).id


def dm_between_people(slack: SlackStandIn) -> str:
    return slack.add_conversation("D0ALICEBOB", IM, members=[ALICE, BOB], bot_member=False).id


def public_without_bot(slack: SlackStandIn) -> str:
    return slack.add_conversation("C0LOBBY", PUBLIC, "lobby", bot_member=False).id


async def uploaded_file(client: AsyncWebClient) -> str:
    """A file uploaded but not completed yet (files.getUploadURLExternal, then its bytes)."""
    reserved = await client.files_getUploadURLExternal(filename="x.log", length=3)
    async with aiohttp.ClientSession() as http, http.post(reserved["upload_url"], data=b"abc"):
        pass
    return reserved["file_id"]


Scenario = Callable[[SlackStandIn, AsyncWebClient], Awaitable[list[str]]]


async def post_channel_not_found(slack, client):
    return [
        await answer(client.chat_postMessage(channel=private_without_bot(slack), text="x")),
        await answer(client.chat_postMessage(channel=dm_between_people(slack), text="x")),
        await answer(client.chat_postMessage(channel="C0NOSUCH", text="x")),
    ]


async def post_not_in_channel(slack, client):
    return [await answer(client.chat_postMessage(channel=public_without_bot(slack), text="x"))]


async def post_is_archived(slack, client):
    slack.archive(CH)
    return [await answer(client.chat_postMessage(channel=CH, text="x"))]


async def post_messages_tab_disabled(slack, client):
    slack.messages_tab_enabled = False
    return [await answer(client.chat_postMessage(channel=slack.bot_dm(ALICE), text="x"))]


async def post_thread_not_found(slack, client):
    return [await answer(client.chat_postMessage(channel=CH, text="x", thread_ts="1.000001"))]


async def post_msg_blocks_too_long(slack, client):
    blocks = [section("x" * 2900) for _ in range(5)]
    return [await answer(client.chat_postMessage(channel=CH, text="x", blocks=blocks))]


def invalid_blocks_scenario(method: str) -> Scenario:
    async def scenario(slack, client):
        params = await valid_params(method, slack, client)
        return [
            await answer(client.api_call(method, json={**params, "blocks": [section("x" * 3001)]}))
        ]

    return scenario


def invalid_blocks_format_scenario(method: str) -> Scenario:
    async def scenario(slack, client):
        params = await valid_params(method, slack, client)
        return [await answer(client.api_call(method, data={**params, "blocks": "{not json"}))]

    return scenario


def no_text_scenario(method: str) -> Scenario:
    async def scenario(slack, client):
        params = await valid_params(method, slack, client)
        params.pop("text", None)
        return [await answer(client.api_call(method, json={**params, "text": ""}))]

    return scenario


async def update_channel_not_found(slack, client):
    return [
        await answer(client.chat_update(channel=private_without_bot(slack), ts="1.1", text="x"))
    ]


async def update_cant_update_message(slack, client):
    posted = await client.chat_postMessage(channel=CH, text="x")
    slack.leave(CH)
    return [await answer(client.chat_update(channel=CH, ts=posted["ts"], text="y"))]


async def update_message_not_found(slack, client):
    return [await answer(client.chat_update(channel=CH, ts="1.000001", text="y"))]


async def update_msg_too_long(slack, client):
    posted = await client.chat_postMessage(channel=CH, text="x")
    return [await answer(client.chat_update(channel=CH, ts=posted["ts"], text="y" * 4001))]


async def ephemeral_channel_not_found(slack, client):
    return [
        await answer(
            client.chat_postEphemeral(channel=private_without_bot(slack), user=ALICE, text="x")
        ),
        await answer(
            client.chat_postEphemeral(channel=dm_between_people(slack), user=ALICE, text="x")
        ),
    ]


async def ephemeral_not_in_channel(slack, client):
    slack.chat_write_public = True  # a scope for posts only: ephemerals still need membership
    channel = public_without_bot(slack)
    return [await answer(client.chat_postEphemeral(channel=channel, user=ALICE, text="x"))]


async def ephemeral_user_not_in_channel(slack, client):
    slack.add_user(CAROL, member_of=[])
    return [
        await answer(client.chat_postEphemeral(channel=CH, user=CAROL, text="x")),
        await answer(client.chat_postEphemeral(channel=slack.bot_dm(ALICE), user=BOB, text="x")),
    ]


async def ephemeral_is_archived(slack, client):
    slack.archive(CH)
    return [await answer(client.chat_postEphemeral(channel=CH, user=ALICE, text="x"))]


async def ephemeral_messages_tab_disabled(slack, client):
    slack.messages_tab_enabled = False
    channel = slack.bot_dm(ALICE)
    return [await answer(client.chat_postEphemeral(channel=channel, user=ALICE, text="x"))]


async def ephemeral_msg_too_long(slack, client):
    return [await answer(client.chat_postEphemeral(channel=CH, user=ALICE, text="x" * 40_001))]


async def permalink_channel_not_found(slack, client):
    channel = dm_between_people(slack)
    return [await answer(client.chat_getPermalink(channel=channel, message_ts="1.1"))]


async def permalink_message_not_found(slack, client):
    return [await answer(client.chat_getPermalink(channel=CH, message_ts="1.000001"))]


async def reaction(slack, client, **params):
    return await answer(client.reactions_add(**{"channel": CH, "name": "rocket", **params}))


async def reactions_channel_not_found(slack, client):
    return [await reaction(slack, client, channel=private_without_bot(slack), timestamp="1.1")]


async def reactions_is_archived(slack, client):
    posted = await client.chat_postMessage(channel=CH, text="x")
    slack.archive(CH)
    return [await reaction(slack, client, timestamp=posted["ts"])]


async def reactions_invalid_name(slack, client):
    posted = await client.chat_postMessage(channel=CH, text="x")
    return [await reaction(slack, client, timestamp=posted["ts"], name="")]


async def reactions_message_not_found(slack, client):
    return [await reaction(slack, client, timestamp="1.000001")]


async def reactions_already_reacted(slack, client):
    posted = await client.chat_postMessage(channel=CH, text="x")
    await client.reactions_add(channel=CH, name="rocket", timestamp=posted["ts"])
    return [await reaction(slack, client, timestamp=posted["ts"])]


async def users_info_user_not_found(slack, client):
    return [await answer(client.users_info(user="U0NOBODY"))]


async def conversations_info_channel_not_found(slack, client):
    return [
        await answer(client.conversations_info(channel=dm_between_people(slack))),
        await answer(client.conversations_info(channel=private_without_bot(slack))),
    ]


async def open_users_list_not_supplied(slack, client):
    return [await answer(client.api_call("conversations.open", json={}))]


async def open_user_not_found(slack, client):
    return [await answer(client.conversations_open(users="U0NOBODY"))]


async def open_channel_not_found(slack, client):
    return [await answer(client.conversations_open(channel=dm_between_people(slack)))]


async def upload_url_missing_argument(slack, client):
    return [await answer(client.files_getUploadURLExternal(filename="x.log", length=0))]


async def complete(client, file_id: str, **params):
    return await answer(client.files_completeUploadExternal(files=[{"id": file_id}], **params))


async def complete_file_not_found(slack, client):
    file_id = await uploaded_file(client)
    first = await complete(client, file_id, channel_id=CH)
    return [await complete(client, "F9999999"), await complete(client, file_id)] + (
        [] if first == "ok" else [first]
    )


async def complete_channel_not_found(slack, client):
    channel = private_without_bot(slack)
    return [await complete(client, await uploaded_file(client), channel_id=channel)]


async def complete_not_in_channel(slack, client):
    slack.chat_write_public = True  # chat.postMessage's scope, not an upload's
    channel = public_without_bot(slack)
    return [await complete(client, await uploaded_file(client), channel_id=channel)]


async def complete_invalid_thread_ts(slack, client):
    parent = await client.chat_postMessage(channel=CH, text="parent")
    reply = await client.chat_postMessage(channel=CH, text="reply", thread_ts=parent["ts"])
    return [
        await complete(client, await uploaded_file(client), channel_id=CH, thread_ts=reply["ts"]),
        await complete(client, await uploaded_file(client), channel_id=CH, thread_ts="1.000001"),
    ]


async def complete_invalid_blocks(slack, client):
    file_id = await uploaded_file(client)
    blocks = json.dumps([section("x" * 3001)])  # slack_sdk sends this method's blocks as given
    return [
        await answer(
            client.files_completeUploadExternal(
                files=[{"id": file_id}], channel_id=CH, blocks=blocks
            )
        )
    ]


async def files_info_file_not_found(slack, client):
    file_id = await uploaded_file(client)  # not completed: Slack has no file for it yet
    return [
        await answer(client.files_info(file="F9999999")),
        await answer(client.files_info(file=file_id)),
    ]


SCENARIOS: dict[tuple[str, str], Scenario] = {
    ("chat.postMessage", "channel_not_found"): post_channel_not_found,
    ("chat.postMessage", "not_in_channel"): post_not_in_channel,
    ("chat.postMessage", "is_archived"): post_is_archived,
    ("chat.postMessage", "messages_tab_disabled"): post_messages_tab_disabled,
    ("chat.postMessage", "thread_not_found"): post_thread_not_found,
    ("chat.postMessage", "msg_blocks_too_long"): post_msg_blocks_too_long,
    ("chat.update", "channel_not_found"): update_channel_not_found,
    ("chat.update", "cant_update_message"): update_cant_update_message,
    ("chat.update", "message_not_found"): update_message_not_found,
    ("chat.update", "msg_too_long"): update_msg_too_long,
    ("chat.postEphemeral", "channel_not_found"): ephemeral_channel_not_found,
    ("chat.postEphemeral", "not_in_channel"): ephemeral_not_in_channel,
    ("chat.postEphemeral", "user_not_in_channel"): ephemeral_user_not_in_channel,
    ("chat.postEphemeral", "is_archived"): ephemeral_is_archived,
    ("chat.postEphemeral", "messages_tab_disabled"): ephemeral_messages_tab_disabled,
    ("chat.postEphemeral", "msg_too_long"): ephemeral_msg_too_long,
    ("chat.getPermalink", "channel_not_found"): permalink_channel_not_found,
    ("chat.getPermalink", "message_not_found"): permalink_message_not_found,
    ("reactions.add", "channel_not_found"): reactions_channel_not_found,
    ("reactions.add", "is_archived"): reactions_is_archived,
    ("reactions.add", "invalid_name"): reactions_invalid_name,
    ("reactions.add", "message_not_found"): reactions_message_not_found,
    ("reactions.add", "already_reacted"): reactions_already_reacted,
    ("users.info", "user_not_found"): users_info_user_not_found,
    ("conversations.info", "channel_not_found"): conversations_info_channel_not_found,
    ("conversations.open", "users_list_not_supplied"): open_users_list_not_supplied,
    ("conversations.open", "user_not_found"): open_user_not_found,
    ("conversations.open", "channel_not_found"): open_channel_not_found,
    ("files.getUploadURLExternal", "missing_argument"): upload_url_missing_argument,
    ("files.completeUploadExternal", "file_not_found"): complete_file_not_found,
    ("files.completeUploadExternal", "channel_not_found"): complete_channel_not_found,
    ("files.completeUploadExternal", "not_in_channel"): complete_not_in_channel,
    ("files.completeUploadExternal", "invalid_thread_ts"): complete_invalid_thread_ts,
    ("files.completeUploadExternal", "invalid_blocks"): complete_invalid_blocks,
    ("files.info", "file_not_found"): files_info_file_not_found,
}
for _method in ("chat.postMessage", "chat.update", "chat.postEphemeral"):
    SCENARIOS[(_method, "invalid_blocks")] = invalid_blocks_scenario(_method)
    SCENARIOS[(_method, "invalid_blocks_format")] = invalid_blocks_format_scenario(_method)
    SCENARIOS[(_method, "no_text")] = no_text_scenario(_method)


async def valid_params(method: str, slack: SlackStandIn, client: AsyncWebClient) -> dict:
    """Arguments with which `method` succeeds (what a refusal scenario then spoils)."""
    if method in ("chat.update", "chat.getPermalink", "reactions.add"):
        ts = (await client.chat_postMessage(channel=CH, text="x"))["ts"]
        return {
            "chat.update": {"channel": CH, "ts": ts, "text": "y"},
            "chat.getPermalink": {"channel": CH, "message_ts": ts},
            "reactions.add": {"channel": CH, "name": "rocket", "timestamp": ts},
        }[method]
    if method == "files.completeUploadExternal":
        return {"files": json.dumps([{"id": await uploaded_file(client)}]), "channel_id": CH}
    if method == "files.info":
        file_id = await uploaded_file(client)
        await client.files_completeUploadExternal(files=[{"id": file_id}])
        return {"file": file_id}
    return {
        "auth.test": {},
        "apps.connections.open": {},
        "chat.postMessage": {"channel": CH, "text": "x"},
        "chat.postEphemeral": {"channel": CH, "user": ALICE, "text": "x"},
        "users.info": {"user": ALICE},
        "conversations.info": {"channel": CH},
        "conversations.open": {"users": ALICE},
        "files.getUploadURLExternal": {"filename": "x.log", "length": 3},
    }[method]


async def token_answer(method: str, code: str, slack: SlackStandIn, client: AsyncWebClient) -> str:
    params = await valid_params(method, slack, client)
    app_method = method == "apps.connections.open"
    token = slack.app_token if app_method else slack.bot_token
    if code == "not_authed":
        token = None
    elif code == "invalid_auth":
        token = "xoxb-not-a-token"
    elif code == "token_revoked":
        slack.revoke_token(token)
    elif code == "not_allowed_token_type":
        token = slack.bot_token if app_method else slack.app_token
    elif code == "ratelimited":
        slack.rate_limit(method)
    return await answer(
        AsyncWebClient(token=token, base_url=slack.api_url).api_call(method, data=params)
    )


async def problems_of(method: str, code: str) -> list[str]:
    """What the stand-in answers `method` with where Slack answers `code`, if not that."""
    async with SlackStandIn(file_share_delay=None) as slack:
        client = AsyncWebClient(token=slack.bot_token, base_url=slack.api_url)
        if code in EVERY_METHOD_GIVES:
            answers = [await token_answer(method, code, slack, client)]
        else:
            answers = await SCENARIOS[(method, code)](slack, client)
    return [f"{method}: {a} where Slack answers {code}" for a in answers if a != code]


async def fidelity_problems() -> list[str]:
    """Every way the stand-in departs from what Slack documents (empty when faithful)."""
    problems = []
    for method, codes in METHOD_ERRORS.items():
        problems += [
            f"{method}: answers {code}, which Slack does not document for it"
            for code in sorted((codes | EVERY_METHOD_GIVES) - documented_errors(method))
        ]
        for code in sorted(codes | EVERY_METHOD_GIVES):
            problems += await problems_of(method, code)
    return problems


# --------------------------------------------------------------------------- the extract


def test_the_extract_names_its_sources_and_covers_every_method_served():
    sources = extract()["sources"]
    assert sources["spec"]["repository"] == "slackapi/slack-api-specs"
    assert sources["spec"]["path"] == "web-api/slack_web_openapi_v2.json"
    assert len(sources["spec"]["commit"]) == len(sources["docs"]["commit"]) == 40
    assert documented_methods() == sorted(METHOD_ERRORS)
    newer = {m for m, e in extract()["methods"].items() if e["spec_errors"] is None}
    assert {"files.getUploadURLExternal", "files.completeUploadExternal"} <= newer
    for method, entry in extract()["methods"].items():
        assert entry["docs_url"] == f"https://docs.slack.dev/reference/methods/{method}"
        assert all(extra["url"].startswith("https://") for extra in entry["extra_errors"].values())


@pytest.mark.parametrize("method", sorted(METHOD_ERRORS))
def test_every_code_the_stand_in_can_answer_is_documented_for_the_method(method):
    undocumented = (METHOD_ERRORS[method] | EVERY_METHOD_GIVES) - documented_errors(method)
    assert not undocumented, f"{method} can answer {sorted(undocumented)}, not documented for it"


@pytest.mark.parametrize("method", sorted(BOT_MEETS))
def test_every_refusal_the_bot_can_meet_is_documented_and_one_the_stand_in_gives(method):
    assert BOT_MEETS[method] <= documented_errors(method)
    assert BOT_MEETS[method] <= METHOD_ERRORS[method] | EVERY_METHOD_GIVES


def test_every_code_the_stand_in_can_answer_has_a_scenario_that_makes_it():
    declared = {(m, c) for m, codes in METHOD_ERRORS.items() for c in codes}
    assert declared == set(SCENARIOS)


# --------------------------------------------------------------------------- a test per code


@pytest.mark.parametrize(
    ("method", "code"), sorted(SCENARIOS), ids=[f"{m}-{c}" for m, c in sorted(SCENARIOS)]
)
async def test_the_stand_in_gives(method, code):
    assert await problems_of(method, code) == []


@pytest.mark.parametrize("code", sorted(EVERY_METHOD_GIVES))
@pytest.mark.parametrize("method", sorted(METHOD_ERRORS))
async def test_every_method_answers_tokens_and_rate_limits(method, code):
    assert await problems_of(method, code) == []


@pytest.mark.parametrize(
    ("method", "argument"),
    sorted((m, a) for m in METHOD_ERRORS for a in required_arguments(m)),
)
async def test_a_call_without_a_required_argument_is_refused_with_a_documented_code(
    method, argument
):
    async with SlackStandIn(file_share_delay=None) as slack:
        client = AsyncWebClient(token=slack.bot_token, base_url=slack.api_url)
        params = await valid_params(method, slack, client)
        assert await answer(client.api_call(method, data=copy.deepcopy(params))) == "ok"
        params = await valid_params(method, slack, client)
        del params[argument]
        code = await answer(client.api_call(method, data=params))
    assert code != "ok" and code in documented_errors(method), code


# --------------------------------------------------------------------------- the check can fail


async def test_the_check_fails_on_a_stand_in_that_lets_the_bot_post_where_it_is_not_a_member(
    monkeypatch,
):
    strict = SlackStandIn._bot_may_post

    def as_if_a_member(self, conversation, **options):
        conversation = copy.copy(conversation)
        conversation.members = conversation.members | {self.bot_user_id}
        return strict(self, conversation, **options)

    assert await fidelity_problems() == []
    monkeypatch.setattr(SlackStandIn, "_bot_may_post", as_if_a_member)
    problems = await fidelity_problems()
    assert "chat.postMessage: ok where Slack answers not_in_channel" in problems
    assert "chat.postEphemeral: ok where Slack answers not_in_channel" in problems
    assert "files.completeUploadExternal: ok where Slack answers not_in_channel" in problems
