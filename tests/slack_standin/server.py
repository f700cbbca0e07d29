"""SlackStandIn: a local Slack (Web API + Socket Mode + response_url + file uploads).

Runs an aiohttp server on 127.0.0.1 with an ephemeral port. Bolt's real clients talk
to it unchanged:

    async with SlackStandIn() as slack:
        client = AsyncWebClient(token=slack.bot_token, base_url=slack.api_url)
        app = AsyncApp(client=client, signing_secret=slack.signing_secret)
        handler = AsyncSocketModeHandler(app, slack.app_token)  # uses app.client
        await handler.connect_async()
        ack = await slack.send_slash_command("U0ALICE", "C0SPARKOPS", "launch")
"""

from __future__ import annotations

import asyncio
import copy
import itertools
import json
import time
import uuid
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import aiohttp
from aiohttp import WSMsgType, web

from tests import secrets

from .blocks import MAX_BLOCKS_JSON_CHARS, find_button, parse_blocks, validate_blocks
from .signing import (
    DEFAULT_APP_ID,
    DEFAULT_TEAM_DOMAIN,
    DEFAULT_TEAM_ID,
    build_signed_slash_command,
)

MAX_MESSAGE_TEXT = 40_000
# Slack shows the user an error for a command not acknowledged within 3 s. That is a speed,
# measured by benchmarks/command_load.py (`Ack.in_time`), not something a test waits on: a busy
# machine can hold any process for seconds. A test waits for the ack as an event; one that does
# not come within ACK_TIMEOUT was lost (AckTimeout).
SLACK_ACK_DEADLINE = 3.0
ACK_TIMEOUT = 20.0
# How long a wait for an event (a call, a connection, a condition) lasts before it fails the
# test: a guard against a hang, not a speed, so it is long enough for a machine under load.
WAIT_TIMEOUT = 20.0


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


class _Dropped(Exception):
    pass


def _truthy(v: Any) -> bool:
    if isinstance(v, str):
        return v.lower() in ("1", "true", "yes")
    return bool(v)


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
        host: str = "127.0.0.1",
    ) -> None:
        self.host = host  # where it listens; another address lets e.g. a lab node reach it
        self.bot_tokens = {bot_token}
        self.app_tokens = {app_token}
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
        # id -> name
        self.channels: dict[str, str] = dict(
            channels
            if channels is not None
            else {"C0SPARKOPS": "spark-ops", "C0GENERAL": "general"}
        )
        self.users: dict[str, str] = dict(
            users if users is not None else {"U0ALICE": "alice", "U0BOB": "bob"}
        )
        self.users.setdefault(bot_user_id, "spark-bot")

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

        self._tickets: dict[str, int] = {}  # ticket -> times used
        self.connections: list[SocketConnection] = []
        self._conn_seq = itertools.count(1)
        self._pending: dict[str, asyncio.Future] = {}
        self._sent_at: dict[str, float] = {}
        self._envelopes: dict[str, dict[str, Any]] = {}
        self.acks: list[Ack] = []
        self.late_acks: list[Ack] = []
        self.responses: list[ResponseUrlPost] = []
        self._response_keys: dict[str, dict[str, Any]] = {}  # key -> context

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

    # ------------------------------------------------------------------ registry

    def add_channel(self, channel_id: str, name: str | None = None) -> None:
        self.channels[channel_id] = name or channel_id.lower()

    def add_user(self, user_id: str, name: str | None = None) -> None:
        self.users[user_id] = name or user_id.lower()

    def add_token(self, token: str) -> None:
        (self.app_tokens if token.startswith("xapp-") else self.bot_tokens).add(token)

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
        self._share_seen: dict[str, int] = {}
        self._share_refused = 0

    def fail(
        self, method: str, error: str = "internal_error", times: int = 1, status: int = 200
    ) -> None:
        """Answer the next `times` calls with {"ok": false, "error": error} (HTTP `status`)."""
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
            (f"ack of {a.envelope_id}", json.dumps(a.payload)) for a in self.acks + self.late_acks
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

    def ephemerals(self, user_id: str | None = None) -> list[dict[str, Any]]:
        return [
            copy.deepcopy(e)
            for e in self._ephemerals
            if user_id is None or e.get("user") == user_id
        ]

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
        }.get(method)
        if handler is None:
            return {"ok": False, "error": "unknown_method"}
        return handler(p, call)

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

    # -- messages

    def _check_content(
        self, p: dict[str, Any], call: Call, require: bool = True
    ) -> dict[str, Any] | None:
        """Validate text/blocks in place (blocks parsed, text truncated). Returns an error or None."""
        if "blocks" in p:
            blocks, err = parse_blocks(p["blocks"])
            if err:
                return {"ok": False, "error": err}
            p["blocks"] = blocks
            if blocks is not None:
                err, details = validate_blocks(blocks, self.blocks_max_chars)
                if err:
                    return {
                        "ok": False,
                        "error": err,
                        "errors": details,
                        "response_metadata": {"messages": [f"[ERROR] {d}" for d in details]},
                    }
        text = p.get("text")
        if isinstance(text, str) and len(text) > MAX_MESSAGE_TEXT:
            p["text"] = text[:MAX_MESSAGE_TEXT]
            call.notes.append("text_truncated")
        if require and not p.get("text") and not p.get("blocks") and not p.get("attachments"):
            return {"ok": False, "error": "no_text"}
        return None

    def _assign_block_ids(self, blocks: list | None) -> list | None:
        if not blocks:
            return blocks
        out = copy.deepcopy(blocks)
        for b in out:
            if isinstance(b, dict) and not b.get("block_id"):
                b["block_id"] = f"b{next(self._block_seq):04d}"
        return out

    def _channel_error(self, channel: Any) -> dict[str, Any] | None:
        if not channel or channel not in self.channels:
            return {"ok": False, "error": "channel_not_found"}
        return None

    def _resolve_thread(self, channel: str, thread_ts: Any) -> str | None:
        parent = self._store.get(channel, {}).get(str(thread_ts))
        if parent is None:
            return None
        return parent.get("thread_ts") or parent["ts"]

    def _new_message(
        self, channel: str, text: str, blocks: list | None, **extra: Any
    ) -> dict[str, Any]:
        ts = self._next_ts()
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

    def _resolve_channel_name(self, channel: Any) -> Any:
        if isinstance(channel, str) and channel not in self.channels:
            name = channel.lstrip("#")
            for cid, cname in self.channels.items():
                if cname == name:
                    return cid
        return channel

    def _chat_post_message(self, p: dict[str, Any], call: Call) -> dict[str, Any]:
        channel = self._resolve_channel_name(p.get("channel"))
        err = self._channel_error(channel) or self._check_content(p, call)
        if err:
            return err
        thread_ts = None
        if p.get("thread_ts"):
            thread_ts = self._resolve_thread(channel, p["thread_ts"])
            if thread_ts is None:
                return {"ok": False, "error": "thread_not_found"}
        extra: dict[str, Any] = {"thread_ts": thread_ts}
        if thread_ts and _truthy(p.get("reply_broadcast")):
            extra["reply_broadcast"] = True
            extra["subtype"] = "thread_broadcast"
        if p.get("attachments") is not None:
            att = p["attachments"]
            extra["attachments"] = json.loads(att) if isinstance(att, str) else att
        for k in ("unfurl_links", "unfurl_media", "metadata"):
            if k in p:
                extra[k] = p[k]
        msg = self._new_message(channel, p.get("text") or "", p.get("blocks"), **extra)
        return {"ok": True, "channel": channel, "ts": msg["ts"], "message": copy.deepcopy(msg)}

    def _chat_update(self, p: dict[str, Any], call: Call) -> dict[str, Any]:
        channel = p.get("channel")
        err = self._channel_error(channel)
        if err:
            return err
        ts = str(p.get("ts") or "")
        msg = self._store.get(channel, {}).get(ts)
        if msg is None:
            return {"ok": False, "error": "message_not_found"}
        err = self._check_content(p, call, require=False)
        if err:
            return err
        if (
            not p.get("text")
            and not p.get("blocks")
            and not p.get("attachments")
            and not p.get("file_ids")
        ):
            return {"ok": False, "error": "no_text"}
        # Slack keeps fields that are not sent; an empty blocks array clears them.
        if "text" in p:
            msg["text"] = p.get("text") or ""
        if p.get("blocks") is not None:
            msg["blocks"] = self._assign_block_ids(p["blocks"])
        if p.get("attachments") is not None:
            att = p["attachments"]
            msg["attachments"] = json.loads(att) if isinstance(att, str) else att
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
        channel = p.get("channel")
        err = self._channel_error(channel)
        if err:
            return err
        user = p.get("user")
        if not user or user not in self.users:
            return {"ok": False, "error": "user_not_in_channel"}
        err = self._check_content(p, call)
        if err:
            return err
        ts = self._next_ts()
        self._ephemerals.append(
            {
                "ts": ts,
                "channel": channel,
                "user": user,
                "text": p.get("text") or "",
                "blocks": self._assign_block_ids(p.get("blocks")),
                "thread_ts": p.get("thread_ts"),
                "source": "chat.postEphemeral",
            }
        )
        return {"ok": True, "message_ts": ts}

    def _chat_get_permalink(self, p: dict[str, Any], call: Call) -> dict[str, Any]:
        channel = p.get("channel")
        err = self._channel_error(channel)
        if err:
            return err
        ts = str(p.get("message_ts") or "")
        msg = self._store.get(channel, {}).get(ts)
        if msg is None:
            return {"ok": False, "error": "message_not_found"}
        link = f"https://{self.team_domain}.slack.com/archives/{channel}/p{ts.replace('.', '')}"
        if msg.get("thread_ts") and msg["thread_ts"] != ts:
            link += f"?thread_ts={msg['thread_ts']}&cid={channel}"
        return {"ok": True, "channel": channel, "permalink": link}

    def _reactions_add(self, p: dict[str, Any], call: Call) -> dict[str, Any]:
        channel = p.get("channel")
        err = self._channel_error(channel)
        if err:
            return err
        name = p.get("name")
        if not name:
            return {"ok": False, "error": "invalid_name"}
        msg = self._store.get(channel, {}).get(str(p.get("timestamp") or ""))
        if msg is None:
            return {"ok": False, "error": "message_not_found"}
        reactions = msg.setdefault("reactions", [])
        for r in reactions:
            if r["name"] == name:
                if self.bot_user_id in r["users"]:
                    return {"ok": False, "error": "already_reacted"}
                r["users"].append(self.bot_user_id)
                r["count"] += 1
                return {"ok": True}
        reactions.append({"name": name, "users": [self.bot_user_id], "count": 1})
        return {"ok": True}

    def _users_info(self, p: dict[str, Any], call: Call) -> dict[str, Any]:
        uid = p.get("user")
        if uid not in self.users:
            return {"ok": False, "error": "user_not_found"}
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
        """A direct message with one user (what the bot needs; group DMs are not modelled)."""
        users = str(p.get("users") or "").split(",")
        if users == [""]:
            return {"ok": False, "error": "users_list_not_supplied"}
        if len(users) != 1 or users[0] not in self.users:
            return {"ok": False, "error": "user_not_found"}
        channel = "D" + users[0][1:]
        self.channels.setdefault(channel, f"dm-{self.users[users[0]]}")
        return {"ok": True, "channel": {"id": channel}}

    def _conversations_info(self, p: dict[str, Any], call: Call) -> dict[str, Any]:
        cid = p.get("channel")
        err = self._channel_error(cid)
        if err:
            return err
        return {
            "ok": True,
            "channel": {
                "id": cid,
                "name": self.channels[cid],
                "is_channel": True,
                "is_group": False,
                "is_im": False,
                "is_private": False,
                "is_archived": False,
                "is_member": True,
                "created": 1700000000,
            },
        }

    # -- files (upload v2)

    def _files_get_upload_url(self, p: dict[str, Any], call: Call) -> dict[str, Any]:
        filename = p.get("filename")
        length = p.get("length")
        try:
            length_i = int(length) if length is not None else None
        except (TypeError, ValueError):
            length_i = None
        if not filename or length_i is None:
            return {"ok": False, "error": "invalid_arguments"}
        fid = f"F{next(self._file_seq):07d}"
        key = uuid.uuid4().hex
        self._upload_keys[key] = fid
        self._files[fid] = {
            "id": fid,
            "name": filename,
            "title": filename,
            "length": length_i,
            "alt_txt": p.get("alt_txt"),
            "snippet_type": p.get("snippet_type"),
            "uploaded": False,
            "content": None,
            "completed": False,
            "shares": {},
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
        raw = p.get("files")
        try:
            files = json.loads(raw) if isinstance(raw, str) else raw
        except ValueError:
            return {"ok": False, "error": "invalid_arguments"}
        if not isinstance(files, list) or not files:
            return {"ok": False, "error": "invalid_arguments"}
        p["files"] = files
        channel = p.get("channel_id") or None
        if p.get("channels"):
            channel = str(p["channels"]).split(",")[0]
        if channel is not None and channel not in self.channels:
            return {"ok": False, "error": "channel_not_found"}
        thread_ts = None
        if p.get("thread_ts"):
            if channel is None:
                return {"ok": False, "error": "invalid_arguments"}
            thread_ts = self._resolve_thread(channel, p["thread_ts"])
            if thread_ts is None:
                return {"ok": False, "error": "thread_not_found"}
        out = []
        for item in files:
            fid = item.get("id") if isinstance(item, dict) else None
            f = self._files.get(fid)
            if f is None or not f["uploaded"]:
                return {"ok": False, "error": "file_not_found"}
            if f["completed"]:
                return {"ok": False, "error": "file_upload_already_completed"}
        for item in files:
            f = self._files[item["id"]]
            f["completed"] = True
            if item.get("title"):
                f["title"] = item["title"]
            out.append(self._file_obj(f))
        if channel is not None:
            msg = self._new_message(
                channel,
                p.get("initial_comment") or "",
                None,
                thread_ts=thread_ts,
                subtype=None,
                files=[self._file_obj(self._files[i["id"]]) for i in files],
                upload=True,
            )
            for i in files:
                self._files[i["id"]]["shares"] = {
                    "public": {channel: [{"ts": msg["ts"], "thread_ts": thread_ts}]}
                }
        return {"ok": True, "files": out}

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
        if fut is not None and not fut.done():
            fut.set_result(ack)
            self.acks.append(ack)
            self._apply_ack_payload(env, ack.payload)
        else:
            self.late_acks.append(ack)
        await self._notify()

    def _apply_ack_payload(self, env: dict[str, Any], payload: dict[str, Any] | None) -> None:
        """A slash-command ack with a body is shown to the invoking user (or the channel)."""
        if env["type"] != "slash_commands" or not payload:
            return
        p = env["payload"]
        if payload.get("response_type") == "in_channel" and p["channel_id"] in self.channels:
            self._new_message(p["channel_id"], payload.get("text") or "", payload.get("blocks"))
        else:
            self._ephemerals.append(
                {
                    "ts": self._next_ts(),
                    "channel": p["channel_id"],
                    "user": p["user_id"],
                    "text": payload.get("text") or "",
                    "blocks": payload.get("blocks"),
                    "source": "ack",
                }
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
        """Deliver an envelope on the newest open connection; wait for its ack (on any
        connection, as Slack does). `drop_after_send`: that connection is dropped abruptly
        right after the envelope, before the app could acknowledge it there."""
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

    def _new_response_url(self, **context: Any) -> str:
        key = uuid.uuid4().hex
        self._response_keys[key] = context
        return f"{self.base_url}/response_url/{key}"

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
        """Deliver a slash command over Socket Mode. Returns the Ack (payload, latency);
        raises AckTimeout if the app never acks (`ack_timeout`)."""
        response_url = self._new_response_url(
            kind="slash_commands", channel=channel_id, user=user_id
        )
        payload = self._slash_payload(user_id, channel_id, text, command, response_url)
        ack = await self.send_envelope(
            "slash_commands",
            payload,
            accepts_response_payload=True,
            timeout=timeout,
            drop_after_send=drop_after_send,
        )
        self._response_keys[response_url.rsplit("/", 1)[1]]["envelope_id"] = ack.envelope_id
        return ack

    def _slash_payload(
        self, user_id: str, channel_id: str, text: str, command: str, response_url: str
    ) -> dict[str, Any]:
        from .signing import slash_command_form

        return slash_command_form(
            user_id=user_id,
            channel_id=channel_id,
            text=text,
            command=command,
            user_name=self.users.get(user_id),
            channel_name=self.channels.get(channel_id),
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
        The button must exist in the message's blocks, as in Slack."""
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
            kind="interactive", channel=channel_id, user=user_id, message_ts=message_ts
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
                "name": self.channels.get(channel_id, channel_id.lower()),
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

    async def _handle_response_url(self, request: web.Request) -> web.StreamResponse:
        key = request.match_info["key"]
        ctx = self._response_keys.get(key)
        if ctx is None:
            return web.Response(status=404, text="no_service", content_type="text/plain")
        try:
            body = await request.json()
        except ValueError:
            return web.Response(status=400, text="invalid_payload", content_type="text/plain")
        post = ResponseUrlPost(
            seq=len(self.responses) + 1,
            key=key,
            envelope_id=ctx.get("envelope_id"),
            body=body,
            time=time.monotonic(),
        )
        channel, user = ctx["channel"], ctx["user"]
        if _truthy(body.get("delete_original")) and ctx.get("message_ts"):
            self._store.get(channel, {}).pop(ctx["message_ts"], None)
        elif _truthy(body.get("replace_original")) and ctx.get("message_ts"):
            m = self._store.get(channel, {}).get(ctx["message_ts"])
            if m is not None:
                m["text"] = body.get("text") or ""
                if "blocks" in body:
                    m["blocks"] = self._assign_block_ids(body["blocks"])
            else:
                for e in self._ephemerals:
                    if e["ts"] == ctx["message_ts"]:
                        e["text"] = body.get("text") or ""
                        e["blocks"] = body.get("blocks")
        elif body.get("response_type") == "in_channel" and channel in self.channels:
            thread_ts = body.get("thread_ts")
            self._new_message(
                channel,
                body.get("text") or "",
                body.get("blocks"),
                thread_ts=self._resolve_thread(channel, thread_ts) if thread_ts else None,
            )
        else:
            self._ephemerals.append(
                {
                    "ts": self._next_ts(),
                    "channel": channel,
                    "user": user,
                    "text": body.get("text") or "",
                    "blocks": body.get("blocks"),
                    "source": "response_url",
                }
            )
        self.responses.append(post)
        await self._notify()
        return web.Response(text="ok", content_type="text/plain")

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
        response_url = self._new_response_url(
            kind="slash_commands", channel=channel_id, user=user_id
        )
        req = build_signed_slash_command(
            signing_secret or self.signing_secret,
            user_id=user_id,
            channel_id=channel_id,
            text=text,
            command=command,
            timestamp=timestamp,
            user_name=self.users.get(user_id, user_id.lower()),
            channel_name=self.channels.get(channel_id, channel_id.lower()),
            response_url=response_url,
            trigger_id=f"{int(time.time())}.{uuid.uuid4().int % 10**12}.trigger",
            team_id=self.team_id,
            team_domain=self.team_domain,
            api_app_id=self.app_id,
        )
        if self._http is None:
            self._http = aiohttp.ClientSession()
        start = time.monotonic()
        async with self._http.post(url, data=req.body.encode(), headers=req.headers) as res:
            body = await res.text()
            return HttpResult(
                status=res.status,
                body=body,
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
