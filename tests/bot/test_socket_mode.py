"""An ack whose Socket Mode connection is gone goes out on a new one (bot.socket_mode), where
slack_sdk's client gives up when its reconnection has not begun: here nothing reconnects on its
own (auto-reconnect off), so only the resend can bring the ack through."""

from __future__ import annotations

import asyncio
import json

import pytest
from slack_bolt.adapter.socket_mode.async_handler import AsyncSocketModeHandler
from slack_bolt.app.async_app import AsyncApp
from slack_sdk.socket_mode.aiohttp import SocketModeClient

from bot.slack import make_client
from bot.socket_mode import ResendingSocketModeClient, SocketModeHandler
from testkit.slack_bot import ALICE, CH

pytestmark = pytest.mark.timeout(60)


async def ack_after_a_drop(slack, client_type: type[SocketModeClient]) -> list:
    client = client_type(
        app_token=slack.app_token, web_client=make_client(slack.bot_token, slack.api_url)
    )
    envelopes: asyncio.Queue = asyncio.Queue()

    async def listener(_, request) -> None:
        await envelopes.put(request.envelope_id)

    client.socket_mode_request_listeners.append(listener)
    try:
        await client.connect()
        client.auto_reconnect_enabled = False
        sending = asyncio.create_task(
            slack.send_slash_command(ALICE, CH, "status", timeout=3, drop_after_send=True)
        )
        envelope_id = await envelopes.get()
        await slack.wait_until(lambda: all(c.closed_at for c in slack.connections))
        try:
            await client.send_message(json.dumps({"envelope_id": envelope_id}))
        finally:
            ack = await asyncio.gather(sending, return_exceptions=True)
        return ack
    finally:
        await client.close()


async def test_the_ack_goes_out_on_a_new_connection(slack):
    # whether Slack takes an ack on another connection is undocumented: the stand-in refuses it
    # unless told to, and the resend is worth something only where Slack takes it
    slack.ack_on_any_connection = True
    [ack] = await ack_after_a_drop(slack, ResendingSocketModeClient)
    assert not isinstance(ack, BaseException), ack
    assert ack.connection_id == 2, "on the connection opened for it"


async def test_slack_sdks_own_client_loses_it(slack):
    # the reason for bot.socket_mode: should slack_sdk come to resend, this fails, and the
    # resending client can go
    with pytest.raises(ConnectionError):
        await ack_after_a_drop(slack, SocketModeClient)


async def test_the_handler_sets_what_bolts_own_constructor_sets(slack):
    app = AsyncApp(client=make_client(slack.bot_token, slack.api_url), signing_secret="s")
    ours, bolts = (
        SocketModeHandler(app, slack.app_token),
        AsyncSocketModeHandler(app, slack.app_token),
    )
    try:
        assert set(vars(ours)) == set(vars(bolts))
        assert ours.client.socket_mode_request_listeners == [ours.handle]
    finally:
        await ours.client.close()
        await bolts.client.close()
