"""A concurrency sweep as a picture: throughput and TTFT against concurrency, as PNG bytes.

Drawn with matplotlib's object-oriented API (a `Figure` of its own, no pyplot and its global
state), so callers may render in a worker thread (`asyncio.to_thread`) off the event loop.
"""

from __future__ import annotations

import io

from matplotlib.figure import Figure

from cluster.bench.models import BenchReport


def sweep_chart_png(report: BenchReport) -> bytes:
    """Aggregate and per-stream tok/s (left axis) and TTFT p50/p90 (right axis) per level."""
    levels = [level for level in report.sweep if level.ok]
    if not levels:
        raise ValueError("the sweep has no successful level to draw")
    concurrency = [level.concurrency for level in levels]
    figure = Figure(figsize=(7, 4), dpi=110)
    throughput = figure.subplots()
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
    throughput.set_title(f"{report.model}: throughput and TTFT by concurrency", fontsize=10)
    figure.tight_layout()
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png")
    return buffer.getvalue()
