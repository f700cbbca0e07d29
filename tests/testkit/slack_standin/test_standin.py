"""The Slack stand-in, exercised through Bolt's and slack_sdk's real clients."""

from __future__ import annotations

import asyncio
import json
import time

import aiohttp
import pytest
from aiohttp import web
from slack_bolt.adapter.socket_mode.async_handler import AsyncSocketModeHandler
from slack_bolt.async_app import AsyncApp
from slack_sdk.errors import SlackApiError
from slack_sdk.http_retry.builtin_async_handlers import AsyncRateLimitErrorRetryHandler
from slack_sdk.signature import SignatureVerifier
from slack_sdk.socket_mode.aiohttp import SocketModeClient
from slack_sdk.web.async_client import AsyncWebClient

from testkit import planted_secrets as secrets
from testkit.planted_secrets import planted_in
from testkit.slack_standin import (
    IM,
    MPIM,
    PRIVATE,
    PUBLIC,
    AckTimeout,
    SlackStandIn,
    build_signed_slash_command,
)

pytestmark = pytest.mark.timeout(30)

CH = "C0SPARKOPS"


@pytest.fixture
async def client(slack):
    c = AsyncWebClient(token=slack.bot_token, base_url=slack.api_url)
    yield c


def section(text: str, **kw) -> dict:
    return {"type": "section", "text": {"type": "mrkdwn", "text": text}, **kw}


def button(text: str = "Go", action_id: str = "go", value: str = "v", **kw) -> dict:
    return {
        "type": "button",
        "text": {"type": "plain_text", "text": text},
        "action_id": action_id,
        "value": value,
        **kw,
    }


async def api_error(coro) -> SlackApiError:
    with pytest.raises(SlackApiError) as ei:
        await coro
    return ei.value


# --------------------------------------------------------------------------- Bolt end to end


async def test_slash_command_through_socket_mode_records_exact_calls(slack, client):
    app = AsyncApp(client=client, signing_secret=slack.signing_secret)

    @app.command("/spark")
    async def spark(ack, command, client):
        await ack(text=f"launching {command['text']}")
        parent = await client.chat_postMessage(channel=command["channel_id"], text="Launch started")
        await client.chat_postMessage(
            channel=command["channel_id"],
            thread_ts=parent["ts"],
            text="step 1 ok",
            reply_broadcast=True,
        )
        await client.files_upload_v2(
            channel=command["channel_id"],
            thread_ts=parent["ts"],
            content="vllm log\n",
            filename="vllm.log",
            title="vLLM log",
            initial_comment="full log",
        )

    handler = AsyncSocketModeHandler(
        app, slack.app_token
    )  # apps.connections.open goes via app.client
    await handler.connect_async()
    try:
        conn = await slack.wait_for_connection()
        ack = await slack.send_slash_command("U0ALICE", CH, "qwen-72b")
        assert ack.type == "slash_commands"
        assert ack.payload == {"text": "launching qwen-72b"}
        assert ack.latency >= 0
        assert ack.connection_id == conn.id
        assert ack.envelope["payload"]["command"] == "/spark"
        assert ack.envelope["payload"]["user_id"] == "U0ALICE"

        await slack.wait_for_call("files.completeUploadExternal")
    finally:
        await handler.close_async()

    assert [c.method for c in slack.calls()] == [
        "apps.connections.open",
        "auth.test",
        "chat.postMessage",
        "chat.postMessage",
        "files.getUploadURLExternal",
        "files.upload.bytes",
        "files.completeUploadExternal",
    ]
    calls = slack.calls()
    assert calls[0].token == slack.app_token
    assert all(c.token == slack.bot_token for c in calls[1:] if c.method != "files.upload.bytes")
    assert all(c.ok for c in calls)
    parent_ts = calls[2].result["ts"]
    assert calls[2].params["channel"] == CH and calls[2].params["text"] == "Launch started"
    assert calls[3].params["thread_ts"] == parent_ts and calls[3].params["reply_broadcast"] is True
    assert float(calls[3].result["ts"]) > float(parent_ts)
    assert calls[4].params["filename"] == "vllm.log" and int(calls[4].params["length"]) == len(
        b"vllm log\n"
    )
    assert calls[6].params["files"] == [{"id": calls[4].result["file_id"], "title": "vLLM log"}]
    assert calls[6].params["channel_id"] == CH and calls[6].params["thread_ts"] == parent_ts
    assert calls[6].params["initial_comment"] == "full log"
    assert slack.file_content(calls[4].result["file_id"]) == b"vllm log\n"

    await slack.wait_for_file_shared(calls[4].result["file_id"])  # Slack shares it later
    [parent] = slack.messages(CH)
    assert parent["ts"] == parent_ts and parent["text"] == "Launch started"
    assert parent["reply_count"] == 2
    reply, upload = parent["replies"]
    assert reply["text"] == "step 1 ok" and reply["reply_broadcast"] is True
    assert upload["text"] == "full log" and upload["files"][0]["name"] == "vllm.log"
    # the ack body is what the user sees (ephemeral)
    assert [e["text"] for e in slack.ephemerals("U0ALICE")] == ["launching qwen-72b"]


async def test_button_click_is_delivered_and_acked(slack, client):
    app = AsyncApp(client=client, signing_secret=slack.signing_secret)
    clicks = []

    @app.action("cancel_job")
    async def cancel(ack, body, action, respond):
        await ack()
        clicks.append(
            (body["user"]["id"], action["value"], body["message"]["ts"], body["container"])
        )
        await respond(replace_original=True, text="cancelled by <@{}>".format(body["user"]["id"]))

    handler = AsyncSocketModeHandler(app, slack.app_token)
    await handler.connect_async()
    try:
        posted = await client.chat_postMessage(
            channel=CH,
            text="job running",
            blocks=[
                section("job running"),
                {
                    "type": "actions",
                    "block_id": "job_actions",
                    "elements": [button("Cancel", "cancel_job", "job-7")],
                },
            ],
        )
        ack = await slack.click_button("U0BOB", CH, posted["ts"], "cancel_job")
        assert ack.type == "interactive" and ack.payload is None
        action = ack.envelope["payload"]["actions"][0]
        assert action == {
            **action,
            "action_id": "cancel_job",
            "block_id": "job_actions",
            "value": "job-7",
            "type": "button",
        }
        resp = await slack.wait_for_response()
        assert resp.body["replace_original"] is True and resp.text == "cancelled by <@U0BOB>"
    finally:
        await handler.close_async()

    assert clicks == [
        (
            "U0BOB",
            "job-7",
            posted["ts"],
            {
                "type": "message",
                "message_ts": posted["ts"],
                "channel_id": CH,
                "is_ephemeral": False,
            },
        )
    ]
    assert slack.message(CH, posted["ts"])["text"] == "cancelled by <@U0BOB>"
    with pytest.raises(LookupError):
        await slack.click_button("U0BOB", CH, posted["ts"], "no_such_button")


async def test_unacked_command_raises_ack_timeout(slack, client):
    app = AsyncApp(client=client, signing_secret=slack.signing_secret)
    release = asyncio.Event()

    @app.command("/spark")
    async def slow(ack):
        await release.wait()
        await ack()

    handler = AsyncSocketModeHandler(app, slack.app_token)
    await handler.connect_async()
    try:
        with pytest.raises(AckTimeout):
            await slack.send_slash_command("U0ALICE", CH, "status", timeout=0.3)
        release.set()
        await slack.wait_until(lambda: slack.late_acks)
        assert slack.acks == [] and len(slack.late_acks) == 1
    finally:
        await handler.close_async()


async def test_disconnect_and_reconnect(slack, client):
    app = AsyncApp(client=client, signing_secret=slack.signing_secret)

    @app.command("/spark")
    async def spark(ack):
        await ack()

    handler = AsyncSocketModeHandler(app, slack.app_token)
    await handler.connect_async()
    try:
        first = await slack.wait_for_connection(1)
        await slack.send_slash_command("U0ALICE", CH, "status")

        # Slack's refresh: a disconnect message; the client opens a new socket, drops the old one
        await slack.disconnect("refresh_requested")
        second = await slack.wait_for_connection(2)
        await slack.wait_for_closed(first)
        assert second.id != first.id and second.open
        assert first.pings >= 1  # the SDK's first ping was answered with a pong
        ack = await slack.send_slash_command("U0ALICE", CH, "status")
        assert ack.connection_id == second.id

        # an abrupt server-side close: the client reconnects on the CLOSE frame
        await slack.close_connections()
        third = await slack.wait_for_connection(3)
        ack = await slack.send_slash_command("U0ALICE", CH, "status")
        assert ack.connection_id == third.id
    finally:
        await handler.close_async()

    assert len(slack.calls("apps.connections.open")) == 3
    assert all(c.received and c.received[0]["envelope_id"] for c in slack.connections)


# --------------------------------------------------------------------------- Web API fidelity


async def test_blocks_validation(slack, client):
    e = await api_error(
        client.chat_postMessage(channel=CH, text="t", blocks=[section(f"b{i}") for i in range(51)])
    )
    assert e.response["error"] == "invalid_blocks"
    assert "must be less than 51 items" in e.response["errors"][0]

    big = [section("x" * 2900) for _ in range(5)]
    e = await api_error(client.chat_postMessage(channel=CH, text="t", blocks=big))
    assert e.response["error"] == "msg_blocks_too_long"

    cases = {
        "section 3001": [section("x" * 3001)],
        "header 151": [{"type": "header", "text": {"type": "plain_text", "text": "h" * 151}}],
        "button text 76": [{"type": "actions", "elements": [button("b" * 76)]}],
        "button value 2001": [{"type": "actions", "elements": [button(value="v" * 2001)]}],
        "confirm title 101": [
            {
                "type": "actions",
                "elements": [
                    button(
                        confirm={
                            "title": {"type": "plain_text", "text": "t" * 101},
                            "text": {"type": "mrkdwn", "text": "sure?"},
                            "confirm": {"type": "plain_text", "text": "Yes"},
                            "deny": {"type": "plain_text", "text": "No"},
                        }
                    )
                ],
            }
        ],
        "confirm text 301": [
            {
                "type": "actions",
                "elements": [
                    button(
                        confirm={
                            "title": {"type": "plain_text", "text": "Sure?"},
                            "text": {"type": "mrkdwn", "text": "t" * 301},
                            "confirm": {"type": "plain_text", "text": "Yes"},
                            "deny": {"type": "plain_text", "text": "No"},
                        }
                    )
                ],
            }
        ],
    }
    for name, blocks in cases.items():
        e = await api_error(client.chat_postMessage(channel=CH, text="t", blocks=blocks))
        assert e.response["error"] == "invalid_blocks", name

    ok_blocks = [
        {"type": "header", "text": {"type": "plain_text", "text": "h" * 150}},
        section("x" * 3000),
        {"type": "actions", "elements": [button("b" * 75, value="v" * 2000)]},
    ]
    assert (await client.chat_postMessage(channel=CH, text="t", blocks=ok_blocks))["ok"]
    assert [c.error for c in slack.calls("chat.postMessage")] == [
        "invalid_blocks",
        "msg_blocks_too_long",
        *["invalid_blocks"] * len(cases),
        None,
    ]
    assert len(slack.messages(CH)) == 1


async def test_message_errors_and_truncation(slack, client):
    assert (await api_error(client.chat_postMessage(channel="", text="x"))).response[
        "error"
    ] == "channel_not_found"
    assert (await api_error(client.chat_postMessage(channel="C0NOPE", text="x"))).response[
        "error"
    ] == "channel_not_found"
    with pytest.warns(UserWarning):  # slack_sdk itself warns about the missing text
        assert (await api_error(client.chat_postMessage(channel=CH))).response["error"] == "no_text"
    e = await api_error(client.chat_postMessage(channel=CH, text="x", thread_ts="1.000001"))
    assert e.response["error"] == "thread_not_found"

    r = await client.chat_postMessage(channel=CH, text="y" * 40_001)
    assert len(r["message"]["text"]) == 40_000
    assert slack.calls("chat.postMessage")[-1].notes == ["text_truncated"]

    e = await api_error(client.chat_update(channel=CH, ts="1.000001", text="z"))
    assert e.response["error"] == "message_not_found"
    blocks = [section("v1")]
    r = await client.chat_postMessage(channel=CH, text="v1", blocks=blocks)
    await client.chat_update(channel=CH, ts=r["ts"], text="v2")  # blocks retained when omitted
    m = slack.message(CH, r["ts"])
    assert m["text"] == "v2" and m["blocks"][0]["text"]["text"] == "v1" and m["update_count"] == 1
    await client.chat_update(channel=CH, ts=r["ts"], text="v3", blocks=[section("v3")])
    assert slack.message(CH, r["ts"])["blocks"][0]["text"]["text"] == "v3"

    # ts strictly increasing, Slack-shaped
    tss = [c.result["ts"] for c in slack.calls("chat.postMessage") if c.ok]
    assert all(len(t.split(".")[1]) == 6 for t in tss)
    assert tss == sorted(tss, key=float) and len(set(tss)) == len(tss)


async def test_form_encoded_and_get_methods(slack, client):
    # slack_sdk sends form bodies for api_call(data=...) and query params for GET methods
    r = await client.api_call(
        "chat.postMessage",
        data={"channel": CH, "text": "form", "blocks": json.dumps([section("form")])},
    )
    call = slack.calls("chat.postMessage")[-1]
    assert call.content_type == "application/x-www-form-urlencoded"
    assert call.params["blocks"] == [section("form")]  # parsed from the form's JSON string
    link = await client.chat_getPermalink(channel=CH, message_ts=r["ts"])
    assert link["permalink"].endswith(f"/archives/{CH}/p{r['ts'].replace('.', '')}")
    assert slack.calls("chat.getPermalink")[-1].http_method == "GET"

    await client.reactions_add(channel=CH, timestamp=r["ts"], name="rocket")
    assert (
        await api_error(client.reactions_add(channel=CH, timestamp=r["ts"], name="rocket"))
    ).response["error"] == "already_reacted"
    assert slack.message(CH, r["ts"])["reactions"] == [
        {"name": "rocket", "users": ["U0SPARKBOT"], "count": 1}
    ]

    assert (await client.users_info(user="U0ALICE"))["user"]["name"] == "alice"
    assert (await api_error(client.users_info(user="U0NOBODY"))).response[
        "error"
    ] == "user_not_found"
    assert (await client.conversations_info(channel=CH))["channel"]["name"] == "spark-ops"
    by_name = await client.chat_postMessage(channel="#spark-ops", text="by name")
    assert by_name["channel"] == CH
    eph = await client.chat_postEphemeral(channel=CH, user="U0ALICE", text="psst")
    assert slack.ephemerals("U0ALICE")[0]["ts"] == eph["message_ts"]


async def test_auth_errors(slack):
    bad = AsyncWebClient(token="xoxb-wrong", base_url=slack.api_url)
    assert (await api_error(bad.auth_test())).response["error"] == "invalid_auth"
    app_tok = AsyncWebClient(token=slack.app_token, base_url=slack.api_url)
    e = await api_error(app_tok.chat_postMessage(channel=CH, text="x"))
    assert e.response["error"] == "not_allowed_token_type"
    bot = AsyncWebClient(token=slack.bot_token, base_url=slack.api_url)
    e = await api_error(bot.apps_connections_open(app_token=slack.bot_token))
    assert e.response["error"] == "not_allowed_token_type"
    url = (await bot.apps_connections_open(app_token=slack.app_token))["url"]
    assert url.startswith(f"ws://127.0.0.1:{slack.port}/link/?ticket=")
    assert (await api_error(AsyncWebClient(base_url=slack.api_url).auth_test())).response[
        "error"
    ] == "not_authed"


async def test_rate_limit_honoured_by_retry_handler(slack, client):
    slack.rate_limit("chat.postMessage", times=1, retry_after=1)
    e = await api_error(client.chat_postMessage(channel=CH, text="no handler"))
    assert e.response.status_code == 429 and e.response["error"] == "ratelimited"
    assert e.response.headers["Retry-After"] == "1"

    client.retry_handlers.append(AsyncRateLimitErrorRetryHandler(max_retry_count=1))
    slack.rate_limit("chat.postMessage", times=1, retry_after=1)
    after = slack.last_seq()
    r = await client.chat_postMessage(channel=CH, text="with handler")
    assert r["ok"]
    first, second = [c for c in slack.calls("chat.postMessage") if c.seq > after]
    assert (first.status, first.error) == (429, "ratelimited")
    assert second.ok and second.params["text"] == "with handler"
    assert second.time - first.time >= 1  # the client waited Retry-After before the retry
    assert [m["text"] for m in slack.messages(CH)] == ["with handler"]


async def test_armed_error_and_dropped_connection(slack, client):
    slack.fail("chat.update", "fatal_error")
    r = await client.chat_postMessage(channel=CH, text="a")
    e = await api_error(client.chat_update(channel=CH, ts=r["ts"], text="b"))
    assert e.response["error"] == "fatal_error"
    assert (await client.chat_update(channel=CH, ts=r["ts"], text="b"))["ok"]

    slack.drop_connection("chat.postMessage")
    r = await client.chat_postMessage(
        channel=CH, text="c"
    )  # default connection-error retry handler
    assert r["ok"]
    assert [c.dropped for c in slack.calls("chat.postMessage")] == [False, True, False]


async def test_wait_for_is_event_driven(slack, client):
    waiter = asyncio.create_task(
        slack.wait_for(lambda c: c.method == "chat.postMessage" and c.params.get("text") == "b")
    )
    await client.chat_postMessage(channel=CH, text="a")
    assert not waiter.done()
    await client.chat_postMessage(channel=CH, text="b")
    call = await asyncio.wait_for(waiter, 2)
    assert call.params["text"] == "b" and call.seq == 2
    with pytest.raises(asyncio.TimeoutError):
        await slack.wait_for(lambda c: c.method == "never", timeout=0.05)


# --------------------------------------------------------------------------- HTTP mode


async def test_signed_http_slash_command(slack, client):
    app = AsyncApp(client=client, signing_secret=slack.signing_secret)

    @app.command("/spark")
    async def spark(ack, command):
        await ack(text=f"http {command['text']}")

    runner = web.AppRunner(app.web_app(path="/slack/events"))
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    url = f"http://127.0.0.1:{runner.addresses[0][1]}/slack/events"
    try:
        ok = await slack.send_slash_command_http(url, "U0ALICE", CH, "status")
        assert (
            ok.status == 200 and ok.body == "http status"
        )  # Bolt answers a text-only ack as text/plain
        expired = await slack.send_slash_command_http(
            url, "U0ALICE", CH, "status", timestamp=int(time.time()) - 600
        )
        assert expired.status == 401
        forged = await slack.send_slash_command_http(
            url, "U0ALICE", CH, "status", signing_secret="not-the-secret"
        )
        assert forged.status == 401
    finally:
        await runner.cleanup()

    verifier = SignatureVerifier(slack.signing_secret)
    req = build_signed_slash_command(
        slack.signing_secret, user_id="U0ALICE", channel_id=CH, text="launch"
    )
    assert verifier.is_valid_request(req.body, req.headers)
    assert "command=%2Fspark" in req.body and "text=launch" in req.body
    old = build_signed_slash_command(
        slack.signing_secret,
        user_id="U0ALICE",
        channel_id=CH,
        text="launch",
        timestamp=int(time.time()) - 301,
    )
    assert not verifier.is_valid_request(old.body, old.headers)


@pytest.mark.leaks_on_purpose
async def test_what_apps_send_is_scanned_for_planted_secrets(slack, client):
    assert slack.bot_token == secrets.SLACK_BOT_TOKEN and slack.app_token == secrets.SLACK_APP_TOKEN
    await client.chat_postMessage(channel=CH, text="fine")
    assert not [n for _, text in slack.sent_by_apps() for n in planted_in(text)], (
        "a token in its header is no leak"
    )
    await client.chat_postMessage(
        channel=CH, text="oops", blocks=[section(f"HF_TOKEN={secrets.HF_TOKEN}")]
    )
    await client.files_upload_v2(
        channel=CH, content=f"key {secrets.SLACK_SIGNING_SECRET}\n", filename="x.log"
    )
    found = [
        (where.split(" ")[0], n) for where, text in slack.sent_by_apps() for n in planted_in(text)
    ]
    assert ("chat.postMessage", "HF_TOKEN") in found and ("file", "SLACK_SIGNING_SECRET") in found


# --------------------------------------------------------------------------- conversations


async def test_conversation_kinds_as_the_bot_sees_them(slack, client):
    dm = slack.bot_dm("U0ALICE")
    assert (
        slack.bot_dm("U0ALICE")
        == dm
        == (await client.conversations_open(users="U0ALICE"))["channel"]["id"]
    ), "one DM per user, the same ID every time"
    slack.add_conversation("D0ALICEBOB", IM, members=["U0ALICE", "U0BOB"], bot_member=False)
    slack.add_conversation("C0OPS", PRIVATE, "ops")
    slack.add_conversation("G0TRIO", MPIM, "mpdm-alice--bob--spark-bot-1")
    slack.add_conversation("C0LOBBY", PUBLIC, "lobby", bot_member=False)

    own = (await client.conversations_info(channel=dm))["channel"]
    assert (own["is_im"], own["user"], own["is_private"]) == (True, "U0ALICE", True)
    private = (await client.conversations_info(channel="C0OPS"))["channel"]
    assert (private["is_private"], private["is_member"], private["is_im"]) == (True, True, False)
    group = (await client.conversations_info(channel="G0TRIO"))["channel"]
    assert group["is_mpim"] and group["is_private"]
    lobby = (await client.conversations_info(channel="C0LOBBY"))["channel"]
    assert (lobby["is_private"], lobby["is_member"]) == (False, False)
    e = await api_error(client.conversations_info(channel="D0ALICEBOB"))
    assert e.response["error"] == "channel_not_found", "the bot cannot see a DM between people"

    assert (await api_error(client.chat_postMessage(channel="C0LOBBY", text="x"))).response[
        "error"
    ] == "not_in_channel"
    slack.join("C0LOBBY")
    assert (await client.chat_postMessage(channel="C0LOBBY", text="invited"))["ok"]
    assert [m["text"] for m in slack.messages("C0LOBBY")] == ["invited"]


async def test_chat_write_public_lets_the_bot_post_but_not_whisper_where_it_is_not(slack, client):
    slack.add_conversation("C0LOBBY", PUBLIC, "lobby", bot_member=False)
    slack.add_conversation("C0OPS", PRIVATE, "ops", bot_member=False)
    slack.chat_write_public = True
    assert (await client.chat_postMessage(channel="C0LOBBY", text="hello"))["ok"]
    for call in (
        client.chat_postEphemeral(channel="C0LOBBY", user="U0ALICE", text="psst"),
        client.chat_postMessage(channel="C0OPS", text="hello"),
    ):
        assert (await api_error(call)).response["error"] in ("not_in_channel", "channel_not_found")
    assert slack.ephemerals() == []


async def test_slash_command_payloads_per_conversation_kind(slack):
    slack.add_conversation("D0ALICEBOB", IM, members=["U0ALICE", "U0BOB"], bot_member=False)
    slack.add_conversation("C0OPS", PRIVATE, "ops")
    slack.add_conversation("G0TRIO", MPIM, "mpdm-alice--bob--spark-bot-1")
    seen = {}
    app = AsyncApp(
        client=AsyncWebClient(token=slack.bot_token, base_url=slack.api_url),
        signing_secret=slack.signing_secret,
    )

    @app.command("/spark")
    async def spark(ack, command):
        seen[command["channel_id"]] = command["channel_name"]
        await ack()

    handler = AsyncSocketModeHandler(app, slack.app_token)
    await handler.connect_async()
    try:
        for channel in (CH, slack.bot_dm("U0ALICE"), "D0ALICEBOB", "C0OPS", "G0TRIO"):
            await slack.send_slash_command("U0ALICE", channel, "status")
        slack.add_user("U0CAROL", member_of=[])
        with pytest.raises(LookupError):
            await slack.send_slash_command("U0CAROL", CH, "status")
    finally:
        await handler.close_async()
    assert seen == {
        CH: "spark-ops",
        "D0ALICE": "directmessage",
        "D0ALICEBOB": "directmessage",
        "C0OPS": "privategroup",
        "G0TRIO": "privategroup",
    }


# --------------------------------------------------------------------------- response_url


async def post_json(url: str, body) -> tuple[int, str]:
    async with aiohttp.ClientSession() as http, http.post(url, json=body) as res:
        return res.status, await res.text()


async def issued_response_url(slack, channel: str = CH, user: str = "U0ALICE") -> str:
    app = AsyncApp(
        client=AsyncWebClient(token=slack.bot_token, base_url=slack.api_url),
        signing_secret=slack.signing_secret,
    )

    @app.command("/spark")
    async def spark(ack):
        await ack()

    handler = AsyncSocketModeHandler(app, slack.app_token)
    await handler.connect_async()
    try:
        ack = await slack.send_slash_command(user, channel, "status")
    finally:
        await handler.close_async()
    return ack.envelope["payload"]["response_url"]


async def test_a_response_url_takes_five_posts_within_thirty_minutes(slack):
    url = await issued_response_url(slack)
    assert await post_json(url, {"blocks": [section("x" * 3001)]}) == (400, "invalid_blocks")
    assert await post_json(url, {}) == (400, "no_text")
    for n in range(5):
        assert await post_json(url, {"text": f"answer {n}"}) == (200, "ok")
    assert await post_json(url, {"text": "sixth"}) == (404, "used_url")
    assert slack.response_url_uses(url) == 5, "refused posts do not count"
    assert [e["text"] for e in slack.ephemerals("U0ALICE")] == [f"answer {n}" for n in range(5)]

    fresh = await issued_response_url(slack)
    slack.advance_clock(30 * 60 + 1)
    assert await post_json(fresh, {"text": "late"}) == (404, "expired_url")
    assert await post_json(f"{slack.base_url}/response_url/nope", {"text": "x"}) == (
        404,
        "no_service",
    )


async def test_response_url_answers_reach_a_dm_between_people(slack):
    slack.add_conversation("D0ALICEBOB", IM, members=["U0ALICE", "U0BOB"], bot_member=False)
    url = await issued_response_url(slack, "D0ALICEBOB")
    assert await post_json(url, {"text": "only you"}) == (200, "ok")
    assert await post_json(url, {"text": "both", "response_type": "in_channel"}) == (200, "ok")
    assert [e["text"] for e in slack.ephemerals("U0ALICE", "D0ALICEBOB")] == ["only you"]
    assert [m["text"] for m in slack.messages("D0ALICEBOB")] == ["both"]
    assert [m["text"] for m in slack.seen_by("U0BOB")] == ["both"]
    assert await post_json(url, {"text": "edited", "replace_original": True}) == (200, "ok")
    assert [m["text"] for m in slack.messages("D0ALICEBOB")] == ["edited"]
    assert await post_json(url, {"delete_original": True}) == (200, "ok")
    assert slack.messages("D0ALICEBOB") == []


async def test_response_url_thread_ts_must_be_a_parent(slack, client):
    parent = await client.chat_postMessage(channel=CH, text="job")
    url = await issued_response_url(slack)
    body = {"text": "in the thread", "response_type": "in_channel", "thread_ts": parent["ts"]}
    assert await post_json(url, body) == (200, "ok")
    assert [r["text"] for r in slack.thread(CH, parent["ts"])] == ["in the thread"]
    assert await post_json(url, {**body, "thread_ts": "1.000001"}) == (400, "invalid_thread_ts")


async def test_an_ack_payload_with_invalid_blocks_shows_nothing(slack):
    app = AsyncApp(
        client=AsyncWebClient(token=slack.bot_token, base_url=slack.api_url),
        signing_secret=slack.signing_secret,
    )

    @app.command("/spark")
    async def spark(ack):
        await ack(text="t", blocks=[section("x" * 3001)])

    handler = AsyncSocketModeHandler(app, slack.app_token)
    await handler.connect_async()
    try:
        ack = await slack.send_slash_command("U0ALICE", CH, "status")
    finally:
        await handler.close_async()
    assert ack.refused == "invalid_blocks" and "3001" in ack.refusal_details[0]
    assert slack.ephemerals() == []


async def test_an_ack_on_another_connection_does_not_count(slack):
    envelopes: asyncio.Queue = asyncio.Queue()

    async def listener(_, request) -> None:
        await envelopes.put(request.envelope_id)

    conns = []
    for _ in range(2):
        client = SocketModeClient(
            app_token=slack.app_token,
            web_client=AsyncWebClient(token=slack.bot_token, base_url=slack.api_url),
            auto_reconnect_enabled=False,
        )
        client.socket_mode_request_listeners.append(listener)
        await client.connect()
        conns.append(client)
    try:
        await slack.wait_for_connection(2)
        sending = asyncio.create_task(slack.send_slash_command("U0ALICE", CH, "x", timeout=1))
        eid = await envelopes.get()
        other = conns[0]  # the envelope went out on the newest connection
        await other.send_message(json.dumps({"envelope_id": eid}))
        with pytest.raises(AckTimeout):
            await sending
        assert [a.envelope_id for a in slack.stray_acks] == [eid] and slack.acks == []
    finally:
        for client in conns:
            await client.close()


async def test_ssl_check_comes_unsigned(slack):
    seen = []

    async def check(request: web.Request) -> web.Response:
        seen.append((dict(await request.post()), request.headers.get("x-slack-signature")))
        return web.Response(text="")

    app = web.Application()
    app.router.add_post("/slack/events", check)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        url = f"http://127.0.0.1:{runner.addresses[0][1]}/slack/events"
        assert (await slack.send_ssl_check(url)).status == 200
        await slack.send_ssl_check(url, signed=True)
    finally:
        await runner.cleanup()
    assert [(form["ssl_check"], signature is None) for form, signature in seen] == [
        ("1", True),
        ("1", False),
    ]


# --------------------------------------------------------------------------- file shares


async def test_a_file_is_shared_after_the_upload_returns():
    async with SlackStandIn(file_share_delay=None) as slack:
        client = AsyncWebClient(token=slack.bot_token, base_url=slack.api_url)
        parent = await client.chat_postMessage(channel=CH, text="job")
        upload = await client.files_upload_v2(
            channel=CH, thread_ts=parent["ts"], content="log\n", filename="x.log"
        )
        file_id = upload["file"]["id"]
        assert "shares" not in upload["file"] or not upload["file"]["shares"]
        assert (await client.files_info(file=file_id))["file"]["shares"] == {}
        await client.chat_postMessage(channel=CH, thread_ts=parent["ts"], text="next reply")
        assert slack.pending_file_shares == [file_id]
        [shared] = await slack.share_pending_files()
        shares = (await client.files_info(file=file_id))["file"]["shares"]
        assert shares["public"][CH][0]["ts"] == shared["ts"]
        assert [r.get("text") or r["files"][0]["name"] for r in slack.thread(CH, parent["ts"])] == [
            "next reply",
            "x.log",
        ], "a reply posted right after the upload comes before the file, as in Slack"
        e = await api_error(
            client.files_upload_v2(
                channel=CH, thread_ts=shared["ts"], content="again\n", filename="y.log"
            )
        )
        assert e.response["error"] == "invalid_thread_ts", "a reply's ts, not its parent's"
