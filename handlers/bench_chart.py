"""A benchmark as a picture, PNG bytes: throughput and TTFT against concurrency (the sweep),
and TTFT, prefill and decode tok/s against prompt length (the depth), side by side.

Drawn with matplotlib's object-oriented API (a `Figure` of its own, no pyplot and its global
state), so callers may render in a worker thread (`asyncio.to_thread`) off the event loop.
"""

from __future__ import annotations

import io

from matplotlib.axes import Axes
from matplotlib.figure import Figure

from cluster.bench.models import BenchReport, ConcurrencyLevel, DepthLevel


def sweep_chart_png(report: BenchReport) -> bytes:
    """Aggregate and per-stream tok/s (left axis) and TTFT p50/p90 (right axis) per level."""
    levels = [level for level in report.sweep if level.ok]
    if not levels:
        raise ValueError("the sweep has no successful level to draw")
    figure = Figure(figsize=(7, 4), dpi=110)
    _sweep(figure.subplots(), levels, report.model)
    return _png(figure)


def bench_chart_png(report: BenchReport) -> bytes:
    """The sweep (two levels or more) and the depth (any measured), each in its own panel."""
    levels = [level for level in report.sweep if level.ok]
    depths = [d for d in report.depth if d.ok]
    panels = (len(levels) >= 2) + bool(depths)
    if not panels:
        raise ValueError("nothing to draw: fewer than two sweep levels and no depth measured")
    figure = Figure(figsize=(7 * panels, 4), dpi=110)
    axes = list(figure.subplots(1, panels, squeeze=False)[0])
    if len(levels) >= 2:
        _sweep(axes.pop(0), levels, report.model)
    if depths:
        _depth(axes.pop(0), depths, report.model)
    return _png(figure)


def _png(figure: Figure) -> bytes:
    figure.tight_layout()
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png")
    return buffer.getvalue()


def _sweep(throughput: Axes, levels: list[ConcurrencyLevel], model: str) -> None:
    concurrency = [level.concurrency for level in levels]
    throughput.plot(
        concurrency,
        [level.output_tok_s for level in levels],
        "o-",
        label="output tok/s (all streams, incl. TTFT)",
    )
    throughput.plot(
        concurrency,
        [level.per_stream_decode_tok_s or 0 for level in levels],
        "s--",
        label="decode tok/s per stream",
    )
    throughput.set_xscale("log", base=2)
    throughput.set_xticks(concurrency, [str(c) for c in concurrency])
    throughput.set_xlabel("concurrent requests")
    throughput.set_ylabel("tokens per second")
    throughput.grid(True, alpha=0.3)
    ttft = throughput.twinx()
    ttft.plot(
        concurrency,
        [(level.ttft_p50_s or 0) * 1000 for level in levels],
        "^:",
        color="tab:red",
        label="TTFT p50 (ms)",
    )
    ttft.plot(
        concurrency,
        [(level.ttft_p90_s or 0) * 1000 for level in levels],
        "v:",
        color="tab:purple",
        label="TTFT p90 (ms)",
    )
    ttft.set_ylabel("time to first token (ms)")
    lines = throughput.get_legend_handles_labels()
    more = ttft.get_legend_handles_labels()
    throughput.legend(lines[0] + more[0], lines[1] + more[1], loc="upper left", fontsize=8)
    throughput.set_title(f"{model}: throughput and TTFT by concurrency", fontsize=10)


def _depth(rates: Axes, depths: list[DepthLevel], model: str) -> None:
    tokens = [d.prompt_tokens or d.depth for d in depths]
    rates.plot(tokens, [d.prefill_tok_s or 0 for d in depths], "o-", label="prefill tok/s")
    rates.plot(tokens, [d.decode_tok_s or 0 for d in depths], "s--", label="decode tok/s")
    rates.set_xscale("log", base=2)
    rates.set_xticks(tokens, [_k(t) for t in tokens])
    rates.set_yscale("log")
    rates.set_xlabel("prompt tokens")
    rates.set_ylabel("tokens per second")
    rates.grid(True, alpha=0.3)
    ttft = rates.twinx()
    ttft.plot(tokens, [(d.ttft_s or 0) for d in depths], "^:", color="tab:red", label="TTFT (s)")
    ttft.set_ylabel("time to first token (s)")
    lines = rates.get_legend_handles_labels()
    more = ttft.get_legend_handles_labels()
    rates.legend(lines[0] + more[0], lines[1] + more[1], loc="upper left", fontsize=8)
    rates.set_title(f"{model}: TTFT, prefill and decode by prompt length", fontsize=10)


def _k(tokens: int) -> str:
    return f"{tokens / 1024:g}k" if tokens >= 1024 else str(tokens)
