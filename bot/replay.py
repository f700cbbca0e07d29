"""HTTP mode: each signed request from Slack is acted on once.

Bolt checks a request's signature and that its timestamp is within Slack's 5 minutes, but takes
the same signed request twice: whoever captured one could replay it (a command, a click) until it
goes stale. Slack itself re-sends a request it got no answer to in time (`X-Slack-Retry-Num`),
signed anew but with the same payload. So: a signature already accepted is refused (401); a
payload already accepted (its `trigger_id`, or an event's `event_id`) is answered as the first
time was, without running anything again.

What is remembered lasts as long as Slack's window, for at most `limit` requests.
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from slack_bolt.request.async_request import AsyncBoltRequest
from slack_bolt.response import BoltResponse
from slack_sdk.signature import Clock, SignatureVerifier

log = logging.getLogger(__name__)

WINDOW = 300.0  # seconds either side of a request's timestamp in which its signature is valid


@dataclass(frozen=True)
class Replay:
    """A refused replay, for the audit trail: who the payload names and what it asked."""

    user: str
    channel: str
    what: str


class _Expiring:
    """Keys remembered until their time, oldest first; at most `limit` of them."""

    def __init__(self, limit: int):
        self.limit = limit
        self._until: OrderedDict[str, tuple[float, Any]] = OrderedDict()

    def forget_expired(self, at: float) -> None:
        # oldest first, and each kept for about the same time: stop at the first still wanted
        while self._until:
            key, (until, _) = next(iter(self._until.items()))
            if until > at:
                return
            del self._until[key]

    def add(self, key: str, until: float, value: Any = None) -> None:
        self._until[key] = (until, value)
        self._until.move_to_end(key)
        while len(self._until) > self.limit:
            dropped, _ = self._until.popitem(last=False)
            log.warning("replay guard full (%d requests within %.0f s): forgot %s early",
                        self.limit, WINDOW, dropped[:16])

    def get(self, key: str) -> tuple[float, Any] | None:
        return self._until.get(key)

    def set_value(self, key: str, value: Any) -> None:
        if key in self._until:
            self._until[key] = (self._until[key][0], value)

    def discard(self, key: str) -> None:
        self._until.pop(key, None)


class _Clock(Clock):
    def __init__(self, now: Callable[[], float]):
        self._now = now

    def now(self) -> float:
        return self._now()


Dispatch = Callable[[AsyncBoltRequest], Awaitable[BoltResponse]]


class ReplayGuard:
    def __init__(self, signing_secret: str, *, on_replay: Callable[[Replay], None], limit: int = 10_000,
                 clock: Callable[[], float] = time.time):
        self._verifier = SignatureVerifier(signing_secret, clock=_Clock(clock))
        self._on_replay = on_replay
        self._clock = clock
        self._signatures = _Expiring(limit)
        self._deliveries = _Expiring(limit)  # trigger_id / event_id -> the answer given (None: in progress)

    async def handle(self, request: AsyncBoltRequest, dispatch: Dispatch) -> BoltResponse:
        timestamp, signature = _header(request, "x-slack-request-timestamp"), _header(request, "x-slack-signature")
        if not self._authentic(request.raw_body, timestamp, signature):
            return await dispatch(request)  # Bolt refuses it (401) as before
        at = self._clock()
        self._signatures.forget_expired(at)
        self._deliveries.forget_expired(at)
        if self._signatures.get(signature) is not None:
            replay = _describe(request.body)
            log.warning("refused a replayed request (signature of %s already used): %s", timestamp, replay.what)
            self._on_replay(replay)
            return BoltResponse(status=401, body="replayed request")
        # remembered while it could still pass the signature check
        self._signatures.add(signature, int(timestamp) + WINDOW + 1)
        delivery = _delivery_id(request.body)
        if delivery is not None:
            seen = self._deliveries.get(delivery)
            if seen is not None:
                log.info("Slack delivered %s again (retry %s, %s): answered without running it again", delivery,
                         _header(request, "x-slack-retry-num") or "-", _header(request, "x-slack-retry-reason") or "-")
                return seen[1] or BoltResponse(status=200, body="")
            # Slack re-sends an event after 1 and after 5 minutes: kept beyond the last of them
            self._deliveries.add(delivery, at + 2 * WINDOW)
        try:
            response = await dispatch(request)
        except BaseException:
            if delivery is not None:
                self._deliveries.discard(delivery)  # nothing was answered: Slack's retry may run it
            raise
        if delivery is not None:
            if response.status >= 500:
                self._deliveries.discard(delivery)
            else:
                self._deliveries.set_value(delivery, response)
        return response

    def _authentic(self, body: str, timestamp: str | None, signature: str | None) -> bool:
        try:
            return bool(timestamp and signature and self._verifier.is_valid(body, timestamp, signature))
        except ValueError:  # a timestamp that is not a number
            return False


def _header(request: AsyncBoltRequest, name: str) -> str | None:
    values = request.headers.get(name) or []
    return values[0] if values else None


def _delivery_id(body: dict[str, Any]) -> str | None:
    """What Slack keeps the same when it re-sends a payload: a command's or an interaction's
    `trigger_id`, an event's `event_id`."""
    key = body.get("trigger_id") or body.get("event_id")
    return str(key) if key else None


def _describe(body: dict[str, Any]) -> Replay:
    user = body.get("user_id") or (body.get("user") or {}).get("id") or "unknown"
    channel = (body.get("channel_id") or (body.get("channel") or {}).get("id")
               or (body.get("container") or {}).get("channel_id") or "unknown")
    if body.get("command"):
        what = f"{body['command']} {body.get('text') or ''}".strip()
    elif body.get("actions"):
        what = "button " + ", ".join(str(a.get("action_id")) for a in body["actions"])
    else:
        what = str(body.get("type") or "request")
    return Replay(str(user), str(channel), what)
