"""The head's OpenAI-compatible API: health, models, and one timed streamed completion."""

from __future__ import annotations

import json
import time

import httpx
from httpx_sse import aconnect_sse

from cluster.events import CompletionSample

SAMPLE_PROMPT = "In two sentences, what is tensor parallelism?"


def api_client(base_url: str, *, read_timeout: float = 120.0) -> httpx.AsyncClient:
    # Explicit timeouts: httpx's 5 s default would cut a long time-to-first-token.
    return httpx.AsyncClient(
        base_url=base_url,
        timeout=httpx.Timeout(connect=10.0, read=read_timeout, write=10.0, pool=10.0),
    )


async def health(client: httpx.AsyncClient) -> tuple[bool, str]:
    try:
        response = await client.get("/health")
    except httpx.HTTPError as exc:
        return False, f"GET /health failed: {type(exc).__name__}: {exc}"
    return response.status_code == 200, f"GET /health -> {response.status_code}"


async def served_models(client: httpx.AsyncClient) -> list[dict]:
    response = await client.get("/v1/models")
    response.raise_for_status()
    return response.json().get("data", [])


async def sample_completion(
    client: httpx.AsyncClient, model: str, *, prompt: str = SAMPLE_PROMPT, max_tokens: int = 128
) -> CompletionSample:
    """One streamed chat completion, timed the way vLLM's benchmark does (tokens from usage)."""
    body = {
        "model": model,
        "messages": [{"role": "user", "content": prompt}],
        "max_tokens": max_tokens,
        "temperature": 0,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    text: list[str] = []
    reasoning: list[str] = []
    usage: dict = {}
    finish_reason = None
    sent = time.perf_counter()
    first = last = None
    async with aconnect_sse(client, "POST", "/v1/chat/completions", json=body) as source:
        source.response.raise_for_status()
        async for event in source.aiter_sse():
            if event.data == "[DONE]":
                break
            chunk = json.loads(event.data)
            usage = chunk.get("usage") or usage
            for choice in chunk.get("choices", []):
                delta = choice.get("delta", {})
                piece = delta.get("content") or ""
                thought = delta.get("reasoning") or delta.get("reasoning_content") or ""
                if piece or thought:
                    last = time.perf_counter()
                    first = first or last
                text.append(piece)
                reasoning.append(thought)
                finish_reason = choice.get("finish_reason") or finish_reason
    if first is None or last is None:
        raise ValueError("the stream carried no token")
    completion_tokens = int(usage.get("completion_tokens", 0))
    decode_s = last - first
    return CompletionSample(
        text="".join(text),
        reasoning="".join(reasoning),
        prompt_tokens=int(usage.get("prompt_tokens", 0)),
        completion_tokens=completion_tokens,
        finish_reason=finish_reason,
        ttft_s=first - sent,
        e2e_s=last - sent,
        decode_tps=(completion_tokens - 1) / decode_s if completion_tokens > 1 and decode_s > 0 else None,
    )
