"""The bench operation: single stream (warm-up + median of N), then an optional concurrency
sweep; an async iterator of controller events ending in `BenchResult` (or `Failed`)."""

from __future__ import annotations

import asyncio
import math
import statistics
import time
from collections.abc import AsyncGenerator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

import httpx

from cluster.bench.depth import MAX_DEPTH, measure_depth
from cluster.bench.history import BenchHistory, compare, setup_key
from cluster.bench.models import (
    BenchReport,
    BenchRun,
    BenchSettings,
    ClientOverhead,
    ConcurrencyLevel,
    Fingerprint,
    MetricsCheck,
    RequestMetrics,
)
from cluster.bench.server_metrics import ServerCounters, read_counters
from cluster.bench.stream import Measured, measure_request, sample_answer
from cluster.diagnosis.failures import ENGINE_BUSY
from cluster.events import BenchResult, Event, Progress
from cluster.progress.checkpoints import BENCH
from cluster.progress.reporter import Reporter
from cluster.serving.api import api_client, vllm_version

DEFAULT_PROMPT = "Explain how tensor parallelism splits a transformer layer across two GPUs."
MAX_CONCURRENCY = 1024
MAX_TOKENS = 32768
MAX_RUNS = 100
MAX_REQUESTS = 100_000
MAX_DEPTHS = 8  # prompt lengths in one run: each is `runs` requests of up to a long prefill


@dataclass(frozen=True)
class BenchLimits:
    """Upper bounds for a run's options. The defaults are what the tool accepts (the CLI); the
    bot passes narrower ones from its config. Lower bounds are fixed: max_tokens >= 2 (one
    token after the first is needed for a decode rate), runs >= 1, each level >= 1."""

    max_tokens: int = MAX_TOKENS
    max_concurrency: int = MAX_CONCURRENCY
    max_runs: int = MAX_RUNS
    max_requests: int = MAX_REQUESTS
    max_depth: int = MAX_DEPTH


@dataclass(frozen=True)
class BenchOptions:
    prompt: str = DEFAULT_PROMPT
    max_tokens: int = 128
    runs: int = 3
    concurrency: Sequence[int] = ()
    requests_per_level: int | None = None
    depth: Sequence[int] = ()
    single: bool = True
    allow_busy: bool = False
    read_timeout: float = 600.0
    metrics_settle_s: float = 5.0

    def validate(self, limits: BenchLimits = BenchLimits()) -> None:
        """The one place the bench options' rules live (CLI, chat and controller call it);
        ValueError says what is wrong and what is allowed."""
        if not self.prompt.strip():
            raise ValueError("the prompt is empty")
        if not 2 <= self.max_tokens <= limits.max_tokens:
            raise ValueError(
                f"max_tokens must be between 2 and {limits.max_tokens}, not {self.max_tokens}"
            )
        if not 1 <= self.runs <= limits.max_runs:
            raise ValueError(f"runs must be between 1 and {limits.max_runs}, not {self.runs}")
        for c in self.concurrency:
            if not 1 <= c <= limits.max_concurrency:
                raise ValueError(
                    f"each concurrency level must be between 1 and {limits.max_concurrency}, not {c}"
                )
        repeated = sorted({c for c in self.concurrency if list(self.concurrency).count(c) > 1})
        if repeated:
            raise ValueError(f"concurrency level {repeated[0]} appears twice")
        if (
            self.requests_per_level is not None
            and not 1 <= self.requests_per_level <= limits.max_requests
        ):
            raise ValueError(
                f"requests per level must be between 1 and {limits.max_requests}, "
                f"not {self.requests_per_level}"
            )
        if len(self.depth) > MAX_DEPTHS:
            raise ValueError(f"at most {MAX_DEPTHS} depths in one run, not {len(self.depth)}")
        for d in self.depth:
            if not 1 <= d <= limits.max_depth:
                raise ValueError(
                    f"each depth must be between 1 and {limits.max_depth} prompt tokens, not {d}"
                )
        repeated = sorted({d for d in self.depth if list(self.depth).count(d) > 1})
        if repeated:
            raise ValueError(f"depth {repeated[0]} appears twice")
        if not self.single and not self.concurrency and not self.depth:
            raise ValueError(
                "nothing to measure: no single stream, no concurrency levels and no depths"
            )


def percentile(values: Sequence[float], q: float) -> float | None:
    """Linear interpolation between closest ranks (numpy's default)."""
    if not values:
        return None
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q / 100.0
    lo, hi = math.floor(pos), math.ceil(pos)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def _median(values: Sequence[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None


class LoopLag:
    """A 10 ms ticker: how late the event loop wakes it is how late it would read a chunk."""

    def __init__(self, interval: float = 0.01):
        self.interval = interval
        self.lags: list[float] = []
        self._task: asyncio.Task[None] | None = None

    async def _run(self) -> None:
        while True:
            due = time.perf_counter() + self.interval
            await asyncio.sleep(self.interval)
            self.lags.append(max(0.0, time.perf_counter() - due))

    def __enter__(self) -> LoopLag:
        self._task = asyncio.get_running_loop().create_task(self._run())
        return self

    def __exit__(self, *exc: object) -> None:
        if self._task:
            self._task.cancel()


@dataclass
class _Tally:
    parse_s: float = 0.0
    chunks: int = 0
    tokens: int = 0
    all_counted: bool = True
    failed: int = 0
    measured: list[Measured] = field(default_factory=list)

    def add(self, m: Measured) -> Measured:
        self.parse_s += m.parse_s
        self.chunks += m.metrics.token_chunks
        if m.metrics.completion_tokens is not None:
            self.tokens += m.metrics.completion_tokens
        if m.metrics.tokens_approximate or m.metrics.completion_tokens is None:
            self.all_counted = False
        if not m.metrics.ok:
            self.failed += 1
        return m


def summarize_single(warmup: RequestMetrics, runs: list[RequestMetrics]) -> BenchRun:
    good = [r for r in runs if r.ok]
    return BenchRun(
        warmup=warmup,
        runs=runs,
        ttft_s=_median([r.ttft_s for r in good]),
        decode_tok_s=_median([r.decode_tok_s for r in good]),
        e2e_tok_s=_median([r.e2e_tok_s for r in good]),
        tpot_s=_median([r.tpot_s for r in good]),
        completion_tokens=_int_median([r.completion_tokens for r in good]),
        reasoning_tokens=_int_median([r.reasoning_tokens for r in good]),
        answer_tokens=_int_median([r.answer_tokens for r in good]),
        tokens_approximate=any(r.tokens_approximate for r in good),
    )


def _int_median(values: Sequence[int | None]) -> int | None:
    m = _median([float(v) for v in values if v is not None])
    return None if m is None else round(m)


def summarize_level(
    concurrency: int, measured: list[Measured], first_send: float
) -> ConcurrencyLevel:
    metrics = [m.metrics for m in measured]
    good = [m for m in metrics if m.ok]
    ends = [m.end for m in measured if m.end is not None]
    wall = (max(ends) - first_send) if ends else 0.0
    tokens = sum(m.completion_tokens or 0 for m in good)
    decode = [m.decode_tok_s for m in good if m.decode_tok_s is not None]
    ttfts = [m.ttft_s for m in good if m.ttft_s is not None]
    errors = sorted({m.error for m in metrics if m.error})
    return ConcurrencyLevel(
        concurrency=concurrency,
        requests=len(metrics),
        ok=len(good),
        failed=len(metrics) - len(good),
        errors=errors[:5],
        wall_s=wall,
        total_tokens=tokens,
        output_tok_s=tokens / wall if wall > 0 else 0.0,
        aggregate_decode_tok_s=min(concurrency, len(good)) * statistics.fmean(decode)
        if decode
        else None,
        per_stream_decode_tok_s=_median(decode),
        per_stream_e2e_tok_s=_median([m.e2e_tok_s for m in good]),
        ttft_p50_s=percentile(ttfts, 50),
        ttft_p90_s=percentile(ttfts, 90),
        ttft_p99_s=percentile(ttfts, 99),
        tpot_p50_s=_median([m.tpot_s for m in good]),
        tokens_approximate=any(m.tokens_approximate for m in good),
        requests_detail=metrics,
    )


async def _warm_connections(client: httpx.AsyncClient, n: int) -> None:
    """Open `n` pooled connections before timing, so no TTFT includes a TCP (or SSH channel) setup."""
    await asyncio.gather(*(client.get("/health") for _ in range(n)), return_exceptions=True)


async def run_level(
    client: httpx.AsyncClient, model: str, options: BenchOptions, concurrency: int, tally: _Tally
) -> ConcurrencyLevel:
    requests = options.requests_per_level or concurrency
    gate = asyncio.Semaphore(concurrency)
    await _warm_connections(client, concurrency)
    first_send = time.perf_counter()

    async def one() -> Measured:
        async with gate:
            return tally.add(
                await measure_request(
                    client,
                    model,
                    options.prompt,
                    options.max_tokens,
                    ignore_eos=True,
                    origin=first_send,
                )
            )

    measured = await asyncio.gather(*(one() for _ in range(requests)))
    return summarize_level(concurrency, list(measured), first_send)


async def _counters(client: httpx.AsyncClient, model: str) -> tuple[ServerCounters | None, str]:
    try:
        return await read_counters(client, model), ""
    except (httpx.HTTPError, ValueError) as exc:
        return None, f"GET /metrics unusable: {exc}"


async def _metrics_check(
    client: httpx.AsyncClient,
    model: str,
    before: ServerCounters | None,
    tally: _Tally,
    settle_s: float,
) -> MetricsCheck:
    if before is None:
        return MetricsCheck(
            available=False, client_tokens=tally.tokens, detail="no /metrics before the run"
        )
    deadline = time.monotonic() + settle_s
    while True:
        after, problem = await _counters(client, model)
        if after is None:
            return MetricsCheck(available=False, client_tokens=tally.tokens, detail=problem)
        delta = after.generation_tokens - before.generation_tokens
        if delta == tally.tokens or time.monotonic() >= deadline:
            break
        await asyncio.sleep(0.1)  # the server's counters may trail the last [DONE] by a step
    matches = delta == tally.tokens and tally.all_counted
    detail = (
        f"client counted {tally.tokens} tokens, vllm:generation_tokens_total rose by {delta:g}"
        + ("" if tally.all_counted else " (some counts approximate or missing)")
    )
    return MetricsCheck(
        available=True,
        client_tokens=tally.tokens,
        server_tokens=delta,
        matches=matches,
        detail=detail,
    )


async def run_bench(
    base_url: str,
    model: str,
    options: BenchOptions,
    fingerprint: Fingerprint,
    *,
    history: BenchHistory | None = None,
    reporter: Reporter | None = None,
    api_key: str | None = None,
) -> AsyncGenerator[Event, None]:
    options.validate()
    reporter = reporter or Reporter()
    levels = list(options.concurrency)
    connections = max([1, *levels]) + 2
    warnings: list[str] = []
    tally = _Tally()
    started = time.perf_counter()
    async with api_client(
        base_url, read_timeout=options.read_timeout, connections=connections, api_key=api_key
    ) as client:
        version = await vllm_version(client)
        if version and not fingerprint.vllm_version:
            fingerprint = fingerprint.model_copy(update={"vllm_version": version})
        before, problem = await _counters(client, model)
        if before is None:
            warnings.append(f"{problem}: busy check and token cross-check skipped")
        elif before.busy:
            busy = (
                f"the server is busy: vllm:num_requests_running={before.running:g}, "
                f"waiting={before.waiting:g}"
            )
            if not options.allow_busy:
                yield reporter.known(BENCH, ENGINE_BUSY, {"busy": busy}, evidence=busy)
                return
            warnings.append(
                f"{busy}: figures are lower than on an idle server; cross-check unreliable"
            )
        single = sample = None
        with LoopLag() as lag:
            if options.single:
                await _warm_connections(client, 1)
                yield Progress(
                    elapsed_s=reporter.elapsed(),
                    phase="bench",
                    message="single stream: warm-up (natural end, its answer is the sample)",
                )
                warm = tally.add(
                    await measure_request(client, model, options.prompt, options.max_tokens)
                )
                sample = sample_answer(warm)
                runs = []
                for i in range(options.runs):
                    m = tally.add(
                        await measure_request(
                            client, model, options.prompt, options.max_tokens, ignore_eos=True
                        )
                    )
                    runs.append(m.metrics)
                    rate = (
                        f"{m.metrics.decode_tok_s:.1f} tok/s"
                        if m.metrics.decode_tok_s
                        else m.metrics.error
                    )
                    yield Progress(
                        elapsed_s=reporter.elapsed(),
                        phase="bench",
                        message=f"single stream run {i + 1}/{options.runs}: {rate}",
                    )
                single = summarize_single(warm.metrics, runs)
            sweep = []
            for c in levels:
                yield Progress(
                    elapsed_s=reporter.elapsed(),
                    phase="bench",
                    message=f"concurrency {c}: {options.requests_per_level or c} requests",
                )
                level = await run_level(client, model, options, c, tally)
                sweep.append(level)
                yield Progress(
                    elapsed_s=reporter.elapsed(),
                    phase="bench",
                    message=f"concurrency {c}: {level.output_tok_s:.1f} tok/s output, "
                    f"{level.ok}/{level.requests} ok",
                )
            depths = []
            for d in options.depth:
                yield Progress(
                    elapsed_s=reporter.elapsed(),
                    phase="bench",
                    message=f"depth {d} tokens: {options.runs} requests",
                )
                depth = await measure_depth(
                    client,
                    model,
                    d,
                    runs=options.runs,
                    max_tokens=options.max_tokens,
                    count=tally.add,
                )
                depths.append(depth)
                ttft = "-" if depth.ttft_s is None else f"{depth.ttft_s * 1000:.0f} ms"
                yield Progress(
                    elapsed_s=reporter.elapsed(),
                    phase="bench",
                    message=f"depth {d} tokens: TTFT {ttft}, {depth.ok}/{depth.requests} ok"
                    + (f" ({depth.errors[0]})" if depth.errors else ""),
                )
        check = await _metrics_check(client, model, before, tally, options.metrics_settle_s)
    wall = time.perf_counter() - started
    if tally.failed:
        warnings.append(f"{tally.failed} request(s) failed; figures exclude them")
    warnings += [f"depth {d.depth}: {d.errors[0]}" for d in depths if d.errors and not d.requests]
    if check.matches is False:
        warnings.append(f"token cross-check mismatch: {check.detail}")
    lags_ms = [x * 1000 for x in lag.lags] or [0.0]
    settings = BenchSettings(
        prompt=options.prompt,
        max_tokens=options.max_tokens,
        runs=options.runs,
        concurrency=levels,
        requests_per_level=options.requests_per_level,
        depth=list(options.depth),
    )
    report = BenchReport(
        at=datetime.now(UTC),
        base_url=base_url,
        model=model,
        fingerprint=fingerprint,
        setup_key=setup_key(fingerprint, options.prompt, options.max_tokens),
        settings=settings,
        single=single,
        sweep=sweep,
        depth=depths,
        sample=sample,
        metrics_check=check,
        client=ClientOverhead(
            max_connections=connections,
            loop_lag_max_ms=max(lags_ms),
            loop_lag_p99_ms=percentile(lags_ms, 99) or 0.0,
            parse_s=tally.parse_s,
            parse_share=tally.parse_s / wall if wall > 0 else 0.0,
            chunks=tally.chunks,
        ),
        warnings=warnings,
        duration_s=wall,
    )
    if history is not None:
        previous = await history.previous(report.setup_key)
        report = report.model_copy(update={"comparisons": compare(report, previous)})
        await history.record(report)
    yield BenchResult(elapsed_s=reporter.elapsed(), report=report)
