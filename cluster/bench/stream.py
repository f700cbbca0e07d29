"""The one SSE parser: a streamed chat completion, timed the way vLLM's benchmark times it.

`ChunkParser` is pure (fed the `data:` payload of each event with its arrival time) so tests
can drive it with hand-written streams; `measure_request` runs one request over httpx.
Tokens come from `usage` (the final chunk, or every chunk with continuous_usage_stats);
chunks are never counted as tokens. Without usage, POST /tokenize counts the text and the
figure is marked approximate.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any

import httpx
from httpx_sse import SSEError, aconnect_sse

from cluster.bench.models import RequestMetrics, SampleAnswer
from cluster.events import CompletionSample

SAMPLE_PROMPT = "In two sentences, what is tensor parallelism?"


@dataclass
class ChunkParser:
    """State of one stream. `feed` returns False once `[DONE]` (or an error event) arrived."""

    sent: float
    first: float | None = None
    last: float | None = None
    content: list[str] = field(default_factory=list)
    reasoning: list[str] = field(default_factory=list)
    usage: dict[str, Any] | None = None
    finish_reason: str | None = None
    error: str | None = None
    done: bool = False
    token_chunks: int = 0
    # From continuous usage: tokens attributed per kind; None once a chunk mixes both kinds.
    _split: dict[str, int] | None = field(default_factory=lambda: {"reasoning": 0, "content": 0})
    _held: int = 0  # tokens streamed as empty deltas, not yet credited to a kind
    _last_kind: str = "content"
    _running_tokens: int = 0
    _usage_every_chunk: bool = True
    parse_s: float = 0.0

    def feed(self, data: str, now: float) -> bool:
        started = time.perf_counter()
        try:
            return self._feed(data, now)
        finally:
            self.parse_s += time.perf_counter() - started

    def _feed(self, data: str, now: float) -> bool:
        data = data.strip()
        if not data:
            return True
        if data == "[DONE]":
            self.done = True
            return False
        try:
            chunk = json.loads(data)
        except ValueError:
            self.error = f"undecodable stream event: {data[:200]}"
            return False
        if not isinstance(chunk, dict):
            return True
        if "error" in chunk or chunk.get("object") == "error":
            err = chunk.get("error", chunk)
            message = err.get("message", err) if isinstance(err, dict) else err
            self.error = f"server error mid-stream: {message}"
            return False
        usage = chunk.get("usage")
        kinds: set[str] = set()
        for choice in chunk.get("choices") or []:
            delta = choice.get("delta") or {}
            piece = delta.get("content") or ""
            thought = delta.get("reasoning") or delta.get("reasoning_content") or ""
            if piece:
                self.content.append(piece)
                kinds.add("content")
            if thought:
                self.reasoning.append(thought)
                kinds.add("reasoning")
            if delta.get("tool_calls"):
                kinds.add("tool")
            self.finish_reason = choice.get("finish_reason") or self.finish_reason
        gained = 0
        if usage:
            self.usage = usage
            count = int(usage.get("completion_tokens") or 0)
            gained = count - self._running_tokens
            self._running_tokens = count
            if self._split is not None and gained:
                if len(kinds) == 1 and kinds <= {"reasoning", "content"}:
                    kind = next(iter(kinds))
                    self._split[kind] += gained + self._held
                    self._held, self._last_kind = 0, kind
                elif not kinds and gained > 0 and chunk.get("choices"):
                    # a token ending inside a character (below): its kind is the piece's that
                    # completes it
                    self._held += gained
                elif kinds or gained < 0:
                    self._split = None
        elif kinds:
            self._usage_every_chunk = False
        # A token can stream as an empty delta (vLLM holds back a byte-level token that ends
        # inside a UTF-8 character, and a special token it does not print): with continuous
        # usage its choice's chunk still counts one more completion token, and it is timed as
        # one (the final usage-only chunk has no choice).
        if kinds or (gained > 0 and chunk.get("choices")):
            self.token_chunks += 1
            self.last = now
            if self.first is None:
                self.first = now
        return True

    @property
    def text(self) -> str:
        return "".join(self.content)

    @property
    def reasoning_text(self) -> str:
        return "".join(self.reasoning)

    def usage_split(self) -> tuple[int, int] | None:
        """(reasoning, answer) tokens exactly from usage, when the server allows it."""
        if self.usage is None:
            return None
        total = int(self.usage.get("completion_tokens") or 0)
        details = self.usage.get("completion_tokens_details") or {}
        if isinstance(details, dict) and details.get("reasoning_tokens") is not None:
            r = int(details["reasoning_tokens"])
            return r, total - r
        if not self.reasoning:
            return 0, total
        if not self.content:
            return total, 0
        if (
            self._usage_every_chunk
            and self._split is not None
            and self._split["reasoning"] + self._split["content"] + self._held == total
        ):
            # a stream that ends inside a character: its last tokens are of the last piece's kind
            last = "reasoning" if self._last_kind == "reasoning" else "content"
            split = {**self._split, last: self._split[last] + self._held}
            return split["reasoning"], split["content"]
        return None


@dataclass
class Measured:
    metrics: RequestMetrics
    text: str = ""
    reasoning: str = ""
    parse_s: float = 0.0
    end: float | None = field(default=None, repr=False)


def chat_body(model: str, prompt: str, max_tokens: int, *, ignore_eos: bool) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": model,
        "messages": [{"role": "user", "content": prompt}],
        "max_tokens": max_tokens,
        "temperature": 0,
        "stream": True,
        "stream_options": {"include_usage": True, "continuous_usage_stats": True},
    }
    if ignore_eos:
        body["ignore_eos"] = True
    return body


async def count_tokens(client: httpx.AsyncClient, model: str, text: str) -> int:
    if not text:
        return 0
    response = await client.post(
        "/tokenize", json={"model": model, "prompt": text, "add_special_tokens": False}
    )
    response.raise_for_status()
    return int(response.json()["count"])


async def measure_request(
    client: httpx.AsyncClient,
    model: str,
    prompt: str,
    max_tokens: int,
    *,
    ignore_eos: bool = False,
    origin: float | None = None,
) -> Measured:
    """One streamed chat completion. Never raises for server or transport errors: they are
    reported in `metrics.error` with whatever was measured before them."""
    body = chat_body(model, prompt, max_tokens, ignore_eos=ignore_eos)
    sent = time.perf_counter()
    origin = sent if origin is None else origin
    parser = ChunkParser(sent=sent)
    try:
        async with aconnect_sse(client, "POST", "/v1/chat/completions", json=body) as source:
            response = source.response
            if response.status_code != 200:
                await response.aread()
                parser.error = f"HTTP {response.status_code}: {_error_text(response)}"
            else:
                async for event in source.aiter_sse():
                    if not parser.feed(event.data, time.perf_counter()):
                        break
    except (httpx.HTTPError, SSEError) as exc:
        parser.error = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    if parser.error is None and not parser.done:
        parser.error = "the stream ended without [DONE]"
    return await _finish(client, model, parser, origin)


def _error_text(response: httpx.Response) -> str:
    try:
        data = response.json()
        err = data.get("error", data) if isinstance(data, dict) else data
        return str(err.get("message", err) if isinstance(err, dict) else err)[:300]
    except ValueError:
        return response.text[:300]


async def _finish(client: httpx.AsyncClient, model: str, p: ChunkParser, origin: float) -> Measured:
    approximate = split_approximate = False
    completion = prompt_tokens = None
    if p.usage is not None and p.usage.get("completion_tokens") is not None:
        completion = int(p.usage["completion_tokens"])
        prompt_tokens = p.usage.get("prompt_tokens")
    split = p.usage_split()
    if completion is None or split is None:
        try:
            if completion is None and p.token_chunks:
                completion = await count_tokens(client, model, p.reasoning_text + p.text)
                approximate = True
            if completion is not None and split is None:
                reasoning = await count_tokens(client, model, p.reasoning_text)
                reasoning = min(reasoning, completion)
                split = (reasoning, completion - reasoning)
                split_approximate = True
        except (httpx.HTTPError, KeyError, ValueError) as exc:
            p.error = p.error or f"no usage from the server and POST /tokenize failed: {exc}"
    ttft = e2e = tpot = decode = e2e_rate = None
    if p.first is not None and p.last is not None:
        ttft, e2e = p.first - p.sent, p.last - p.sent
        if completion:
            e2e_rate = completion / e2e if e2e > 0 else None
            if completion > 1 and e2e > ttft:
                tpot = (e2e - ttft) / (completion - 1)
                decode = 1.0 / tpot
    metrics = RequestMetrics(
        ok=p.error is None and p.first is not None,
        error=p.error or (None if p.first is not None else "the stream carried no token"),
        start_s=p.sent - origin,
        ttft_s=ttft,
        e2e_s=e2e,
        prompt_tokens=int(prompt_tokens) if prompt_tokens is not None else None,
        completion_tokens=completion,
        reasoning_tokens=split[0] if split else None,
        answer_tokens=split[1] if split else None,
        tokens_approximate=approximate,
        split_approximate=split_approximate,
        token_chunks=p.token_chunks,
        finish_reason=p.finish_reason,
        tpot_s=tpot,
        decode_tok_s=decode,
        e2e_tok_s=e2e_rate,
    )
    return Measured(metrics, p.text, p.reasoning_text, p.parse_s, p.last)


def sample_answer(measured: Measured) -> SampleAnswer:
    m = measured.metrics
    return SampleAnswer(
        text=measured.text,
        reasoning=measured.reasoning,
        finish_reason=m.finish_reason,
        budget_spent_in_reasoning=bool(measured.reasoning)
        and not measured.text.strip()
        and m.finish_reason == "length",
    )


async def sample_completion(
    client: httpx.AsyncClient, model: str, *, prompt: str = SAMPLE_PROMPT, max_tokens: int = 128
) -> CompletionSample:
    """The sample `up` and `verify` end with. Raises ValueError when the request failed."""
    measured = await measure_request(client, model, prompt, max_tokens)
    m = measured.metrics
    if not m.ok or m.ttft_s is None or m.e2e_s is None:
        raise ValueError(m.error or "the stream carried no token")
    return CompletionSample(
        text=measured.text,
        reasoning=measured.reasoning,
        prompt_tokens=m.prompt_tokens or 0,
        completion_tokens=m.completion_tokens or 0,
        finish_reason=m.finish_reason,
        ttft_s=m.ttft_s,
        e2e_s=m.e2e_s,
        decode_tps=m.decode_tok_s,
    )
