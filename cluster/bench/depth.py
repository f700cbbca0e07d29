"""Bench at depth: TTFT, prefill tok/s and decode tok/s with prompts of a given length.

Prompts are cut from a text shipped beside this module (depth_text.txt, repeated as needed) and
fitted to the length asked with the server's own tokenizer (`POST /tokenize` of the chat
messages, as the completion will see them), so the depth is exact in the server's tokens; the
figures use each request's own `usage.prompt_tokens`. Every request starts with a fresh number
in digits (one token per digit in the tokenizers we meet, so the length stays put): vLLM's
prefix cache cannot serve one prompt from another, and TTFT is a real prefill.

Prefill tok/s = prompt tokens / TTFT (the whole time to the first token, queueing and the
fixed cost of a request included: what a user waits for), as `vllm bench serve` reports
input throughput against TTFT.
"""

from __future__ import annotations

import re
import secrets
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cache
from itertools import cycle, islice
from pathlib import Path

import httpx

from cluster.bench.models import DepthLevel, RequestMetrics
from cluster.bench.stream import Measured, measure_request

TEXT = Path(__file__).with_name("depth_text.txt")
INSTRUCTION = "Read the text below, then summarise it in one paragraph."
MAX_DEPTH = 1 << 20
_DEPTH = re.compile(r"([0-9]{1,7})([kK]?)")


def parse_depths(text: str) -> list[int]:
    """`1k,4k,16k` -> [1024, 4096, 16384] (k = 1024; plain numbers are tokens), order kept.
    ValueError says what is wrong; the ranges are checked with the other bench options."""
    depths = []
    for part in (p.strip() for p in text.split(",")):
        match = _DEPTH.fullmatch(part)
        if match is None:
            raise ValueError(
                f"depth `{part[:20]}`: expected prompt lengths in tokens, e.g. 1k,4k,16k,32k "
                "(k = 1024) or 2000"
            )
        depths.append(int(match[1]) * (1024 if match[2] else 1))
    return depths


@cache
def _words() -> tuple[str, ...]:
    return tuple(TEXT.read_text(encoding="utf-8").split())


def _nonce() -> str:
    return f"{secrets.randbelow(10**8):08d}"


def depth_prompt(nonce: str, words: int) -> str:
    """The instruction after `nonce`, then the first `words` words of the text (repeated)."""
    return f"{nonce}. {INSTRUCTION}\n\n" + " ".join(islice(cycle(_words()), words))


@dataclass(frozen=True)
class Fitted:
    depth: int
    words: int
    tokens: int  # the fitted prompt's length, by /tokenize


async def chat_tokens(client: httpx.AsyncClient, model: str, prompt: str) -> tuple[int, int | None]:
    """(tokens of `prompt` as a chat completion's user message, the server's max_model_len)."""
    response = await client.post(
        "/tokenize",
        json={
            "model": model,
            "messages": [{"role": "user", "content": prompt}],
            "add_generation_prompt": True,
        },
    )
    response.raise_for_status()
    data = response.json()
    limit = data.get("max_model_len")
    return int(data["count"]), int(limit) if limit is not None else None


async def fit(client: httpx.AsyncClient, model: str, depth: int, *, output: int) -> Fitted:
    """The most words whose prompt is at most `depth` tokens (a binary search over /tokenize);
    ValueError when even the instruction alone is longer, or when `depth` and `output` tokens
    do not fit in the server's max_model_len."""
    nonce = _nonce()
    base, limit = await chat_tokens(client, model, depth_prompt(nonce, 0))
    if base > depth:
        raise ValueError(f"the instruction alone is {base} tokens")
    if limit is not None and depth + output > limit:
        raise ValueError(
            f"{depth} prompt + {output} output tokens exceed the server's max_model_len "
            f"{limit}: choose a smaller depth or launch with a larger max_model_len"
        )
    lo, lo_tokens = 0, base
    hi = max(1, depth - base)  # a word is at least one token: hi words are too many or exactly
    hi_tokens, _ = await chat_tokens(client, model, depth_prompt(nonce, hi))
    if hi_tokens <= depth:
        return Fitted(depth, hi, hi_tokens)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        tokens, _ = await chat_tokens(client, model, depth_prompt(nonce, mid))
        if tokens <= depth:
            lo, lo_tokens = mid, tokens
        else:
            hi = mid
    return Fitted(depth, lo, lo_tokens)


def _median(values: Sequence[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None


def prefill_tok_s(metrics: RequestMetrics) -> float | None:
    if not metrics.ok or not metrics.prompt_tokens or not metrics.ttft_s:
        return None
    return metrics.prompt_tokens / metrics.ttft_s


def summarize_depth(depth: int, runs: list[RequestMetrics], error: str | None = None) -> DepthLevel:
    good = [r for r in runs if r.ok]
    errors = sorted({r.error for r in runs if r.error} | ({error} if error else set()))
    prompt = _median([float(r.prompt_tokens) for r in good if r.prompt_tokens is not None])
    return DepthLevel(
        depth=depth,
        prompt_tokens=None if prompt is None else round(prompt),
        requests=len(runs),
        ok=len(good),
        errors=errors[:5],
        ttft_s=_median([r.ttft_s for r in good]),
        prefill_tok_s=_median([prefill_tok_s(r) for r in good]),
        decode_tok_s=_median([r.decode_tok_s for r in good]),
        tpot_s=_median([r.tpot_s for r in good]),
        requests_detail=runs,
    )


async def measure_depth(
    client: httpx.AsyncClient,
    model: str,
    depth: int,
    *,
    runs: int,
    max_tokens: int,
    count: Callable[[Measured], Measured] = lambda m: m,
) -> DepthLevel:
    """`runs` requests of `depth` prompt tokens, one at a time; the medians. A depth the server
    cannot take (longer than its max_model_len with the output) is a level with that error."""
    try:
        fitted = await fit(client, model, depth, output=max_tokens)
    except (httpx.HTTPError, ValueError, KeyError) as error:
        return summarize_depth(depth, [], f"not measured: {error}")
    measured = []
    for _ in range(runs):
        prompt = depth_prompt(_nonce(), fitted.words)
        m = count(await measure_request(client, model, prompt, max_tokens, ignore_eos=True))
        measured.append(m.metrics)
    return summarize_depth(depth, measured)
