"""The Slack adapter: the Chat port over the Web API, the Bolt app (`/spark` and the buttons),
Socket Mode (default) or signed HTTP, `/health` and `/metrics`.

Tokens and the signing secret are read here, at the edge, and nowhere else.
"""

from __future__ import annotations

import asyncio
import copy
import logging
from typing import Any
from urllib.parse import urlsplit

import aiohttp
from aiohttp import web
from slack_bolt.adapter.aiohttp import to_aiohttp_response, to_bolt_request
from slack_bolt.async_app import AsyncApp
from slack_sdk.errors import SlackApiError, SlackClientError
from slack_sdk.http_retry.async_handler import AsyncRetryHandler
from slack_sdk.http_retry.builtin_async_handlers import (
    AsyncConnectionErrorRetryHandler,
    AsyncRateLimitErrorRetryHandler,
    AsyncServerErrorRetryHandler,
)
from slack_sdk.http_retry.request import HttpRequest
from slack_sdk.http_retry.response import HttpResponse
from slack_sdk.http_retry.state import RetryState
from slack_sdk.web.async_client import AsyncWebClient
from slack_sdk.webhook.async_client import AsyncWebhookClient

from bot.replay import Refusal, ReplayGuard
from bot.slack_blocks import to_slack
from bot.socket_mode import SocketModeHandler
from handlers.chat import ConversationKind, Posted
from handlers.command_context import Invocation
from handlers.dispatch import Action, Dispatcher
from handlers.errors import ChatError, ChatRefused, ChatUnavailable, RateLimited
from handlers.messages import (
    CANCEL_ACTION,
    CONFIRM_ACTION,
    KEEP_ACTION,
    REPLACE_ACTION,
    Attachment,
    Message,
)
from handlers.metrics import BotMetrics

log = logging.getLogger(__name__)

_INVITE = "invite the bot into the conversation (`/invite @spark-bot`)"
# Slack's answers that no retry changes, and what a person can do about each (the method docs
# of chat.postMessage, chat.postEphemeral, chat.update, files.completeUploadExternal).
REFUSALS: dict[str, str] = {
    "not_in_channel": f"{_INVITE}, or run the command in your direct message with the bot",
    "channel_not_found": "the bot cannot see this conversation (a private channel it is not "
    f"in, or a direct message between people): {_INVITE}, or run the command in a channel the "
    "bot is in or in your direct message with it",
    "is_archived": "the channel is archived: run the command in another channel",
    "user_not_in_channel": "you are not a member of this conversation: join it, or run the "
    "command in your direct message with the bot",
    "messages_tab_disabled": "the bot's Messages tab is off, so it cannot write to you: an admin "
    "turns it on (the app's App Home, Show Tabs, Messages Tab)",
    "restricted_action": "this workspace lets only some members post in that channel: run the "
    "command in another channel",
    "cannot_dm_bot": "the bot cannot write to another bot",
    "cant_update_message": f"the bot is no longer in that channel: {_INVITE} again",
    "message_not_found": "the job's message was deleted: its updates have nowhere to go",
    "thread_not_found": "the job's message was deleted: its thread has nowhere to go",
    "invalid_thread_ts": "the job's message was deleted: its thread has nowhere to go",
    "user_not_found": "Slack knows no such user",
}
KIND_TIMEOUT = 1.5  # s to tell whose direct message a command came from: Slack acks within 3 s
RESPOND_TIMEOUT = 10  # s for one post to a response_url
DIRECT_MESSAGES_KEPT = 10_000  # users whose direct-message ID with the bot is remembered
SHARE_WAIT = 10.0  # s an upload may take to show in its thread before the next reply goes


def make_client(token: str, base_url: str | None = None) -> AsyncWebClient:
    """A Web API client that honours 429 + Retry-After and retries connection and server errors."""
    client = AsyncWebClient(token=token, base_url=base_url or AsyncWebClient.BASE_URL)
    client.retry_handlers = [
        AsyncConnectionErrorRetryHandler(max_retry_count=3),
        AsyncRateLimitErrorRetryHandler(max_retry_count=5),
        AsyncServerErrorRetryHandler(max_retry_count=2),
    ]
    return client


class CountedAnswers(AsyncRetryHandler):
    """Counts every answer of the Web API, each retry's too, in the bot's metrics; never retries
    itself. First among the client's retry handlers, it sees each answer before they do."""

    def __init__(self, metrics: BotMetrics):
        super().__init__(max_retry_count=0)
        self.metrics = metrics

    async def can_retry_async(
        self,
        *,
        state: RetryState,
        request: HttpRequest,
        response: HttpResponse | None = None,
        error: Exception | None = None,
    ) -> bool:
        path = urlsplit(request.url).path
        # a file's upload goes to a URL of its own (an ID in it): one label, not one per upload
        method = path.rsplit("/api/", 1)[1] if "/api/" in path else "file upload"
        if error is not None or response is None:
            self.metrics.slack_answer(method, status=None, error=type(error).__name__)
            return False
        body = response.body if isinstance(response.body, dict) else {}
        failed = response.status_code >= 400 or body.get("ok") is False
        reason = str(body.get("error") or f"http_{response.status_code}") if failed else None
        self.metrics.slack_answer(method, status=response.status_code, error=reason)
        return False


class SlackChat:
    """The Chat port on Slack's Web API (and the response_url of a command or a click)."""

    def __init__(self, client: AsyncWebClient, direct_messages: dict[str, str] | None = None):
        self.client = client
        # user -> the ID of their direct message with the bot (Slack never changes it)
        self.direct_messages = {} if direct_messages is None else direct_messages

    def without_waiting(self) -> SlackChat:
        # a copy of the client, sharing its settings, without the handler that sleeps on a 429
        client = copy.copy(self.client)
        client.retry_handlers = [
            h
            for h in self.client.retry_handlers
            if not isinstance(h, AsyncRateLimitErrorRetryHandler)
        ]
        return SlackChat(client, self.direct_messages)

    async def _call(self, what: str, call) -> Any:
        try:
            return await call
        except SlackApiError as error:
            if error.response.status_code == 429:
                raise RateLimited(what, _retry_after(error.response.headers)) from error
            code = str(error.response.get("error"))
            if code in REFUSALS:
                raise ChatRefused(what, code, REFUSALS[code]) from error
            failed = ChatUnavailable if error.response.status_code >= 500 else ChatError
            raise failed(f"{what}: Slack answered {code}") from error
        except (TimeoutError, SlackClientError, aiohttp.ClientError, OSError) as error:
            raise ChatUnavailable(f"{what}: {type(error).__name__}: {error}") from error

    async def post(
        self, channel: str, message: Message, *, thread: str | None = None, broadcast: bool = False
    ) -> Posted:
        extra: dict[str, Any] = {"thread_ts": thread} if thread else {}
        if thread and broadcast:
            extra["reply_broadcast"] = True
        response = await self._call(
            "chat.postMessage",
            self.client.chat_postMessage(
                channel=channel, unfurl_links=False, **extra, **to_slack(message)
            ),
        )
        return Posted(response["channel"], response["ts"])

    async def update(self, posted: Posted, message: Message) -> None:
        await self._call(
            "chat.update",
            self.client.chat_update(channel=posted.channel, ts=posted.ts, **to_slack(message)),
        )

    async def upload(self, channel: str, thread: str, attachment: Attachment, comment: str) -> None:
        """The file in the thread, returning once Slack shows it there: Slack shares an upload
        after files.completeUploadExternal returns, and a reply posted meanwhile would come
        before it."""
        response = await self._call(
            "files_upload_v2",
            self.client.files_upload_v2(
                channel=channel,
                thread_ts=thread,
                content=attachment.content,
                filename=attachment.filename,
                title=attachment.title,
                initial_comment=comment,
            ),
        )
        for file in response.get("files") or []:
            await self._shared(str(file["id"]), channel)

    async def _shared(self, file: str, channel: str) -> None:
        """Until files.info shows `file` shared in `channel` (at most SHARE_WAIT seconds: past
        that the file comes late, which is no reason to stop the job's messages)."""
        deadline = asyncio.get_running_loop().time() + SHARE_WAIT
        pause = 0.1
        while True:
            try:
                info = await self._call("files.info", self.client.files_info(file=file))
            except ChatError as error:  # e.g. missing_scope (files:read): the order is not kept
                log.warning("could not see whether file %s is shared yet: %s", file, error)
                return
            shares = info.get("file", {}).get("shares") or {}
            if any(channel in shares.get(kind, {}) for kind in ("public", "private")):
                return
            if asyncio.get_running_loop().time() + pause > deadline:
                log.warning(
                    "file %s not shared in %s after %g s; going on", file, channel, SHARE_WAIT
                )
                return
            # Slack sends nothing to wait on here (its file_shared event needs a subscription)
            await asyncio.sleep(pause)
            pause = min(pause * 2, 1.0)

    async def reply_private(
        self, channel: str, user: str, message: Message, *, reply_to: str | None = None
    ) -> None:
        """Through the interaction's response_url, which works in any conversation (also where
        the bot is no member) for 30 minutes and 5 posts; else ephemeral in the channel, which
        needs the bot there; else in the bot's direct message with the user."""
        payload = to_slack(message)
        if reply_to is not None:
            try:
                await self._respond(reply_to, payload)
                return
            except ChatRefused as refused:  # expired, used up: the other ways are still open
                log.info("a private answer to %s: %s; trying the channel", user, refused)
            except ChatUnavailable as down:  # a 5xx or no connection; a timeout may have arrived
                if isinstance(down.__cause__, TimeoutError):
                    raise
                log.info("a private answer to %s: %s; trying the channel", user, down)
        try:
            await self._call(
                "chat.postEphemeral",
                self.client.chat_postEphemeral(channel=channel, user=user, **payload),
            )
            return
        except ChatRefused as refused:
            log.info("a private answer to %s: %s; trying their direct message", user, refused)
        await self._call(
            "chat.postMessage",
            self.client.chat_postMessage(
                channel=await self.direct_message_with(user), unfurl_links=False, **payload
            ),
        )

    async def _respond(self, url: str, payload: dict[str, Any]) -> None:
        webhook = AsyncWebhookClient(url, timeout=RESPOND_TIMEOUT)
        try:
            response = await webhook.send(
                text=payload["text"],
                blocks=payload["blocks"],
                attachments=payload.get("attachments"),
                response_type="ephemeral",
                replace_original=False,
            )
        except (TimeoutError, SlackClientError, aiohttp.ClientError, OSError) as error:
            raise ChatUnavailable(f"response_url: {type(error).__name__}: {error}") from error
        if response.status_code >= 500:
            raise ChatUnavailable(f"response_url: Slack answered HTTP {response.status_code}")
        if response.status_code != 200:
            code = (response.body or "").strip()[:80] or f"http_{response.status_code}"
            raise ChatRefused(
                "response_url", code, "the command's answer link no longer takes answers"
            )

    async def direct_message_with(self, user: str) -> str:
        """The ID of the bot's direct message with `user` (conversations.open opens or resumes it)."""
        known = self.direct_messages.get(user)
        if known is None:
            opened = await self._call(
                "conversations.open", self.client.conversations_open(users=user)
            )
            known = str(opened["channel"]["id"])
            if len(self.direct_messages) >= DIRECT_MESSAGES_KEPT:
                self.direct_messages.clear()
            self.direct_messages[user] = known
        return known

    async def conversation_kind(
        self, channel: str, user: str, channel_name: str | None
    ) -> ConversationKind:
        """Slack gives every direct message an ID starting with D and the name `directmessage`,
        whoever it is between: the asker's own one with the bot is the one conversations.open
        returns for them (a DM between people is not the bot's to see). Unknown: not the bot's."""
        if not (channel.startswith("D") or channel_name == "directmessage"):
            return "channel"
        try:
            own = await asyncio.wait_for(self.direct_message_with(user), KIND_TIMEOUT)
        except (ChatError, TimeoutError) as error:
            log.warning("could not tell whose direct message %s is: %s", channel, error)
            return "unknown_dm"
        return "bot_dm" if own == channel else "people_dm"

    async def upload_private(self, user: str, attachment: Attachment, comment: str) -> None:
        await self._call(
            "files_upload_v2",
            self.client.files_upload_v2(
                channel=await self.direct_message_with(user),
                content=attachment.content,
                filename=attachment.filename,
                title=attachment.title,
                initial_comment=comment,
            ),
        )

    async def permalink(self, posted: Posted) -> str | None:
        response = await self._call(
            "chat.getPermalink",
            self.client.chat_getPermalink(channel=posted.channel, message_ts=posted.ts),
        )
        return response.get("permalink")


def _retry_after(headers: Any) -> float:
    """Seconds from a 429's Retry-After header (1 if it has none, as slack_sdk assumes)."""
    value = next((v for k, v in (headers or {}).items() if k.lower() == "retry-after"), None)
    if isinstance(value, list):
        value = value[0] if value else None
    if value is None:
        return 1.0
    try:
        return max(0.0, float(value))
    except (TypeError, ValueError):
        return 1.0


def build_app(
    dispatcher: Dispatcher, client: AsyncWebClient, signing_secret: str | None
) -> AsyncApp:
    app = AsyncApp(
        client=client,
        signing_secret=signing_secret,
        request_verification_enabled=signing_secret is not None,
    )
    chat = dispatcher.chat if isinstance(dispatcher.chat, SlackChat) else SlackChat(client)

    @app.command("/spark")
    async def spark(ack, command) -> None:
        # the dispatcher answers without waiting for its database or the cluster (work and
        # writes go to tasks), so the ack comes within Slack's 3 s and can carry the reply
        user, channel = command["user_id"], command["channel_id"]
        kind = await chat.conversation_kind(channel, user, command.get("channel_name"))
        reply = await dispatcher.command(
            Invocation(user, channel, command.get("text") or "", kind, command.get("response_url"))
        )
        if reply is None:
            await ack()
        else:
            payload = to_slack(reply)
            await ack(text=payload["text"], blocks=payload["blocks"], response_type="ephemeral")

    async def on_action(ack, body, action, respond) -> None:
        await ack()
        where = body.get("channel") or {}
        channel = where.get("id") or body["container"]["channel_id"]
        user = body["user"]["id"]
        kind = await chat.conversation_kind(channel, user, where.get("name"))
        reply = await dispatcher.action(
            Action(
                user,
                channel,
                action["action_id"],
                action.get("value") or "",
                kind,
                body.get("response_url"),
            )
        )
        if reply is not None:
            payload = to_slack(reply)
            in_place = bool(body.get("container", {}).get("is_ephemeral"))
            await respond(
                text=payload["text"],
                blocks=payload["blocks"],
                response_type="ephemeral",
                replace_original=in_place,
            )

    for action_id in (CANCEL_ACTION, CONFIRM_ACTION, REPLACE_ACTION, KEEP_ACTION):
        app.action(action_id)(on_action)
    return app


class SlackBot:
    """Runs the dispatcher on Slack: Socket Mode (app token) or HTTP (signing secret), plus
    /health and /metrics (the dispatcher's metrics, with the Web API client's answers counted)."""

    def __init__(
        self,
        dispatcher: Dispatcher,
        client: AsyncWebClient,
        *,
        app_token: str | None = None,
        signing_secret: str | None = None,
        http: bool = False,
        host: str = "0.0.0.0",
        port: int = 3000,
    ):
        if http and not signing_secret:
            raise ValueError("HTTP mode needs SLACK_SIGNING_SECRET")
        if not http and not app_token:
            raise ValueError("Socket Mode needs SLACK_APP_TOKEN")
        self.dispatcher = dispatcher
        self.metrics = dispatcher.metrics
        client.retry_handlers = [CountedAnswers(self.metrics), *client.retry_handlers]
        self.client = client
        self.http = http
        self.app = build_app(dispatcher, client, signing_secret if http else None)
        self.replays = (
            ReplayGuard(signing_secret, on_refused=self._audit_refusal)
            if http and signing_secret
            else None
        )
        self.app_token = app_token
        self.host, self.port = host, port
        self.socket: SocketModeHandler | None = None
        self._runner: web.AppRunner | None = None
        self._http_ready = False

    async def connected(self) -> bool:
        if self.http:
            return self._http_ready
        return self.socket is not None and await self.socket.client.is_connected()

    async def _health(self, request: web.Request) -> web.Response:
        connected = await self.connected()
        body = {"ok": connected, "mode": "http" if self.http else "socket", "connected": connected}
        return web.json_response(body, status=200 if connected else 503)

    async def _metrics(self, request: web.Request) -> web.Response:
        body, content_type = self.metrics.exposition(request.headers.get("Accept", ""))
        return web.Response(body=body, headers={"Content-Type": content_type})

    async def _events(self, request: web.Request) -> web.Response:
        bolt_request = await to_bolt_request(request)
        assert self.replays is not None  # HTTP mode has a signing secret
        return await to_aiohttp_response(
            await self.replays.handle(bolt_request, self.app.async_dispatch)
        )

    def _audit_refusal(self, refusal: Refusal) -> None:
        self.dispatcher.audit(
            refusal.user, refusal.channel, refusal.what, f"refused: {refusal.why}"
        )

    async def start(self) -> None:
        await self.dispatcher.start()
        web_app = web.Application()
        web_app.router.add_get("/health", self._health)
        web_app.router.add_get("/metrics", self._metrics)
        if self.http:
            web_app.router.add_post("/slack/events", self._events)
        self._runner = web.AppRunner(web_app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port)
        await site.start()
        if self.port == 0:
            self.port = self._runner.addresses[0][1]
        if self.http:
            await self.client.auth_test()  # a bad token fails here, not on the first command
            self._http_ready = True
        else:
            assert self.app_token is not None  # required without HTTP (the constructor checks)
            self.socket = SocketModeHandler(self.app, self.app_token)
            await self.socket.connect_async()
        log.info(
            "spark-bot on Slack (%s), health on :%s/health, metrics on /metrics",
            "HTTP" if self.http else "Socket Mode",
            self.port,
        )

    async def stop(self) -> None:
        if self.socket is not None:
            await self.socket.close_async()
        await self.dispatcher.stop()
        if self._runner is not None:
            await self._runner.cleanup()
        self._http_ready = False
