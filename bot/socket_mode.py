"""Socket Mode whose acknowledgements survive a dropped connection.

A command can arrive on a socket that drops before the bot acknowledges it. slack_sdk then
tries once more, at once, and gives up when its reconnection has not happened yet ("The
current session ... is no longer active"): the command runs, yet Slack shows the user an error
after 3 s. Here the ack goes out again on the next connection, opened now if it is not open
yet; Slack takes an envelope's ack on any of the app's connections.
"""

from __future__ import annotations

from slack_bolt.adapter.socket_mode.async_handler import AsyncSocketModeHandler
from slack_bolt.app.async_app import AsyncApp
from slack_sdk.socket_mode.aiohttp import SocketModeClient


class ResendingSocketModeClient(SocketModeClient):
    async def send_message(self, message: str) -> None:
        try:
            await super().send_message(message)
        except ConnectionError:
            if self.closed:  # the bot is stopping: no new connection
                raise
            await self.connect_to_new_endpoint()  # nothing to do if the monitor already did
            await super().send_message(message)


class SocketModeHandler(AsyncSocketModeHandler):
    """Bolt's handler on the client above (Bolt's constructor builds its own client, and a
    client opens an HTTP session as it is made: replacing it afterwards would leak one). Its
    constructor is Bolt's own (slack-bolt 1.30's aiohttp adapter) with that one change;
    tests/bot/test_socket_mode.py checks it sets what Bolt's sets."""

    def __init__(self, app: AsyncApp, app_token: str, *, ping_interval: float = 10):
        self.app = app
        self.app_token = app_token
        self.client = ResendingSocketModeClient(
            app_token=app_token,
            logger=app.logger,
            web_client=app.client,
            ping_interval=ping_interval,
        )
        self.client.socket_mode_request_listeners.append(self.handle)  # type: ignore[arg-type]
