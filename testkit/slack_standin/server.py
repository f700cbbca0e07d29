"""SlackStandIn: a local Slack (Web API + Socket Mode + response_url + file uploads), as strict
as Slack documents it.

Runs an aiohttp server on 127.0.0.1 with an ephemeral port. Bolt's real clients talk
to it unchanged:

    async with SlackStandIn() as slack:
        client = AsyncWebClient(token=slack.bot_token, base_url=slack.api_url)
        app = AsyncApp(client=client, signing_secret=slack.signing_secret)
        handler = AsyncSocketModeHandler(app, slack.app_token)  # uses app.client
        await handler.connect_async()
        ack = await slack.send_slash_command("U0ALICE", "C0SPARKOPS", "launch")

Conversations (conversations.py) are public or private channels, DMs and group DMs, each with
its members. The defaults, C0SPARKOPS (#spark-ops) and C0GENERAL (#general), are public, with
the bot and every user in them; `add_conversation` makes the others, `bot_dm(user)` is the bot's
own DM with a user (the ID `conversations.open` gives, the same every time).

What each Web API method refuses, and with which code, is what Slack documents for it
(web_api_methods.json, held against the stand-in by test_fidelity.py):

- chat.postMessage: a conversation the bot cannot see (a private channel, DM or group DM it is
  not in, an unknown ID) `channel_not_found`; a public channel it is not in `not_in_channel`
  (unless the app has `chat:write.public`: `SlackStandIn(chat_write_public=True)`); archived
  `is_archived`; the bot's DM while the app's Messages tab is off (`messages_tab_enabled=False`;
  on by default, as our manifest turns it on) `messages_tab_disabled`; `thread_ts` naming no
  message `thread_not_found` (a reply's ts goes to its parent's thread, as Slack does).
- chat.postEphemeral: as chat.postMessage, `chat:write.public` aside (it covers posts only), and
  the user must be in the conversation too (`user_not_in_channel`).
- chat.update: a conversation the bot cannot see `channel_not_found`; a message that is not
  there `message_not_found`; a public channel the bot has left `cant_update_message`; text over
  4,000 characters `msg_too_long` (the method's docs).
- files.completeUploadExternal: the channel as for chat.postEphemeral (`channel_not_found`,
  `not_in_channel`: `chat:write.public` is for chat.postMessage only, so the strict reading gives
  it no say here). `thread_ts` must be a parent message's ts: the docs say "never use a reply's
  ts value; use its parent instead" and list no error for it; the stand-in takes the strict
  reading and refuses a reply's ts (and one naming no message) with `invalid_thread_ts`, the
  code files.upload (the method it replaces, with the same rule) documents. The file is shared
  into the conversation later, as Slack processes uploads asynchronously: `file_share_delay`
  seconds after the call returns (0.2 s by default, so a reply posted right after the upload
  lands before the file, as it would in Slack), or only when the test calls
  `await slack.share_pending_files()` (`file_share_delay=None`). files.info has `shares` only
  once shared; `wait_for_file_shared(file_id)` waits for it.
- conversations.info: what the bot can see (`is_im`, `user`, `is_private`, `is_member`, ...);
  else `channel_not_found`. conversations.open: the bot's DM with one user, a group DM with
  several.
- Block Kit limits (blocks.py) on every path: Web API posts and updates, ack payloads (a refused
  ack payload shows the user nothing: `Ack.refused`), response_url bodies (HTTP 400
  `invalid_blocks`). Each method answers too long blocks with the code its docs have
  (`msg_blocks_too_long` for chat.postMessage only; `invalid_blocks` elsewhere).
- Tokens: none `not_authed`, unknown `invalid_auth`, revoked (`revoke_token`) `token_revoked`,
  the wrong kind `not_allowed_token_type`; rate limits HTTP 429 `ratelimited` with Retry-After.

response_url (https://docs.slack.dev/interactivity/handling-user-interaction): each slash command
and each button click carries its own. Up to 5 posts within 30 minutes (the stand-in's clock:
`advance_clock(seconds)`, no sleeping); past them HTTP 404 `used_url` / `expired_url`, an unknown
URL 404 `no_service`, a body that is not JSON 400 `invalid_payload`, one without text or blocks 400
`no_text`; refused posts do not count. `response_type` `ephemeral` (the default: only the asker
sees it, in any conversation, a DM between two people too) or `in_channel` (posted as the app
into the conversation it came from, whichever kind: Slack posts response_url messages even where
the bot is not a member); `replace_original` / `delete_original` act on the message the button was
on (for a slash command, on the last message its response_url posted); `thread_ts` (of a parent in
that conversation, else 400 `invalid_thread_ts`) puts the message in that thread.

Slash commands: Slack sends `channel_name` `directmessage` from any DM, `privategroup` from private
channels and group DMs, the channel's name elsewhere. A user can type one only where they are a
member, and never in a thread (https://docs.slack.dev/interactivity/implementing-slash-commands:
"cannot, however, be invoked in message threads"): `send_slash_command` has no thread argument.

Undocumented, so read strictly:
- An ack counts only on the Socket Mode connection its envelope went out on; one sent on another
  connection is kept in `stray_acks` and the envelope times out (`AckTimeout`).
  `SlackStandIn(ack_on_any_connection=True)` accepts it, for tests of that lenient reading.
- `ssl_check` (HTTP mode's URL check, `send_ssl_check`) comes unsigned by default: an app must
  answer it without a signature (and do nothing else for an unsigned request).
"""

from __future__ import annotations

import asyncio
import copy
import itertools
import json
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode

import aiohttp
from aiohttp import WSMsgType, web

from testkit import planted_secrets as secrets

from .blocks import MAX_BLOCKS_JSON_CHARS, find_button, parse_blocks, validate_blocks
from .conversations import IM, MPIM, PRIVATE, PUBLIC, Conversation
from .documented import documented_errors
from .signing import (
    DEFAULT_APP_ID,
    DEFAULT_TEAM_DOMAIN,
    DEFAULT_TEAM_ID,
    build_signed_slash_command,
    sign_body,
)

MAX_MESSAGE_TEXT = 40_000
MAX_UPDATE_TEXT = 4_000  # chat.update's docs: "The text field cannot exceed 4,000 characters"
RESPONSE_URL_LIFETIME = 30 * 60
RESPONSE_URL_USES = 5
DEFAULT_FILE_SHARE_DELAY = 0.2
# Slack shows the user an error for a command not acknowledged within 3 s. That is a speed,
# measured by benchmarks/command_load.py (`Ack.in_time`), not something a test waits on: a busy
# machine can hold any process for seconds. A test waits for the ack as an event; one that does
# not come within ACK_TIMEOUT was lost (AckTimeout).
SLACK_ACK_DEADLINE = 3.0
ACK_TIMEOUT = 20.0
# How long a wait for an event (a call, a connection, a condition) lasts before it fails the
# test: a guard against a hang, not a speed, so it is long enough for a machine under load.
WAIT_TIMEOUT = 20.0

# The codes the stand-in's own checks give, per method (beyond the token and rate-limit answers
# every method gives). `_dispatch` refuses to answer anything else; test_fidelity.py holds each
# against what Slack documents and makes the stand-in give each one.
CONTENT_ERRORS = {"invalid_blocks", "invalid_blocks_format", "no_text"}
METHOD_ERRORS: dict[str, set[str]] = {
    "auth.test": set(),
    "apps.connections.open": set(),
    "chat.postMessage": {
        "channel_not_found",
        "not_in_channel",
        "is_archived",
        "messages_tab_disabled",
        "thread_not_found",
        "msg_blocks_too_long",
        *CONTENT_ERRORS,
    },
    "chat.update": {
        "channel_not_found",
        "cant_update_message",
        "message_not_found",
        "msg_too_long",
        *CONTENT_ERRORS,
    },
    "chat.postEphemeral": {
        "channel_not_found",
        "not_in_channel",
        "user_not_in_channel",
        "is_archived",
        "messages_tab_disabled",
        "msg_too_long",
        *CONTENT_ERRORS,
    },
    "chat.getPermalink": {"channel_not_found", "message_not_found"},
    "reactions.add": {
        "channel_not_found",
        "is_archived",
        "invalid_name",
        "message_not_found",
        "already_reacted",
    },
    "users.info": {"user_not_found"},
    "conversations.info": {"channel_not_found"},
    "conversations.open": {"users_list_not_supplied", "user_not_found", "channel_not_found"},
    "files.getUploadURLExternal": {"missing_argument"},
    "files.completeUploadExternal": {
        "file_not_found",
        "channel_not_found",
        "not_in_channel",
        "invalid_thread_ts",
        "invalid_blocks",
    },
    "files.info": {"file_not_found"},
}
TOKEN_ERRORS = {"not_authed", "invalid_auth", "token_revoked", "not_allowed_token_type"}


class AckTimeout(AssertionError):
    """The app did not acknowledge an envelope at all (within `ack_timeout`)."""


# --------------------------------------------------------------------------- records


@dataclass
class Call:
    """One Web API call (or upload POST, method "files.upload.bytes") as the stand-in saw it."""

    seq: int
    method: str
    params: dict[str, Any]
    token: str | None
    time: float  # time.monotonic() when received
    wall_time: float
    http_method: str = "POST"
    content_type: str = ""
    status: int = 200
    result: dict[str, Any] | None = None  # None when the connection was dropped
    dropped: bool = False
    notes: list[str] = field(default_factory=list)  # e.g. "text_truncated"

    @property
    def ok(self) -> bool:
        return bool(self.result and self.result.get("ok"))

    @property
    def error(self) -> str | None:
        return None if self.result is None else self.result.get("error")


@dataclass
class Ack:
    envelope_id: str
    type: str  # "slash_commands" / "interactive"
    envelope: dict[str, Any]
    payload: dict[str, Any] | None  # what the app put in its ack (None if empty)
    latency: float  # seconds from envelope sent to ack received
    connection_id: int
    sent_at: float = 0.0  # time.monotonic() when the envelope was sent
    refused: str | None = None  # Slack's error for a payload it would not show (invalid_blocks)
    refusal_details: list[str] = field(default_factory=list)

    @property
    def in_time(self) -> bool:
        """Within Slack's deadline (else Slack would have shown the user an error)."""
        return self.latency <= SLACK_ACK_DEADLINE


@dataclass
class ResponseUrlPost:
    seq: int
    key: str
    envelope_id: str | None
    body: dict[str, Any]
    time: float
    status: int = 200
    answer: str = "ok"  # Slack's text answer: "ok", or the error ("used_url", "invalid_blocks"...)

    @property
    def ok(self) -> bool:
        return self.status == 200

    @property
    def response_type(self) -> str:
        return self.body.get("response_type", "ephemeral")

    @property
    def text(self) -> str | None:
        return self.body.get("text")


@dataclass
class SocketConnection:
    id: int
    ws: web.WebSocketResponse
    ticket: str
    opened_at: float
    closed_at: float | None = None
    pings: int = 0
    received: list[dict[str, Any]] = field(default_factory=list)

    @property
    def open(self) -> bool:
        return self.closed_at is None and not self.ws.closed


@dataclass
class _Fault:
    kind: str  # "ratelimit" / "error" / "drop"
    retry_after: int = 1
    error: str = "internal_error"
    status: int = 200


@dataclass
class _ResponseUrl:
    kind: str  # "slash_commands" / "interactive"
    channel: str
    user: str
    issued_at: float
    message_ts: str | None = None  # the message an interactive response_url's button was on
    envelope_id: str | None = None
    uses: int = 0
    last_posted: str | None = None  # the ts of the message (or ephemeral) it last posted


class _Dropped(Exception):
    pass


class _Refused(Exception):
    def __init__(self, error: str, **extra: Any):
        super().__init__(error)
        self.answer = {"ok": False, "error": error, **extra}


def _truthy(v: Any) -> bool:
    if isinstance(v, str):
        return v.lower() in ("1", "true", "yes")
    return bool(v)


def _json_arg(value: Any) -> Any:
    return json.loads(value) if isinstance(value, str) else value


# --------------------------------------------------------------------------- stand-in


class SlackStandIn:
    """A faithful local Slack for tests. Use as ``async with SlackStandIn() as slack``."""

    def __init__(
        self,
        *,
        bot_token: str = secrets.SLACK_BOT_TOKEN,
        app_token: str = secrets.SLACK_APP_TOKEN,
        signing_secret: str = secrets.SLACK_SIGNING_SECRET,
        team_id: str = DEFAULT_TEAM_ID,
        team_domain: str = DEFAULT_TEAM_DOMAIN,
        app_id: str = DEFAULT_APP_ID,
        bot_user_id: str = "U0SPARKBOT",
        bot_id: str = "B0SPARKBOT",
        channels: dict[str, str] | None = None,
        users: dict[str, str] | None = None,
        blocks_max_chars: int = MAX_BLOCKS_JSON_CHARS,
        ack_timeout: float = ACK_TIMEOUT,
        chat_write_public: bool = False,
        messages_tab_enabled: bool = True,
        file_share_delay: float | None = DEFAULT_FILE_SHARE_DELAY,
        ack_on_any_connection: bool = False,
        clock: Callable[[], float] = time.monotonic,
        host: str = "127.0.0.1",
    ) -> None:
        """`channels`: id -> name of the public channels every user (and the bot) is in
        (default C0SPARKOPS and C0GENERAL). `chat_write_public`: the app has that scope.
        `messages_tab_enabled`: the App Home's Messages tab (off, the bot's DMs refuse posts).
        `file_share_delay`: seconds from files.completeUploadExternal to the file's share (None:
        at `share_pending_files()` only). `clock`: what response_url lifetimes are measured by
        (`advance_clock` moves it on)."""
        self.host = host  # where it listens; another address lets e.g. a lab node reach it
        self.bot_tokens = {bot_token}
        self.app_tokens = {app_token}
        self.revoked_tokens: set[str] = set()
        self.bot_token = bot_token
        self.app_token = app_token
        self.signing_secret = signing_secret
        self.team_id = team_id
        self.team_domain = team_domain
        self.app_id = app_id
        self.bot_user_id = bot_user_id
        self.bot_id = bot_id
        self.blocks_max_chars = blocks_max_chars
        self.ack_timeout = ack_timeout
        self.chat_write_public = chat_write_public
        self.messages_tab_enabled = messages_tab_enabled
        self.file_share_delay = file_share_delay
        self.ack_on_any_connection = ack_on_any_connection
        self._clock = clock
        self._clock_offset = 0.0
        self.users: dict[str, str] = dict(
            users if users is not None else {"U0ALICE": "alice", "U0BOB": "bob"}
        )
        self.users.setdefault(bot_user_id, "spark-bot")
        public = (
            channels
            if channels is not None
            else {"C0SPARKOPS": "spark-ops", "C0GENERAL": "general"}
        )
        self.default_channels = list(public)
        self.conversations: dict[str, Conversation] = {}
        for cid, name in public.items():
            self.add_conversation(cid, PUBLIC, name)

        self._calls: list[Call] = []
        self._seq = itertools.count(1)
        self._changed: asyncio.Condition | None = None
        self._faults: dict[str, deque[_Fault]] = {}
        self._share: tuple | None = None  # (every, methods, Retry-After values, per method)
        self._share_seen: dict[str, int] = {}  # calls so far (per method, or all as "*")
        self._share_refused = 0
        self._last_ts_us = 0
        self._file_seq = itertools.count(1)
        self._block_seq = itertools.count(1)

        # channel -> ts -> message (parents and replies both live here, ordered by ts)
        self._store: dict[str, dict[str, dict[str, Any]]] = {}
        self._ephemerals: list[dict[str, Any]] = []
        self._files: dict[str, dict[str, Any]] = {}
        self._upload_keys: dict[str, str] = {}  # upload key -> file id
        self._pending_shares: list[dict[str, Any]] = []
        self._share_timers: list[asyncio.TimerHandle] = []
        self._share_tasks: set[asyncio.Task] = set()

        self._tickets: dict[str, int] = {}  # ticket -> times used
        self.connections: list[SocketConnection] = []
        self._conn_seq = itertools.count(1)
        self._pending: dict[str, asyncio.Future] = {}
        self._sent_at: dict[str, float] = {}
        self._sent_on: dict[str, int] = {}  # envelope id -> the connection it went out on
        self._envelopes: dict[str, dict[str, Any]] = {}
        self.acks: list[Ack] = []
        self.late_acks: list[Ack] = []
        self.stray_acks: list[Ack] = []  # acks on a connection their envelope did not go out on
        self.responses: list[ResponseUrlPost] = []
        self._response_urls: dict[str, _ResponseUrl] = {}

        self._runner: web.AppRunner | None = None
        self.port: int | None = None
        self._http: aiohttp.ClientSession | None = None

    # ------------------------------------------------------------------ lifecycle

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def api_url(self) -> str:
        """Pass as ``AsyncWebClient(base_url=...)`` (trailing slash, like slack_sdk's default)."""
        return f"{self.base_url}/api/"

    async def start(self) -> SlackStandIn:
        self._changed = asyncio.Condition()
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_route("*", "/api/{method}", self._handle_api)
        app.router.add_post("/upload/v1/{key}", self._handle_upload)
        app.router.add_get("/link/", self._handle_ws)
        app.router.add_get("/link", self._handle_ws)
        app.router.add_post("/response_url/{key}", self._handle_response_url)
        self._runner = web.AppRunner(
            app, handle_signals=False, access_log=None, shutdown_timeout=1.0
        )
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, 0)
        await site.start()
        self.port = self._runner.addresses[0][1]
        return self

    async def stop(self) -> None:
        for timer in self._share_timers:
            timer.cancel()
        for task in self._share_tasks:
            task.cancel()
        for c in self.connections:
            if not c.ws.closed:
                await c.ws.close(code=aiohttp.WSCloseCode.GOING_AWAY)
        for fut in self._pending.values():
            if not fut.done():
                fut.cancel()
        if self._http is not None:
            await self._http.close()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> SlackStandIn:
        return await self.start()

    async def __aexit__(self, *exc: Any) -> None:
        await self.stop()

    # ------------------------------------------------------------------ clock

    def now(self) -> float:
        """The stand-in's clock (what response_url lifetimes are measured by)."""
        return self._clock() + self._clock_offset

    def advance_clock(self, seconds: float) -> None:
        self._clock_offset += seconds

    # ------------------------------------------------------------------ registry

    def add_conversation(
        self,
        conversation_id: str,
        kind: str = PUBLIC,
        name: str | None = None,
        *,
        members: Iterable[str] | None = None,
        bot_member: bool = True,
        archived: bool = False,
    ) -> Conversation:
        """A conversation of `kind` (PUBLIC, PRIVATE, IM, MPIM). `members`: its people (default:
        every user the stand-in knows; for a DM, the one or two people in it); `bot_member`: the
        bot is in it too (for a DM: it is the bot's DM with its one person)."""
        people = set(members) if members is not None else set(self.users) - {self.bot_user_id}
        for user in people:
            self.users.setdefault(user, user.lower())
        if bot_member:
            people.add(self.bot_user_id)
        if kind in (PUBLIC, PRIVATE) and name is None:
            name = conversation_id.lower()
        conversation = Conversation(conversation_id, kind, name, people, archived)
        self.conversations[conversation_id] = conversation
        return conversation

    def add_channel(self, channel_id: str, name: str | None = None) -> Conversation:
        """A public channel with the bot and every user in it."""
        return self.add_conversation(channel_id, PUBLIC, name)

    def add_user(
        self, user_id: str, name: str | None = None, *, member_of: Iterable[str] | None = None
    ) -> None:
        """A user, in the conversations `member_of` (default: the default public channels)."""
        self.users[user_id] = name or user_id.lower()
        for cid in self.default_channels if member_of is None else member_of:
            self.conversations[cid].members.add(user_id)

    def bot_dm(self, user_id: str) -> str:
        """The ID of the bot's own DM with `user_id` (made on first use, as `conversations.open`
        does; the same ID every time)."""
        if user_id not in self.users or user_id == self.bot_user_id:
            raise LookupError(f"no user {user_id} to have a DM with")
        for c in self.conversations.values():
            if c.kind == IM and c.members == {self.bot_user_id, user_id}:
                return c.id
        cid = "D" + user_id[1:]
        self.add_conversation(cid, IM, members=[user_id])
        return cid

    def join(self, conversation_id: str, user_id: str | None = None) -> None:
        """`user_id` (default: the bot, as when invited) joins the conversation."""
        conversation = self.conversations[conversation_id]
        if conversation.kind == IM:
            raise ValueError("nobody joins a DM")
        conversation.members.add(user_id or self.bot_user_id)

    def leave(self, conversation_id: str, user_id: str | None = None) -> None:
        """`user_id` (default: the bot, as when removed) leaves the conversation."""
        self.conversations[conversation_id].members.discard(user_id or self.bot_user_id)

    def archive(self, conversation_id: str) -> None:
        self.conversations[conversation_id].archived = True

    def add_token(self, token: str) -> None:
        (self.app_tokens if token.startswith("xapp-") else self.bot_tokens).add(token)

    def revoke_token(self, token: str) -> None:
        """Calls with `token` answer `token_revoked` from now on (the app was uninstalled)."""
        self.revoked_tokens.add(token)

    # ------------------------------------------------------------------ fault arming

    def rate_limit(self, method: str, times: int = 1, retry_after: int = 1) -> None:
        """Answer the next `times` calls of `method` with HTTP 429 + Retry-After."""
        q = self._faults.setdefault(method, deque())
        q.extend(_Fault("ratelimit", retry_after=retry_after) for _ in range(times))

    def rate_limit_share(
        self,
        every: int,
        methods: list[str],
        retry_after: int | Sequence[int] = 1,
        *,
        per_method: bool = False,
    ) -> None:
        """Answer every `every`-th call of `methods` (counted together, or each method on its own
        with `per_method`; after any armed fault) with HTTP 429 + Retry-After, until
        `rate_limit_share(0, [])`. A sequence of Retry-After values is used in turn, one per
        refusal."""
        waits = (retry_after,) if isinstance(retry_after, int) else tuple(retry_after)
        self._share = (every, set(methods), waits, per_method) if every else None
        self._share_seen = {}
        self._share_refused = 0

    def fail(
        self, method: str, error: str = "internal_error", times: int = 1, status: int = 200
    ) -> None:
        """Answer the next `times` calls with {"ok": false, "error": error} (HTTP `status`).
        An answer below 500 must be one Slack documents for `method` (web_api_methods.json); a
        5xx is an outage, whatever its body says."""
        if status < 500 and error not in documented_errors(method):
            raise ValueError(f"Slack documents no {error!r} for {method}")
        q = self._faults.setdefault(method, deque())
        q.extend(_Fault("error", error=error, status=status) for _ in range(times))

    def drop_connection(self, method: str, times: int = 1) -> None:
        """Close the TCP connection without answering the next `times` calls."""
        q = self._faults.setdefault(method, deque())
        q.extend(_Fault("drop") for _ in range(times))

    # ------------------------------------------------------------------ query helpers

    def calls(self, method: str | None = None) -> list[Call]:
        return [c for c in self._calls if method is None or c.method == method]

    def messages(self, channel: str) -> list[dict[str, Any]]:
        """Current state of `channel`: parent messages (ts order), each with "replies"."""
        msgs = self._store.get(channel, {})
        parents = []
        for ts in sorted(msgs, key=float):
            m = msgs[ts]
            if m.get("thread_ts") and m["thread_ts"] != ts:
                continue
            p = copy.deepcopy(m)
            p["replies"] = [
                copy.deepcopy(r)
                for rts, r in sorted(msgs.items(), key=lambda kv: float(kv[0]))
                if r.get("thread_ts") == ts and rts != ts
            ]
            parents.append(p)
        return parents

    def sent_by_apps(self) -> list[tuple]:
        """(where, text) for everything an app sent: each call's params, each ack's payload, each
        response_url post, each uploaded file's content (the token of a call is not included)."""
        sent = [(f"{c.method} #{c.seq}", json.dumps(c.params, default=repr)) for c in self._calls]
        sent += [
            (f"ack of {a.envelope_id}", json.dumps(a.payload))
            for a in self.acks + self.late_acks + self.stray_acks
        ]
        sent += [(f"response_url post #{r.seq}", json.dumps(r.body)) for r in self.responses]
        sent += [
            (f"file {f['id']}", (f["content"] or b"").decode(errors="replace"))
            for f in self._files.values()
        ]
        return sent

    def message(self, channel: str, ts: str) -> dict[str, Any] | None:
        m = self._store.get(channel, {}).get(ts)
        return copy.deepcopy(m) if m else None

    def thread(self, channel: str, thread_ts: str) -> list[dict[str, Any]]:
        """Replies in a thread (excluding the parent), in order."""
        for p in self.messages(channel):
            if p["ts"] == thread_ts:
                return p["replies"]
        return []

    def ephemerals(
        self, user_id: str | None = None, channel: str | None = None
    ) -> list[dict[str, Any]]:
        """What was shown to `user_id` alone (chat.postEphemeral, ack payloads, ephemeral
        response_url posts), in order; each has "channel", "user", "text", "blocks", "source"."""
        return [
            copy.deepcopy(e)
            for e in self._ephemerals
            if (user_id is None or e.get("user") == user_id)
            and (channel is None or e.get("channel") == channel)
        ]

    def seen_by(self, user_id: str) -> list[dict[str, Any]]:
        """Everything `user_id` can see, in ts order: messages (replies too) of the conversations
        they are in, and what was shown to them alone. Each has "channel" and "ts"."""
        seen = [
            copy.deepcopy(m)
            for cid, msgs in self._store.items()
            if user_id in self.conversations[cid].members
            for m in msgs.values()
        ] + self.ephemerals(user_id)
        return sorted(seen, key=lambda m: float(m["ts"]))

    def files(self) -> dict[str, dict[str, Any]]:
        return copy.deepcopy(self._files)

    # ------------------------------------------------------------------ waiting (event-driven)

    async def _notify(self) -> None:
        assert self._changed is not None
        async with self._changed:
            self._changed.notify_all()

    async def _wait(self, find: Callable[[], Any], timeout: float, what: str) -> Any:
        assert self._changed is not None
        result: list[Any] = []

        def check() -> bool:
            r = find()
            if r is not None:
                result.append(r)
                return True
            return False

        async with self._changed:
            try:
                await asyncio.wait_for(self._changed.wait_for(check), timeout)
            except TimeoutError:
                raise TimeoutError(f"timed out after {timeout}s waiting for {what}") from None
        return result[0]

    async def wait_until(self, condition: Callable[[], Any], timeout: float = WAIT_TIMEOUT) -> Any:
        """Wait (event-driven) until `condition()` returns something truthy; return it.
        Re-evaluated whenever the stand-in records anything (calls, acks, responses, sockets)."""
        return await self._wait(lambda: condition() or None, timeout, "condition")

    async def wait_for(
        self,
        predicate: Callable[[Call], bool],
        timeout: float = WAIT_TIMEOUT,
        *,
        after: int = 0,
    ) -> Call:
        """The first recorded call (with seq > `after`) matching `predicate`."""

        def find() -> Call | None:
            for c in self._calls:
                if c.seq > after and predicate(c):
                    return c
            return None

        return await self._wait(find, timeout, "a matching call")

    async def wait_for_call(
        self, method: str, timeout: float = WAIT_TIMEOUT, *, after: int = 0, **params: Any
    ) -> Call:
        """The first call of `method` whose params include all of `params`."""
        return await self.wait_for(
            lambda c: c.method == method and all(c.params.get(k) == v for k, v in params.items()),
            timeout,
            after=after,
        )

    async def wait_for_calls(
        self, method: str, count: int, timeout: float = WAIT_TIMEOUT
    ) -> list[Call]:
        return await self._wait(
            lambda: (lambda cs: cs if len(cs) >= count else None)(self.calls(method)),
            timeout,
            f"{count} {method} calls",
        )

    async def wait_for_response(
        self,
        predicate: Callable[[ResponseUrlPost], bool] | None = None,
        timeout: float = WAIT_TIMEOUT,
        *,
        after: int = 0,
    ) -> ResponseUrlPost:
        """The first POST to a response_url (seq > `after`) matching `predicate`."""

        def find() -> ResponseUrlPost | None:
            for r in self.responses:
                if r.seq > after and (predicate is None or predicate(r)):
                    return r
            return None

        return await self._wait(find, timeout, "a response_url post")

    async def wait_for_file_shared(self, file_id: str, timeout: float = WAIT_TIMEOUT) -> dict:
        """Wait until the file is shared into its conversation; return its share message."""
        return await self._wait(
            lambda: self._files.get(file_id, {}).get("share_message"),
            timeout,
            f"file {file_id} shared",
        )

    async def wait_for_connection(
        self, count: int = 1, timeout: float = WAIT_TIMEOUT
    ) -> SocketConnection:
        """Wait until `count` Socket Mode connections have been opened and one is open."""

        def find() -> SocketConnection | None:
            if len(self.connections) >= count:
                live = [c for c in self.connections if c.open]
                return live[-1] if live else None
            return None

        return await self._wait(find, timeout, f"socket connection #{count}")

    async def wait_for_closed(
        self, conn: SocketConnection, timeout: float = WAIT_TIMEOUT
    ) -> SocketConnection:
        return await self._wait(
            lambda: conn if conn.closed_at is not None else None, timeout, "connection close"
        )

    def last_seq(self) -> int:
        """Seq of the latest recorded call (use as `after=` to wait for new calls only)."""
        return self._calls[-1].seq if self._calls else 0

    def last_response_seq(self) -> int:
        return self.responses[-1].seq if self.responses else 0

    # ------------------------------------------------------------------ ids

    def _next_ts(self) -> str:
        now_us = int(time.time() * 1_000_000)
        us = max(now_us, self._last_ts_us + 100)
        self._last_ts_us = us
        return f"{us // 1_000_000}.{us % 1_000_000:06d}"

    # ------------------------------------------------------------------ Web API

    async def _parse(self, request: web.Request) -> dict[str, Any]:
        params: dict[str, Any] = dict(request.query)
        ctype = request.content_type
        if request.method == "POST" and request.can_read_body:
            if ctype == "application/json":
                body = await request.json()
                if isinstance(body, dict):
                    params.update(body)
            elif ctype in ("application/x-www-form-urlencoded", "multipart/form-data"):
                form = await request.post()
                for k, v in form.items():
                    params[k] = v.file.read() if hasattr(v, "file") else v
        return params

    async def _handle_api(self, request: web.Request) -> web.StreamResponse:
        method = request.match_info["method"]
        params = await self._parse(request)
        auth = request.headers.get("Authorization", "")
        token = auth[len("Bearer ") :] if auth.startswith("Bearer ") else params.pop("token", None)
        params.pop("token", None)
        call = Call(
            seq=next(self._seq),
            method=method,
            params=params,
            token=token,
            time=time.monotonic(),
            wall_time=time.time(),
            http_method=request.method,
            content_type=request.content_type,
        )
        headers: dict[str, str] = {}
        q = self._faults.get(method)
        fault = q.popleft() if q else None
        if fault is None and self._share is not None and method in self._share[1]:
            every, _, waits, per_method = self._share
            counter = method if per_method else "*"
            seen = self._share_seen[counter] = self._share_seen.get(counter, 0) + 1
            if seen % every == 0:
                fault = _Fault("ratelimit", retry_after=waits[self._share_refused % len(waits)])
                self._share_refused += 1
        try:
            if fault is not None and fault.kind == "drop":
                call.dropped = True
                raise _Dropped()
            if fault is not None and fault.kind == "ratelimit":
                call.status = 429
                headers["Retry-After"] = str(fault.retry_after)
                result: dict[str, Any] = {"ok": False, "error": "ratelimited"}
            elif fault is not None:
                call.status = fault.status
                result = {"ok": False, "error": fault.error}
            else:
                result = self._auth_check(method, token) or self._dispatch(method, params, call)
        except _Dropped:
            self._calls.append(call)
            await self._notify()
            if request.transport is not None:
                request.transport.abort()
            raise asyncio.CancelledError() from None
        call.result = result
        self._calls.append(call)
        await self._notify()
        return web.json_response(result, status=call.status, headers=headers)

    def _auth_check(self, method: str, token: str | None) -> dict[str, Any] | None:
        if not token:
            return {"ok": False, "error": "not_authed"}
        if token not in self.bot_tokens and token not in self.app_tokens:
            return {"ok": False, "error": "invalid_auth"}
        if token in self.revoked_tokens:
            return {"ok": False, "error": "token_revoked"}
        is_app = token in self.app_tokens
        if (method == "apps.connections.open") != is_app:
            return {"ok": False, "error": "not_allowed_token_type"}
        return None

    def _dispatch(self, method: str, p: dict[str, Any], call: Call) -> dict[str, Any]:
        handler = {
            "auth.test": self._auth_test,
            "apps.connections.open": self._apps_connections_open,
            "chat.postMessage": self._chat_post_message,
            "chat.update": self._chat_update,
            "chat.postEphemeral": self._chat_post_ephemeral,
            "chat.getPermalink": self._chat_get_permalink,
            "reactions.add": self._reactions_add,
            "users.info": self._users_info,
            "conversations.info": self._conversations_info,
            "conversations.open": self._conversations_open,
            "files.getUploadURLExternal": self._files_get_upload_url,
            "files.completeUploadExternal": self._files_complete_upload,
            "files.info": self._files_info,
        }.get(method)
        if handler is None:
            return {"ok": False, "error": "unknown_method"}
        try:
            return handler(p, call)
        except _Refused as refusal:
            if refusal.answer["error"] not in METHOD_ERRORS[method]:
                raise AssertionError(
                    f"the stand-in refused {method} with {refusal.answer['error']!r}, "
                    "not among its METHOD_ERRORS"
                ) from None
            return refusal.answer

    def _auth_test(self, p: dict[str, Any], call: Call) -> dict[str, Any]:
        return {
            "ok": True,
            "url": f"https://{self.team_domain}.slack.com/",
            "team": "Spark Team",
            "user": self.users[self.bot_user_id],
            "team_id": self.team_id,
            "user_id": self.bot_user_id,
            "bot_id": self.bot_id,
            "app_id": self.app_id,
            "is_enterprise_install": False,
        }

    def _apps_connections_open(self, p: dict[str, Any], call: Call) -> dict[str, Any]:
        ticket = uuid.uuid4().hex
        self._tickets[ticket] = 0
        return {
            "ok": True,
            "url": f"ws://{self.host}:{self.port}/link/?ticket={ticket}&app_id={self.app_id}",
        }

    # -- conversations and membership

    def _visible(self, channel: Any) -> Conversation:
        """The conversation the bot names, if the bot can see it (else channel_not_found)."""
        conversation = self.conversations.get(channel) if isinstance(channel, str) else None
        if conversation is None and isinstance(channel, str) and channel.startswith("#"):
            conversation = next(
                (c for c in self.conversations.values() if c.name == channel[1:]), None
            )
        if conversation is None or not conversation.visible_to(self.bot_user_id):
            raise _Refused("channel_not_found")
        return conversation

    def _bot_may_post(self, conversation: Conversation, *, public_scope_applies: bool) -> None:
        """Refuse as Slack does a post by the bot into a conversation it can see."""
        if conversation.archived:
            raise _Refused("is_archived")
        if self.bot_user_id not in conversation.members and not (
            public_scope_applies and self.chat_write_public and conversation.kind == PUBLIC
        ):
            raise _Refused("not_in_channel")
        if conversation.kind == IM and not self.messages_tab_enabled:
            raise _Refused("messages_tab_disabled")

    # -- messages

    def _check_content(
        self, method: str, p: dict[str, Any], call: Call, require: bool = True
    ) -> None:
        """Validate text/blocks in place (blocks parsed, text truncated); refuse bad content."""
        if "blocks" in p:
            blocks, err = parse_blocks(p["blocks"])
            details: list[str] = []
            if not err and blocks is not None:
                err, details = validate_blocks(blocks, self.blocks_max_chars)
            if err:
                # too long or unparsable blocks: invalid_blocks where the method documents no
                # code of its own for them (only chat.postMessage has msg_blocks_too_long)
                raise _Refused(
                    err if err in METHOD_ERRORS[method] else "invalid_blocks",
                    errors=details,
                    response_metadata={"messages": [f"[ERROR] {d}" for d in details]},
                )
            p["blocks"] = blocks
        text = p.get("text")
        if isinstance(text, str) and len(text) > MAX_MESSAGE_TEXT:
            if method == "chat.postEphemeral":
                raise _Refused("msg_too_long")
            p["text"] = text[:MAX_MESSAGE_TEXT]
            call.notes.append("text_truncated")
        if require and not p.get("text") and not p.get("blocks") and not p.get("attachments"):
            raise _Refused("no_text")

    def _assign_block_ids(self, blocks: list | None) -> list | None:
        if not blocks:
            return blocks
        out = copy.deepcopy(blocks)
        for b in out:
            if isinstance(b, dict) and not b.get("block_id"):
                b["block_id"] = f"b{next(self._block_seq):04d}"
        return out

    def _thread_parent(self, channel: str, thread_ts: Any) -> str | None:
        """The ts of the thread a message `thread_ts` is in (itself for a parent), or None."""
        message = self._store.get(channel, {}).get(str(thread_ts))
        if message is None:
            return None
        return message.get("thread_ts") or message["ts"]

    def _new_message(
        self, channel: str, text: str, blocks: list | None, *, ts: str | None = None, **extra: Any
    ) -> dict[str, Any]:
        ts = ts or self._next_ts()
        msg: dict[str, Any] = {
            "type": "message",
            "ts": ts,
            "channel": channel,
            "user": self.bot_user_id,
            "bot_id": self.bot_id,
            "app_id": self.app_id,
            "team": self.team_id,
            "text": text or "",
        }
        if blocks is not None:
            msg["blocks"] = self._assign_block_ids(blocks)
        msg.update({k: v for k, v in extra.items() if v is not None})
        self._store.setdefault(channel, {})[ts] = msg
        thread_ts = msg.get("thread_ts")
        if thread_ts and thread_ts != ts:
            parent = self._store[channel][thread_ts]
            parent["thread_ts"] = thread_ts
            parent["reply_count"] = parent.get("reply_count", 0) + 1
            parent["latest_reply"] = ts
            msg["parent_user_id"] = parent.get("user")
        return msg

    def _new_ephemeral(
        self,
        channel: str,
        user: str,
        text: str,
        blocks: list | None,
        source: str,
        thread_ts: str | None = None,
    ) -> dict[str, Any]:
        ephemeral = {
            "ts": self._next_ts(),
            "channel": channel,
            "user": user,
            "text": text or "",
            "blocks": self._assign_block_ids(blocks),
            "thread_ts": thread_ts,
            "source": source,
        }
        self._ephemerals.append(ephemeral)
        return ephemeral

    def _chat_post_message(self, p: dict[str, Any], call: Call) -> dict[str, Any]:
        conversation = self._visible(p.get("channel"))
        self._bot_may_post(conversation, public_scope_applies=True)
        channel = conversation.id
        self._check_content("chat.postMessage", p, call)
        thread_ts = None
        if p.get("thread_ts"):
            thread_ts = self._thread_parent(channel, p["thread_ts"])
            if thread_ts is None:
                raise _Refused("thread_not_found")
        extra: dict[str, Any] = {"thread_ts": thread_ts}
        if thread_ts and _truthy(p.get("reply_broadcast")):
            extra["reply_broadcast"] = True
            extra["subtype"] = "thread_broadcast"
        if p.get("attachments") is not None:
            extra["attachments"] = _json_arg(p["attachments"])
        for k in ("unfurl_links", "unfurl_media", "metadata"):
            if k in p:
                extra[k] = p[k]
        msg = self._new_message(channel, p.get("text") or "", p.get("blocks"), **extra)
        return {"ok": True, "channel": channel, "ts": msg["ts"], "message": copy.deepcopy(msg)}

    def _chat_update(self, p: dict[str, Any], call: Call) -> dict[str, Any]:
        conversation = self._visible(p.get("channel"))
        channel = conversation.id
        ts = str(p.get("ts") or "")
        msg = self._store.get(channel, {}).get(ts)
        if msg is None:
            raise _Refused("message_not_found")
        if self.bot_user_id not in conversation.members and not (
            self.chat_write_public and conversation.kind == PUBLIC
        ):
            raise _Refused("cant_update_message")
        text = p.get("text")
        if isinstance(text, str) and len(text) > MAX_UPDATE_TEXT:
            raise _Refused("msg_too_long")
        self._check_content("chat.update", p, call, require=False)
        if (
            not p.get("text")
            and not p.get("blocks")
            and not p.get("attachments")
            and not p.get("file_ids")
        ):
            raise _Refused("no_text")
        # Slack keeps fields that are not sent; an empty blocks array clears them.
        if "text" in p:
            msg["text"] = p.get("text") or ""
        if p.get("blocks") is not None:
            msg["blocks"] = self._assign_block_ids(p["blocks"])
        if p.get("attachments") is not None:
            msg["attachments"] = _json_arg(p["attachments"])
        msg["edited"] = {"user": self.bot_user_id, "ts": self._next_ts()}
        msg["update_count"] = msg.get("update_count", 0) + 1
        return {
            "ok": True,
            "channel": channel,
            "ts": ts,
            "text": msg["text"],
            "message": copy.deepcopy(msg),
        }

    def _chat_post_ephemeral(self, p: dict[str, Any], call: Call) -> dict[str, Any]:
        conversation = self._visible(p.get("channel"))
        self._bot_may_post(conversation, public_scope_applies=False)
        user = p.get("user")
        if not user or user not in conversation.members:
            raise _Refused("user_not_in_channel")
        self._check_content("chat.postEphemeral", p, call)
        ephemeral = self._new_ephemeral(
            conversation.id,
            user,
            p.get("text") or "",
            p.get("blocks"),
            "chat.postEphemeral",
            thread_ts=p.get("thread_ts"),
        )
        return {"ok": True, "message_ts": ephemeral["ts"]}

    def _chat_get_permalink(self, p: dict[str, Any], call: Call) -> dict[str, Any]:
        channel = self._visible(p.get("channel")).id
        ts = str(p.get("message_ts") or "")
        msg = self._store.get(channel, {}).get(ts)
        if msg is None:
            raise _Refused("message_not_found")
        link = f"https://{self.team_domain}.slack.com/archives/{channel}/p{ts.replace('.', '')}"
        if msg.get("thread_ts") and msg["thread_ts"] != ts:
            link += f"?thread_ts={msg['thread_ts']}&cid={channel}"
        return {"ok": True, "channel": channel, "permalink": link}

    def _reactions_add(self, p: dict[str, Any], call: Call) -> dict[str, Any]:
        conversation = self._visible(p.get("channel"))
        if conversation.archived:
            raise _Refused("is_archived")
        name = p.get("name")
        if not name:
            raise _Refused("invalid_name")
        msg = self._store.get(conversation.id, {}).get(str(p.get("timestamp") or ""))
        if msg is None:
            raise _Refused("message_not_found")
        reactions = msg.setdefault("reactions", [])
        for r in reactions:
            if r["name"] == name:
                if self.bot_user_id in r["users"]:
                    raise _Refused("already_reacted")
                r["users"].append(self.bot_user_id)
                r["count"] += 1
                return {"ok": True}
        reactions.append({"name": name, "users": [self.bot_user_id], "count": 1})
        return {"ok": True}

    def _users_info(self, p: dict[str, Any], call: Call) -> dict[str, Any]:
        uid = p.get("user")
        if uid not in self.users:
            raise _Refused("user_not_found")
        name = self.users[uid]
        return {
            "ok": True,
            "user": {
                "id": uid,
                "team_id": self.team_id,
                "name": name,
                "real_name": name.title(),
                "deleted": False,
                "is_bot": uid == self.bot_user_id,
                "is_admin": False,
                "tz": "UTC",
                "profile": {"display_name": name, "real_name": name.title()},
            },
        }

    def _conversations_open(self, p: dict[str, Any], call: Call) -> dict[str, Any]:
        """The bot's DM with one user (stable ID per user), or a group DM with several."""
        if p.get("channel"):
            conversation = self._visible(p["channel"])
        else:
            users = [u for u in str(p.get("users") or "").split(",") if u]
            if not users:
                raise _Refused("users_list_not_supplied")
            if any(u not in self.users or u == self.bot_user_id for u in users):
                raise _Refused("user_not_found")
            if len(users) == 1:
                conversation = self.conversations[self.bot_dm(users[0])]
            else:
                conversation = self._group_dm(users)
        if _truthy(p.get("return_im")):
            return {"ok": True, "channel": conversation.info(self.bot_user_id)}
        return {"ok": True, "channel": {"id": conversation.id}}

    def _group_dm(self, users: list[str]) -> Conversation:
        members = {*users, self.bot_user_id}
        for c in self.conversations.values():
            if c.kind == MPIM and c.members == members:
                return c
        name = "mpdm-" + "--".join(self.users[u] for u in sorted(users)) + "-1"
        cid = f"G{len(self.conversations):08d}"
        return self.add_conversation(cid, MPIM, name, members=users)

    def _conversations_info(self, p: dict[str, Any], call: Call) -> dict[str, Any]:
        return {"ok": True, "channel": self._visible(p.get("channel")).info(self.bot_user_id)}

    # -- files (upload v2)

    def _files_get_upload_url(self, p: dict[str, Any], call: Call) -> dict[str, Any]:
        filename = p.get("filename")
        try:
            length = int(p["length"])
        except (KeyError, TypeError, ValueError):
            length = 0
        if not filename or length <= 0:
            raise _Refused("missing_argument")
        fid = f"F{next(self._file_seq):07d}"
        key = uuid.uuid4().hex
        self._upload_keys[key] = fid
        self._files[fid] = {
            "id": fid,
            "name": filename,
            "title": filename,
            "length": length,
            "alt_txt": p.get("alt_txt"),
            "snippet_type": p.get("snippet_type"),
            "uploaded": False,
            "content": None,
            "completed": False,
            "shares": {},
            "share_message": None,
        }
        return {"ok": True, "upload_url": f"{self.base_url}/upload/v1/{key}", "file_id": fid}

    async def _handle_upload(self, request: web.Request) -> web.StreamResponse:
        key = request.match_info["key"]
        fid = self._upload_keys.get(key)
        if request.content_type == "multipart/form-data":
            form = await request.post()
            field_ = next(iter(form.values()), b"")
            data = field_.file.read() if hasattr(field_, "file") else str(field_).encode()
        else:
            data = await request.read()
        call = Call(
            seq=next(self._seq),
            method="files.upload.bytes",
            params={"file_id": fid, "size": len(data)},
            token=None,
            time=time.monotonic(),
            wall_time=time.time(),
            content_type=request.content_type,
        )
        if fid is None:
            call.status = 404
            call.result = {"ok": False, "error": "invalid_upload_url"}
            self._calls.append(call)
            await self._notify()
            return web.Response(status=404, text="Not Found", content_type="text/plain")
        f = self._files[fid]
        f["content"] = data
        f["uploaded"] = True
        if len(data) != f["length"]:
            call.notes.append(f"length_mismatch: declared {f['length']}, got {len(data)}")
        call.result = {"ok": True}
        self._calls.append(call)
        await self._notify()
        return web.Response(text=f"OK - {len(data)}", content_type="text/plain")

    def _files_complete_upload(self, p: dict[str, Any], call: Call) -> dict[str, Any]:
        try:
            files = _json_arg(p.get("files"))
        except ValueError:
            files = None
        if not isinstance(files, list) or not files:
            raise _Refused("file_not_found")
        p["files"] = files
        for item in files:
            f = self._files.get(str(item.get("id")) if isinstance(item, dict) else "")
            # "This method can only be called once": a completed upload's ticket is spent
            if f is None or not f["uploaded"] or f["completed"]:
                raise _Refused("file_not_found")
        channel = p.get("channel_id") or None
        if p.get("channels"):
            channel = str(p["channels"]).split(",")[0]
        conversation = None
        thread_ts = None
        if channel is not None:
            conversation = self._visible(channel)
            self._bot_may_post(conversation, public_scope_applies=False)
            if p.get("thread_ts"):
                thread_ts = str(p["thread_ts"])
                parent = self._thread_parent(conversation.id, thread_ts)
                if parent != thread_ts:  # no such message, or a reply
                    raise _Refused("invalid_thread_ts")
            if "blocks" in p and not p.get("initial_comment"):
                self._check_content("files.completeUploadExternal", p, call, require=False)
        out = []
        for item in files:
            f = self._files[item["id"]]
            f["completed"] = True
            if item.get("title"):
                f["title"] = item["title"]
            out.append(self._file_obj(f))
        if conversation is not None:
            self._schedule_share(
                {
                    "channel": conversation.id,
                    "thread_ts": thread_ts,
                    "file_ids": [i["id"] for i in files],
                    "initial_comment": p.get("initial_comment") or "",
                    "blocks": None if p.get("initial_comment") else p.get("blocks"),
                }
            )
        return {"ok": True, "files": out}

    def _schedule_share(self, share: dict[str, Any]) -> None:
        self._pending_shares.append(share)
        if self.file_share_delay is not None:
            loop = asyncio.get_running_loop()
            self._share_timers.append(
                loop.call_later(
                    self.file_share_delay,
                    lambda: self._share_tasks.add(loop.create_task(self._share_file(share))),
                )
            )

    async def share_pending_files(self) -> list[dict[str, Any]]:
        """Share every completed upload not shared yet, now (in the order completed); return the
        share messages."""
        shared = []
        for share in list(self._pending_shares):
            message = await self._share_file(share)
            if message is not None:
                shared.append(message)
        return shared

    @property
    def pending_file_shares(self) -> list[str]:
        """IDs of the files completed but not shared yet."""
        return [fid for share in self._pending_shares for fid in share["file_ids"]]

    async def _share_file(self, share: dict[str, Any]) -> dict[str, Any] | None:
        if share not in self._pending_shares:
            return None  # shared already (share_pending_files came first)
        self._pending_shares.remove(share)
        channel, thread_ts = share["channel"], share["thread_ts"]
        message = self._new_message(
            channel,
            share["initial_comment"],
            share["blocks"],
            thread_ts=thread_ts,
            files=[self._file_obj(self._files[fid]) for fid in share["file_ids"]],
            upload=True,
        )
        conversation = self.conversations[channel]
        visibility = "public" if conversation.kind == PUBLIC else "private"
        for fid in share["file_ids"]:
            f = self._files[fid]
            f["shares"] = {
                visibility: {
                    channel: [
                        {
                            "ts": message["ts"],
                            "thread_ts": thread_ts,
                            "channel_name": conversation.name,
                            "team_id": self.team_id,
                            "reply_count": 0,
                        }
                    ]
                }
            }
            f["share_message"] = copy.deepcopy(message)
        await self._notify()
        return copy.deepcopy(message)

    def _files_info(self, p: dict[str, Any], call: Call) -> dict[str, Any]:
        f = self._files.get(str(p.get("file")))
        if f is None or not f["completed"]:
            raise _Refused("file_not_found")
        info = self._file_obj(f)
        info["shares"] = copy.deepcopy(f["shares"])
        info["channels"] = [c for shares in f["shares"].values() for c in shares]
        return {"ok": True, "file": info, "comments": [], "response_metadata": {"next_cursor": ""}}

    def _file_obj(self, f: dict[str, Any]) -> dict[str, Any]:
        name = f["name"]
        ext = name.rsplit(".", 1)[-1].lower() if "." in name else "text"
        return {
            "id": f["id"],
            "name": name,
            "title": f["title"],
            "filetype": ext,
            "mimetype": "text/plain"
            if ext in ("txt", "log", "text")
            else "application/octet-stream",
            "size": len(f["content"] or b""),
            "user": self.bot_user_id,
            "url_private": f"{self.base_url}/files/{f['id']}/{name}",
            "permalink": f"https://{self.team_domain}.slack.com/files/{self.bot_user_id}/{f['id']}/{name}",
        }

    def file_content(self, file_id: str) -> bytes | None:
        f = self._files.get(file_id)
        return None if f is None else f["content"]

    # ------------------------------------------------------------------ Socket Mode

    async def _handle_ws(self, request: web.Request) -> web.StreamResponse:
        ticket = request.query.get("ticket")
        if ticket not in self._tickets:
            return web.Response(status=401, text="invalid ticket")
        self._tickets[ticket] += 1
        ws = web.WebSocketResponse(autoping=False)
        await ws.prepare(request)
        conn = SocketConnection(
            id=next(self._conn_seq), ws=ws, ticket=ticket, opened_at=time.monotonic()
        )
        self.connections.append(conn)
        await ws.send_json(
            {
                "type": "hello",
                "num_connections": sum(1 for c in self.connections if c.open),
                "debug_info": {
                    "host": "applink-standin",
                    "build_number": 1,
                    "approximate_connection_time": 18060,
                },
                "connection_info": {"app_id": self.app_id},
            }
        )
        await self._notify()
        try:
            async for msg in ws:
                if msg.type == WSMsgType.PING:
                    conn.pings += 1
                    await ws.pong(msg.data)
                elif msg.type == WSMsgType.TEXT:
                    await self._on_ws_text(conn, msg.data)
                elif msg.type in (WSMsgType.CLOSE, WSMsgType.ERROR):
                    break
        finally:
            conn.closed_at = time.monotonic()
            await self._notify()
        return ws

    async def _on_ws_text(self, conn: SocketConnection, data: str) -> None:
        try:
            body = json.loads(data)
        except ValueError:
            return
        conn.received.append(body)
        eid = body.get("envelope_id") if isinstance(body, dict) else None
        if not eid or eid not in self._envelopes:
            return
        env = self._envelopes[eid]
        ack = Ack(
            envelope_id=eid,
            type=env["type"],
            envelope=env,
            payload=body.get("payload") or None,
            latency=time.monotonic() - self._sent_at[eid],
            connection_id=conn.id,
            sent_at=self._sent_at[eid],
        )
        fut = self._pending.get(eid)
        if conn.id != self._sent_on[eid] and not self.ack_on_any_connection:
            self.stray_acks.append(ack)
        elif fut is not None and not fut.done():
            self._apply_ack_payload(env, ack)
            fut.set_result(ack)
            self.acks.append(ack)
        else:
            self.late_acks.append(ack)
        await self._notify()

    def _apply_ack_payload(self, env: dict[str, Any], ack: Ack) -> None:
        """A slash-command ack with a body is shown to the invoking user (or, in_channel, to the
        conversation), if Slack would accept its blocks."""
        payload = ack.payload
        if env["type"] != "slash_commands" or not payload:
            return
        blocks, err = parse_blocks(payload.get("blocks"))
        details: list[str] = []
        if not err and blocks is not None:
            err, details = validate_blocks(blocks, self.blocks_max_chars)
        if err:
            ack.refused, ack.refusal_details = err, details
            return
        p = env["payload"]
        if payload.get("response_type") == "in_channel":
            self._new_message(p["channel_id"], payload.get("text") or "", blocks)
        else:
            self._new_ephemeral(
                p["channel_id"], p["user_id"], payload.get("text") or "", blocks, "ack"
            )

    def _live_connection(self) -> SocketConnection | None:
        live = [c for c in self.connections if c.open]
        return live[-1] if live else None

    async def send_envelope(
        self,
        type_: str,
        payload: dict[str, Any],
        *,
        accepts_response_payload: bool,
        timeout: float | None = None,
        connect_timeout: float = WAIT_TIMEOUT,
        drop_after_send: bool = False,
    ) -> Ack:
        """Deliver an envelope on the newest open connection; wait for its ack on that connection
        (on any, with `ack_on_any_connection`). `drop_after_send`: that connection is dropped
        abruptly right after the envelope, before the app could acknowledge it there."""
        conn = self._live_connection() or await self.wait_for_connection(1, connect_timeout)
        eid = str(uuid.uuid4())
        envelope = {
            "envelope_id": eid,
            "payload": payload,
            "type": type_,
            "accepts_response_payload": accepts_response_payload,
        }
        self._envelopes[eid] = envelope
        fut: asyncio.Future = asyncio.get_running_loop().create_future()
        self._pending[eid] = fut
        self._sent_at[eid] = time.monotonic()
        self._sent_on[eid] = conn.id
        await conn.ws.send_str(json.dumps(envelope))
        if drop_after_send:
            await conn.ws.close(code=aiohttp.WSCloseCode.GOING_AWAY)
        limit = self.ack_timeout if timeout is None else timeout
        try:
            return await asyncio.wait_for(asyncio.shield(fut), limit)
        except TimeoutError:
            raise AckTimeout(f"{type_} envelope {eid} not acknowledged within {limit}s") from None
        finally:
            if not fut.done():
                fut.cancel()

    def _new_response_url(self, kind: str, channel: str, user: str, **context: Any) -> str:
        key = uuid.uuid4().hex
        self._response_urls[key] = _ResponseUrl(kind, channel, user, self.now(), **context)
        return f"{self.base_url}/response_url/{key}"

    def _typing_user(self, user_id: str, channel_id: str) -> Conversation:
        conversation = self.conversations.get(channel_id)
        if conversation is None:
            raise LookupError(f"no conversation {channel_id}")
        if user_id not in conversation.members:
            raise LookupError(f"{user_id} is not in {channel_id}: they cannot type there")
        return conversation

    async def send_slash_command(
        self,
        user_id: str,
        channel_id: str,
        text: str,
        command: str = "/spark",
        *,
        timeout: float | None = None,
        drop_after_send: bool = False,
    ) -> Ack:
        """`user_id` types a slash command in `channel_id` (a conversation they are in; never in
        a thread, which Slack does not allow: there is no thread argument). Delivered over Socket
        Mode; returns the Ack (payload, latency); raises AckTimeout if the app never acks."""
        conversation = self._typing_user(user_id, channel_id)
        response_url = self._new_response_url("slash_commands", channel_id, user_id)
        payload = self._slash_payload(user_id, conversation, text, command, response_url)
        ack = await self.send_envelope(
            "slash_commands",
            payload,
            accepts_response_payload=True,
            timeout=timeout,
            drop_after_send=drop_after_send,
        )
        self._response_urls[response_url.rsplit("/", 1)[1]].envelope_id = ack.envelope_id
        return ack

    def _slash_payload(
        self,
        user_id: str,
        conversation: Conversation,
        text: str,
        command: str,
        response_url: str,
    ) -> dict[str, Any]:
        from .signing import slash_command_form

        return slash_command_form(
            user_id=user_id,
            channel_id=conversation.id,
            text=text,
            command=command,
            user_name=self.users.get(user_id),
            channel_name=conversation.slash_command_channel_name,
            response_url=response_url,
            trigger_id=f"{int(time.time())}.{uuid.uuid4().int % 10**12}.trigger",
            team_id=self.team_id,
            team_domain=self.team_domain,
            api_app_id=self.app_id,
        )

    async def click_button(
        self,
        user_id: str,
        channel_id: str,
        message_ts: str,
        action_id: str,
        value: str | None = None,
        *,
        timeout: float | None = None,
    ) -> Ack:
        """A user clicks the button `action_id` on a message (or ephemeral) the app posted.
        The button must exist in the message's blocks, and the user must see the message (be in
        its conversation; an ephemeral: be the one it was shown to), as in Slack."""
        conversation = self._typing_user(user_id, channel_id)
        msg = self._store.get(channel_id, {}).get(message_ts)
        ephemeral = None
        if msg is None:
            ephemeral = next(
                (
                    e
                    for e in self._ephemerals
                    if e["ts"] == message_ts and e["channel"] == channel_id
                ),
                None,
            )
            if ephemeral is None:
                raise LookupError(f"no message {message_ts} in {channel_id}")
            if ephemeral["user"] != user_id:
                raise LookupError(f"ephemeral {message_ts} was shown to {ephemeral['user']} only")
        blocks = (msg or ephemeral or {}).get("blocks")
        found = find_button(blocks, action_id)
        if found is None:
            raise LookupError(f"message {message_ts} has no element with action_id {action_id!r}")
        block_id, element = found
        action = {
            "action_id": action_id,
            "block_id": block_id,
            "text": element.get("text"),
            "value": value if value is not None else element.get("value"),
            "type": element.get("type", "button"),
            "action_ts": f"{time.time():.6f}",
        }
        if element.get("style"):
            action["style"] = element["style"]
        container: dict[str, Any] = {
            "type": "message",
            "message_ts": message_ts,
            "channel_id": channel_id,
            "is_ephemeral": ephemeral is not None,
        }
        thread_ts = (msg or ephemeral or {}).get("thread_ts")
        if thread_ts:
            container["thread_ts"] = thread_ts
        response_url = self._new_response_url(
            "interactive", channel_id, user_id, message_ts=message_ts
        )
        payload: dict[str, Any] = {
            "type": "block_actions",
            "user": {
                "id": user_id,
                "username": self.users.get(user_id, user_id.lower()),
                "name": self.users.get(user_id, user_id.lower()),
                "team_id": self.team_id,
            },
            "api_app_id": self.app_id,
            "token": "verification-token-deprecated",
            "container": container,
            "trigger_id": f"{int(time.time())}.{uuid.uuid4().int % 10**12}.trigger",
            "team": {"id": self.team_id, "domain": self.team_domain},
            "enterprise": None,
            "is_enterprise_install": False,
            "channel": {
                "id": channel_id,
                "name": conversation.slash_command_channel_name,
            },
            "state": {"values": {}},
            "response_url": response_url,
            "actions": [action],
        }
        if msg is not None:
            payload["message"] = copy.deepcopy(msg)
        return await self.send_envelope(
            "interactive", payload, accepts_response_payload=False, timeout=timeout
        )

    async def disconnect(self, reason: str = "refresh_requested", *, close: bool = False) -> None:
        """Send Slack's {"type": "disconnect"} to every open connection; with close=True
        also close the sockets from the server side right away."""
        for c in [c for c in self.connections if c.open]:
            await c.ws.send_json(
                {"type": "disconnect", "reason": reason, "debug_info": {"host": "applink-standin"}}
            )
            if close:
                await c.ws.close(code=aiohttp.WSCloseCode.GOING_AWAY)

    async def close_connections(self) -> None:
        """Drop every Socket Mode connection from the server side (no disconnect message)."""
        for c in [c for c in self.connections if c.open]:
            await c.ws.close(code=aiohttp.WSCloseCode.GOING_AWAY)

    # ------------------------------------------------------------------ response_url

    def response_url_uses(self, response_url: str) -> int:
        """How many posts to `response_url` Slack has accepted."""
        return self._response_urls[response_url.rsplit("/", 1)[1]].uses

    async def _handle_response_url(self, request: web.Request) -> web.StreamResponse:
        key = request.match_info["key"]
        url = self._response_urls.get(key)
        try:
            body = await request.json()
        except ValueError:
            body = None
        post = ResponseUrlPost(
            seq=len(self.responses) + 1,
            key=key,
            envelope_id=url.envelope_id if url else None,
            body=body if isinstance(body, dict) else {},
            time=time.monotonic(),
        )
        refusal = self._response_url_refusal(url, body)
        if refusal is None:
            assert url is not None and isinstance(body, dict)
            refusal = self._apply_response(url, body)
        if refusal is not None:
            post.status, post.answer = refusal
        else:
            url.uses += 1  # type: ignore[union-attr]
        self.responses.append(post)
        await self._notify()
        return web.Response(status=post.status, text=post.answer, content_type="text/plain")

    def _response_url_refusal(self, url: _ResponseUrl | None, body: Any) -> tuple[int, str] | None:
        if url is None:
            return 404, "no_service"
        if self.now() - url.issued_at > RESPONSE_URL_LIFETIME:
            return 404, "expired_url"
        if url.uses >= RESPONSE_URL_USES:
            return 404, "used_url"
        if not isinstance(body, dict):
            return 400, "invalid_payload"
        blocks, err = parse_blocks(body.get("blocks"))
        if not err and blocks is not None:
            err, _ = validate_blocks(blocks, self.blocks_max_chars)
        if err:
            return 400, "invalid_blocks"
        deleting = _truthy(body.get("delete_original"))
        if not deleting and not body.get("text") and not blocks and not body.get("attachments"):
            return 400, "no_text"
        return None

    def _apply_response(self, url: _ResponseUrl, body: dict[str, Any]) -> tuple[int, str] | None:
        channel, text = url.channel, body.get("text") or ""
        blocks, _ = parse_blocks(body.get("blocks"))
        # a button's original is the message it was on; a slash command has none of its own, so
        # the stand-in takes the last message its response_url posted
        original = url.message_ts or url.last_posted
        if original is not None and not self._still_there(channel, original):
            original = None
        if _truthy(body.get("delete_original")) and original is not None:
            self._remove(channel, original)
            return None
        if _truthy(body.get("replace_original")) and original is not None:
            self._replace(channel, original, text, blocks)
            return None
        thread_ts = body.get("thread_ts")
        if thread_ts is not None and self._thread_parent(channel, thread_ts) != str(thread_ts):
            return 400, "invalid_thread_ts"
        if body.get("response_type") == "in_channel":
            url.last_posted = self._new_message(channel, text, blocks, thread_ts=thread_ts)["ts"]
        else:
            shown = self._new_ephemeral(
                channel, url.user, text, blocks, "response_url", thread_ts=thread_ts
            )
            url.last_posted = shown["ts"]
        return None

    def _still_there(self, channel: str, ts: str) -> bool:
        return ts in self._store.get(channel, {}) or any(e["ts"] == ts for e in self._ephemerals)

    def _remove(self, channel: str, ts: str) -> None:
        if self._store.get(channel, {}).pop(ts, None) is None:
            self._ephemerals = [e for e in self._ephemerals if e["ts"] != ts]

    def _replace(self, channel: str, ts: str, text: str, blocks: list | None) -> None:
        message = self._store.get(channel, {}).get(ts)
        if message is None:
            message = next(e for e in self._ephemerals if e["ts"] == ts)
        message["text"] = text
        message["blocks"] = self._assign_block_ids(blocks)

    # ------------------------------------------------------------------ HTTP mode

    async def send_slash_command_http(
        self,
        url: str,
        user_id: str,
        channel_id: str,
        text: str,
        command: str = "/spark",
        *,
        signing_secret: str | None = None,
        timestamp: int | None = None,
    ) -> HttpResult:
        """POST a signed slash command to the app's HTTP endpoint (like Slack in HTTP mode)."""
        conversation = self._typing_user(user_id, channel_id)
        response_url = self._new_response_url("slash_commands", channel_id, user_id)
        req = build_signed_slash_command(
            signing_secret or self.signing_secret,
            user_id=user_id,
            channel_id=channel_id,
            text=text,
            command=command,
            timestamp=timestamp,
            user_name=self.users.get(user_id, user_id.lower()),
            channel_name=conversation.slash_command_channel_name,
            response_url=response_url,
            trigger_id=f"{int(time.time())}.{uuid.uuid4().int % 10**12}.trigger",
            team_id=self.team_id,
            team_domain=self.team_domain,
            api_app_id=self.app_id,
        )
        return await self._post(url, req.body, req.headers)

    async def send_ssl_check(self, url: str, *, signed: bool = False) -> HttpResult:
        """Slack's check of an HTTP-mode URL (`ssl_check=1`). Whether Slack signs it is not
        documented: unsigned by default, the stricter reading for the app."""
        body = urlencode({"ssl_check": "1", "token": "verification-token-deprecated"})
        if signed:
            headers = sign_body(self.signing_secret, body).headers
        else:
            headers = {"content-type": "application/x-www-form-urlencoded"}
        return await self._post(url, body, headers)

    async def _post(self, url: str, body: str, headers: dict[str, str]) -> HttpResult:
        if self._http is None:
            self._http = aiohttp.ClientSession()
        start = time.monotonic()
        async with self._http.post(url, data=body.encode(), headers=headers) as res:
            text = await res.text()
            return HttpResult(
                status=res.status,
                body=text,
                latency=time.monotonic() - start,
                headers=dict(res.headers),
            )


@dataclass
class HttpResult:
    status: int
    body: str
    latency: float
    headers: dict[str, str]

    def json(self) -> Any:
        return json.loads(self.body) if self.body else None


__all__ = [
    "Ack",
    "AckTimeout",
    "Call",
    "HttpResult",
    "ResponseUrlPost",
    "SlackStandIn",
    "SocketConnection",
]
