"""HTTP mode: only requests Slack signed are acted on, each once, and every refusal is audited.

A request without a signature, with a stale timestamp or with a signature that does not match is
refused here (401) before Bolt sees it: Bolt would refuse it too, but silently, before any of our
code. Bolt checks a request's signature and that its timestamp is within Slack's 5 minutes, but
takes the same signed request twice: whoever captured one could replay it (a command, a click) until it
goes stale. Slack itself re-sends a request it got no answer to in time (`X-Slack-Retry-Num`),
signed anew but with the same payload. So: a signature already accepted is refused (401); a
payload already accepted (its `trigger_id`, or an event's `event_id`) is answered as the first
time was, without running anything again.

What is remembered lasts as long as Slack's window, for at most `limit` requests.
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict, deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from typing import Any

from slack_bolt.request.async_request import AsyncBoltRequest
from slack_bolt.response import BoltResponse
from slack_sdk.signature import Clock, SignatureVerifier

from cluster.redact import redact

log = logging.getLogger(__name__)

WINDOW = 300.0  # seconds either side of a request's timestamp in which its signature is valid


AUDITED_PER_MINUTE = 60  # refusals audited; beyond, an unsigned flood costs a count, not a row each


@dataclass(frozen=True)
class Refusal:
    """A refused request, for the audit trail: who the payload names (for an unsigned one, only
    what it claims), what it asked, and why it was refused."""

    user: str
    channel: str
    what: str
    why: str


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
            log.warning(
                "replay guard full (%d requests within %.0f s): forgot %s early",
                self.limit,
                WINDOW,
                dropped[:16],
            )

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
    def __init__(
        self,
        signing_secret: str,
        *,
        on_refused: Callable[[Refusal], None],
        limit: int = 10_000,
        clock: Callable[[], float] = time.time,
    ):
        self._verifier = SignatureVerifier(signing_secret, clock=_Clock(clock))
        self._on_refused = on_refused
        self._clock = clock
        self._signatures = _Expiring(limit)
        self._deliveries = _Expiring(
            limit
        )  # trigger_id / event_id -> the answer given (None: in progress)
        self._audited: deque[float] = deque()  # when the refusals of the last minute were audited
        self._unaudited = 0

    async def handle(self, request: AsyncBoltRequest, dispatch: Dispatch) -> BoltResponse:
        timestamp, signature = (
            _header(request, "x-slack-request-timestamp"),
            _header(request, "x-slack-signature"),
        )
        unsigned = self._unsigned(request.raw_body, timestamp, signature)
        if unsigned is not None:
            return self._refuse(request, unsigned)
        assert timestamp is not None and signature is not None  # else refused as unsigned
        at = self._clock()
        self._signatures.forget_expired(at)
        self._deliveries.forget_expired(at)
        if self._signatures.get(signature) is not None:
            return self._refuse(request, "a replayed HTTP request (its signature was already used)")
        # remembered while it could still pass the signature check
        self._signatures.add(signature, int(timestamp) + WINDOW + 1)
        delivery = _delivery_id(request.body)
        if delivery is not None:
            seen = self._deliveries.get(delivery)
            if seen is not None:
                log.info(
                    "Slack delivered %s again (retry %s, %s): answered without running it again",
                    delivery,
                    _header(request, "x-slack-retry-num") or "-",
                    _header(request, "x-slack-retry-reason") or "-",
                )
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

    def _unsigned(self, body: str, timestamp: str | None, signature: str | None) -> str | None:
        """Why the request is not one Slack signed just now, or None when it is."""
        if not timestamp or not signature:
            return "an HTTP request without a signature (sender unverified)"
        try:
            age = self._clock() - int(timestamp)
        except ValueError:
            return "an HTTP request with a malformed timestamp (sender unverified)"
        if abs(age) > WINDOW:
            return f"a stale HTTP request (signed {age:.0f} s ago; sender unverified)"
        if not self._verifier.is_valid(body, timestamp, signature):
            return "a forged HTTP request (its signature does not match; sender unverified)"
        return None

    def _refuse(self, request: AsyncBoltRequest, why: str) -> BoltResponse:
        refusal = _describe(request.body, why)
        log.warning("refused %s: %s", why, refusal.what)
        at = self._clock()
        while self._audited and self._audited[0] <= at - 60:
            self._audited.popleft()
        if len(self._audited) < AUDITED_PER_MINUTE:
            self._audited.append(at)
            if self._unaudited:
                refusal = replace(
                    refusal,
                    why=f"{why} ({self._unaudited} earlier refusal(s) not audited: "
                    f"more than {AUDITED_PER_MINUTE} a minute)",
                )
                self._unaudited = 0
            self._on_refused(refusal)
        else:
            self._unaudited += 1
        return BoltResponse(status=401, body="")


def _header(request: AsyncBoltRequest, name: str) -> str | None:
    values = request.headers.get(name) or []
    return values[0] if values else None


def _delivery_id(body: dict[str, Any]) -> str | None:
    """What Slack keeps the same when it re-sends a payload: a command's or an interaction's
    `trigger_id`, an event's `event_id`."""
    key = body.get("trigger_id") or body.get("event_id")
    return str(key) if key else None


def _describe(body: dict[str, Any], why: str) -> Refusal:
    """What the payload says; it may come from anyone, so it is redacted and cut short."""
    body = body if isinstance(body, dict) else {}
    user = _field(body, "user_id") or _field(body.get("user"), "id") or "unknown"
    channel = (
        _field(body, "channel_id")
        or _field(body.get("channel"), "id")
        or _field(body.get("container"), "channel_id")
        or "unknown"
    )
    if body.get("command"):
        what = f"{body['command']} {body.get('text') or ''}".strip()
    elif isinstance(body.get("actions"), list):
        what = "button " + ", ".join(str(_field(a, "action_id")) for a in body["actions"])
    else:
        what = str(body.get("type") or "request")
    return Refusal(redact(user)[:40], redact(channel)[:40], redact(what)[:200], why)


def _field(value: Any, key: str) -> str | None:
    found = value.get(key) if isinstance(value, dict) else None
    return str(found) if found else None
