"""Does the server still serve? `/health` answers 200 while a hung engine generates nothing, so
`watch` asks two more witnesses:

- vLLM's `/metrics`: requests running (`vllm:num_requests_running`) while
  `vllm:generation_tokens_total` does not advance for `watch.token_stall` seconds is a hang;
- a canary: when nothing proved the server for `watch.canary_interval` seconds and it is not busy
  with real traffic, a short completion that must end within `watch.canary_timeout`.

`TokenStall` and `CanarySchedule` are the rules (pure, tested with a clock of their own);
`ServingWatch.run` applies them to the live server.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass

import httpx

from cluster.bench.server_metrics import ServerCounters, read_counters
from cluster.bench.stream import measure_request
from cluster.config import WatchConfig

CANARY_PROMPT = "Reply with the single word: ok"
CANARY_MAX_TOKENS = 4
# A canary that fails outright (an HTTP error, not a wait) is asked again once before it counts.
CANARY_ERRORS = 2


@dataclass(frozen=True)
class ServingHung:
    """The server answers /health but does not serve: what showed it, and the figures."""

    node: str
    detail: str  # one line: what was seen
    evidence: str  # the figures: the canary's timing, the counters


def describe_counters(counters: ServerCounters) -> str:
    return (
        f"vllm:num_requests_running={counters.running:g}, "
        f"vllm:num_requests_waiting={counters.waiting:g}, "
        f"vllm:generation_tokens_total={counters.generation_tokens:g}"
    )


class TokenStall:
    """Requests running while generated tokens stand still for `stall_s` seconds."""

    def __init__(self, stall_s: float):
        self.stall_s = stall_s
        self._tokens: float | None = None
        self._since: float | None = None  # when running began with these tokens

    def observe(self, counters: ServerCounters, at: float) -> str | None:
        """Feed one reading; the hang in words once it has lasted `stall_s`, else None."""
        advanced = self._tokens is None or counters.generation_tokens != self._tokens
        self._tokens = counters.generation_tokens
        if counters.running <= 0:
            self._since = None
            return None
        if advanced or self._since is None:
            self._since = at
            return None
        stuck = at - self._since
        if stuck < self.stall_s:
            return None
        return (
            f"tokens stalled: {counters.running:g} request(s) running while "
            f"vllm:generation_tokens_total stayed at {counters.generation_tokens:g} for "
            f"{stuck:.1f} s"
        )


class CanarySchedule:
    """When a canary is due: nothing proved the server for `interval` seconds (generated tokens
    advancing are proof: real traffic was served) and no real request is running or waiting."""

    def __init__(self, interval: float, now: float):
        self.interval = interval
        self._proven_at = now
        self._tokens: float | None = None

    def proven(self, at: float) -> None:
        self._proven_at = at

    def due_in(self, at: float) -> float:
        """Seconds until a canary is due if nothing proves the server meanwhile."""
        return max(0.0, self._proven_at + self.interval - at)

    def due(self, counters: ServerCounters | None, at: float) -> bool:
        """`counters`: the server's /metrics now, None when it could not be read (a canary is
        then due at the interval all the same)."""
        if counters is not None:
            if self._tokens is not None and counters.generation_tokens > self._tokens:
                self._proven_at = at
            self._tokens = counters.generation_tokens
            if counters.busy:
                return False
        return at - self._proven_at >= self.interval


class ServingWatch:
    """Reads /metrics every `metrics_interval`, runs the canary when due; `run` returns the
    first sign that the server does not serve."""

    def __init__(
        self,
        settings: WatchConfig,
        client: httpx.AsyncClient,
        model: str,
        node: str,
        *,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.settings = settings
        self.client = client
        self.model = model
        self.node = node
        self.clock = clock
        self.stall = TokenStall(settings.token_stall)
        self.schedule = CanarySchedule(settings.canary_interval, clock())
        self._errors: list[str] = []

    async def counters(self) -> ServerCounters | None:
        try:
            async with asyncio.timeout(self.settings.canary_timeout):
                return await read_counters(self.client, self.model)
        except (httpx.HTTPError, ValueError, TimeoutError):
            return None  # /metrics unreadable: the health probe and the canary still judge

    async def check(self) -> ServingHung | None:
        """One round: the counters, then the canary if due."""
        counters = await self.counters()
        now = self.clock()
        if counters is not None:
            stalled = self.stall.observe(counters, now)
            if stalled is not None:
                return ServingHung(
                    self.node,
                    stalled,
                    f"found by the token-stall rule (requests running while generated tokens "
                    f"stand still for watch.token_stall {self.settings.token_stall:g} s; "
                    f"/metrics read every {self.settings.metrics_interval:g} s; no canary is "
                    f"sent while requests run): {describe_counters(counters)}",
                )
        if not self.schedule.due(counters, now):
            return None
        return await self.canary()

    async def canary(self) -> ServingHung | None:
        timeout = self.settings.canary_timeout
        sent = self.clock()
        try:
            async with asyncio.timeout(timeout):
                measured = await measure_request(
                    self.client, self.model, CANARY_PROMPT, CANARY_MAX_TOKENS
                )
        except TimeoutError:
            after = await self.counters()
            figures = f"; /metrics after it: {describe_counters(after)}" if after else ""
            return ServingHung(
                self.node,
                f"a canary completion ({CANARY_MAX_TOKENS} tokens) got no complete answer "
                f"within {timeout:g} s",
                f"canary sent {self.clock() - sent:.1f} s before it was given up "
                f"(watch.canary_timeout {timeout:g} s){figures}",
            )
        metrics = measured.metrics
        if metrics.ok:
            self._errors.clear()
            self.schedule.proven(self.clock())
            return None
        self._errors.append(metrics.error or "no token")
        if len(self._errors) < CANARY_ERRORS:
            return None
        errors = "; ".join(self._errors)
        return ServingHung(
            self.node,
            f"{len(self._errors)} canary completions in a row failed: {self._errors[-1]}",
            f"canary errors: {errors}",
        )

    async def run(self) -> ServingHung:
        while True:
            hung = await self.check()
            if hung is not None:
                return hung
            # read at the metrics interval, and no later than when the canary falls due
            await asyncio.sleep(
                max(0.05, min(self.settings.metrics_interval, self.schedule.due_in(self.clock())))
            )
