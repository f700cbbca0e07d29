"""The Slack stand-in, exercised through Bolt's and slack_sdk's real clients."""

from __future__ import annotations

import asyncio
import json
import time

import pytest
from aiohttp import web
from slack_bolt.adapter.socket_mode.async_handler import AsyncSocketModeHandler
from slack_bolt.async_app import AsyncApp
from slack_sdk.errors import SlackApiError
from slack_sdk.http_retry.builtin_async_handlers import AsyncRateLimitErrorRetryHandler
from slack_sdk.signature import SignatureVerifier
from slack_sdk.web.async_client import AsyncWebClient

from tests import secrets
from tests.secrets import planted_in
from tests.slack_standin import AckTimeout, build_signed_slash_command

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
