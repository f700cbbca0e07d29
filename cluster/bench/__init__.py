"""The benchmark: streamed completions measured the way vLLM's `bench serve` measures them.

Modules: `models` (results, plain data), `stream` (the one SSE parser and the timed request),
`server_metrics` (/metrics via prometheus-client), `history` (fingerprint and JSON-lines store),
`runner` (single stream, concurrency sweep, as an async iterator of events).

This package imports only `models` eagerly so that `cluster.events` can use the models.
"""

from cluster.bench.models import (
    BenchReport,
    BenchRun,
    BenchSettings,
    ClientOverhead,
    Comparison,
    ConcurrencyLevel,
    Fingerprint,
    MetricsCheck,
    RequestMetrics,
    SampleAnswer,
)

__all__ = [
    "BenchReport",
    "BenchRun",
    "BenchSettings",
    "ClientOverhead",
    "Comparison",
    "ConcurrencyLevel",
    "Fingerprint",
    "MetricsCheck",
    "RequestMetrics",
    "SampleAnswer",
]
