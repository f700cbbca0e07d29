"""Benchmark results as plain data (pydantic): what the CLI, Slack and the history store share.

Definitions (vLLM's `bench serve`, see shared/reference/bench-metrics.md):
- TTFT: first chunk carrying a token (answer, reasoning or tool call) minus the send time.
- TPOT = (e2e - TTFT) / (tokens - 1); decode tok/s = 1 / TPOT (excludes TTFT).
- e2e tok/s = tokens / e2e latency: INCLUDES TTFT (llmperf's and GuideLLM's "tok/s").
- output tok/s of a level = sum of tokens / wall time from the first send to the last token
  (includes TTFT and queueing); aggregate decode tok/s = concurrency x mean per-stream decode
  tok/s (the steady-state rate of `concurrency` streams decoding together).
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True)


class RequestMetrics(_Model):
    """One streamed chat completion, timed on the client."""

    ok: bool
    error: str | None = Field(
        None, description="HTTP status, server error event or transport error"
    )
    start_s: float = Field(0.0, description="send time, seconds after the level (or run) started")
    ttft_s: float | None = None
    e2e_s: float | None = Field(None, description="last token chunk minus send time")
    prompt_tokens: int | None = None
    completion_tokens: int | None = Field(
        None, description="every generated token, reasoning included"
    )
    reasoning_tokens: int | None = None
    answer_tokens: int | None = None
    tokens_approximate: bool = Field(
        False, description="no usage from the server: counted with POST /tokenize on the text"
    )
    split_approximate: bool = Field(
        False, description="reasoning/answer split from /tokenize on each text, not from usage"
    )
    token_chunks: int = Field(
        0, description="SSE chunks that carried tokens (never counted as tokens)"
    )
    finish_reason: str | None = None
    tpot_s: float | None = None
    decode_tok_s: float | None = Field(None, description="1 / TPOT: excludes TTFT")
    e2e_tok_s: float | None = Field(None, description="tokens / e2e latency: includes TTFT")


class SampleAnswer(_Model):
    """The text of the warm-up completion (natural end, no ignore_eos): what the model said."""

    text: str
    reasoning: str = ""
    finish_reason: str | None = None
    budget_spent_in_reasoning: bool = Field(
        False, description="the token budget ran out before the answer began"
    )


class BenchRun(_Model):
    """Single stream: one warm-up, then `runs` measured requests; the figures are medians."""

    warmup: RequestMetrics
    runs: list[RequestMetrics]
    ttft_s: float | None = None
    decode_tok_s: float | None = None
    e2e_tok_s: float | None = None
    tpot_s: float | None = None
    completion_tokens: int | None = None
    reasoning_tokens: int | None = None
    answer_tokens: int | None = None
    tokens_approximate: bool = False


class ConcurrencyLevel(_Model):
    """`requests` identical requests, at most `concurrency` in flight (a semaphore)."""

    concurrency: int
    requests: int
    ok: int
    failed: int
    errors: list[str] = Field(default_factory=list)
    wall_s: float = Field(description="first send to last token")
    total_tokens: int
    output_tok_s: float = Field(
        description="sum of tokens / wall time (includes TTFT and queueing)"
    )
    aggregate_decode_tok_s: float | None = Field(
        None, description="concurrency x mean per-stream decode tok/s (excludes TTFT)"
    )
    per_stream_decode_tok_s: float | None = Field(None, description="median 1/TPOT over requests")
    per_stream_e2e_tok_s: float | None = Field(
        None, description="median tokens/e2e (includes TTFT)"
    )
    ttft_p50_s: float | None = None
    ttft_p90_s: float | None = None
    ttft_p99_s: float | None = None
    tpot_p50_s: float | None = None
    tokens_approximate: bool = False
    requests_detail: list[RequestMetrics] = Field(default_factory=list)


class DepthLevel(_Model):
    """`requests` single-stream requests, one at a time, each with a prompt `depth` tokens
    long (fitted with /tokenize; a fresh prefix each, so no prefix-cache hit); medians."""

    depth: int = Field(description="prompt tokens asked for")
    prompt_tokens: int | None = Field(None, description="prompt tokens the server counted (usage)")
    requests: int
    ok: int
    errors: list[str] = Field(default_factory=list)
    ttft_s: float | None = None
    prefill_tok_s: float | None = Field(None, description="prompt tokens / TTFT")
    decode_tok_s: float | None = Field(None, description="1 / TPOT at this depth")
    tpot_s: float | None = None
    requests_detail: list[RequestMetrics] = Field(default_factory=list)


class MetricsCheck(_Model):
    """The client's token count against the change in vllm:generation_tokens_total."""

    available: bool
    client_tokens: int | None = None
    server_tokens: float | None = None
    matches: bool | None = None
    detail: str = ""


class ClientOverhead(_Model):
    """Evidence that the client was not the bottleneck."""

    max_connections: int = Field(description="httpx.Limits of the client")
    loop_lag_max_ms: float = Field(description="worst event-loop delay seen by a 10 ms ticker")
    loop_lag_p99_ms: float
    parse_s: float = Field(description="time spent decoding JSON chunks and bookkeeping")
    parse_share: float = Field(description="parse_s / bench wall time")
    chunks: int


class Fingerprint(_Model):
    """What makes two runs comparable: image, model and serve parameters."""

    image_id: str | None = None
    image: str | None = None
    model: str
    serve: dict[str, object] = Field(default_factory=dict)
    hash: str = Field(description="stable hash of the fields above")
    vllm_version: str | None = Field(
        None, description="the server's GET /version (the image decides it)"
    )


class BenchSettings(_Model):
    prompt: str
    max_tokens: int
    runs: int
    concurrency: list[int] = Field(default_factory=list)
    requests_per_level: int | None = Field(
        None, description="None: as many as the concurrency (one wave)"
    )
    ignore_eos: bool = True
    depth: list[int] = Field(default_factory=list, description="prompt lengths measured, tokens")


class Comparison(_Model):
    metric: str
    unit: str
    current: float
    previous: float
    change_pct: float
    previous_at: datetime

    def describe(self) -> str:
        if self.unit == "s":
            return f"{self.current * 1000:.0f} ms, previous {self.previous * 1000:.0f}, {self.change_pct:+.1f}%"
        return (
            f"{self.current:.1f} {self.unit}, previous {self.previous:.1f}, {self.change_pct:+.1f}%"
        )


class BenchReport(_Model):
    at: datetime
    base_url: str
    model: str
    fingerprint: Fingerprint
    setup_key: str = Field(
        description="fingerprint + prompt + max_tokens: what comparisons match on"
    )
    settings: BenchSettings
    single: BenchRun | None = None
    sweep: list[ConcurrencyLevel] = Field(default_factory=list)
    depth: list[DepthLevel] = Field(default_factory=list)
    sample: SampleAnswer | None = None
    metrics_check: MetricsCheck
    client: ClientOverhead
    comparisons: list[Comparison] = Field(default_factory=list)
    warnings: list[str] = Field(default_factory=list)
    duration_s: float = 0.0
    kind: Literal["bench_report"] = "bench_report"
