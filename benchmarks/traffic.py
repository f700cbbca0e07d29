"""Users keeping a served model busy: a few long streamed completions sent to the API at once,
each sent again as soon as it ends, on a thread and event loop of their own (users are other
machines: their work does not run on the bot's loop), noting when each token arrives."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import httpx
from httpx_sse import SSEError, aconnect_sse

from cluster.serving.api import api_client

PROMPT = "Tell a long story about two machines that share one model."
ERRORS_KEPT = 20


class Traffic:
    """`with Traffic(url, model): ...` streams until the block ends. Times are wall-clock
    (`time.time()`), as Docker's stamps and the Slack stand-in's are."""

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        streams: int = 4,
        max_tokens: int = 400,
        read_timeout: float = 30.0,
    ):
        self.base_url, self.model, self.streams = base_url, model, streams
        self.max_tokens, self.read_timeout = max_tokens, read_timeout
        self.first_token: float | None = None
        self.last_token: float | None = None
        self.tokens = 0  # stream events that carried text
        self.finished = 0  # completions that ended with [DONE]
        self.in_flight = 0  # requests sent and not yet ended
        self.errors: list[str] = []
        self._stop = asyncio.Event()

    def __enter__(self) -> Traffic:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="traffic", daemon=True)
        self.thread.start()
        self.done = asyncio.run_coroutine_threadsafe(self._run(), self.loop)
        return self

    def __exit__(self, *exc: Any) -> None:
        self.loop.call_soon_threadsafe(self._stop.set)
        try:
            self.done.result(timeout=30)
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join()
            self.loop.close()

    async def _run(self) -> None:
        async with api_client(
            self.base_url, read_timeout=self.read_timeout, connections=self.streams
        ) as client:
            users = [asyncio.create_task(self._user(client)) for _ in range(self.streams)]
            await self._stop.wait()
            for user in users:
                user.cancel()
            await asyncio.gather(*users, return_exceptions=True)

    async def _user(self, client: httpx.AsyncClient) -> None:
        body = {
            "model": self.model,
            "prompt": PROMPT,
            "max_tokens": self.max_tokens,
            "ignore_eos": True,  # vLLM's own parameter: every stream runs its full length
            "stream": True,
        }
        while True:
            self.in_flight += 1
            try:
                async with aconnect_sse(client, "POST", "/v1/completions", json=body) as source:
                    source.response.raise_for_status()
                    async for event in source.aiter_sse():
                        if event.data.strip() == "[DONE]":
                            self.finished += 1
                            break
                        if '"text":""' not in event.data.replace(" ", ""):
                            now = time.time()
                            self.first_token = self.first_token or now
                            self.last_token = now
                            self.tokens += 1
            except (httpx.HTTPError, SSEError) as exc:
                if len(self.errors) < ERRORS_KEPT:
                    self.errors.append(f"{type(exc).__name__}: {exc}")
                await asyncio.sleep(0.5)  # a refused request is not retried in a tight loop
            finally:
                self.in_flight -= 1
