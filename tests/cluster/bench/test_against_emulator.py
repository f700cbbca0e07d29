"""The bench against a locally started emulated vLLM server (a subprocess, always killed).

What holds at any machine speed: every count exact, and each timed figure between the profile's
schedule (the emulator never sends a token early, so no figure can beat it) and the test's own
clock around the bench (no figure can be longer than the whole run). How close the figures come
to the profile is a speed: benchmarks/bench_accuracy.py measures it (within 2-3 %)."""

from __future__ import annotations

import asyncio
import time

import httpx
import pytest

from benchmarks.emulator_server import EmulatorServer
from bot.render_text import render
from cluster.bench.history import JsonLinesHistory, make_fingerprint
from cluster.bench.models import BenchReport
from cluster.bench.runner import BenchOptions, run_bench
from cluster.bench.stream import chat_body, sample_completion
from cluster.events import BenchResult, Failed, parse_event
from cluster.serving.api import api_client
from lab.emulator.profiles import truth

FAST = truth("fast-test", 1)


@pytest.fixture
def server():
    with EmulatorServer("fast-test", reasoning_parser="qwen3") as emulator:
        yield emulator


async def bench(server, options, history=None):
    """The bench's events; `server.last_bench_s`: the test's own clock around it."""
    started = time.monotonic()
    events = [
        e
        async for e in run_bench(
            server.base_url,
            server.served_name,
            options,
            make_fingerprint(server.served_name, {"profile": "fast-test"}),
            history=history,
        )
    ]
    server.last_bench_s = time.monotonic() - started
    return events


def within_schedule(figure, profile_s, whole_s):
    """A duration no shorter than the profile's schedule and no longer than the whole run."""
    return figure is not None and profile_s <= figure <= whole_s


async def test_single_stream_and_sweep_give_sane_figures_and_an_exact_cross_check(server, tmp_path):
    events = await bench(server, BenchOptions(max_tokens=64, runs=2, concurrency=(1, 2)))
    assert [e.kind for e in events][-1] == "bench", events
    result = events[-1]
    report = result.report
    single = report.single
    assert single is not None and len(single.runs) == 2 and all(r.ok for r in single.runs)
    assert single.completion_tokens == 64 and not single.tokens_approximate
    assert single.reasoning_tokens + single.answer_tokens == 64 and single.reasoning_tokens > 0
    whole = server.last_bench_s
    assert within_schedule(single.ttft_s, FAST["ttft_s"], whole)
    schedule_64 = FAST["ttft_s"] + 63 / FAST["per_stream_tok_s"]
    assert within_schedule(64 / single.e2e_tok_s, schedule_64, whole)
    assert single.decode_tok_s >= 63 / whole
    assert single.e2e_tok_s < single.decode_tok_s  # e2e includes TTFT
    one, two = report.sweep
    assert (one.concurrency, two.concurrency, one.ok, two.ok) == (1, 2, 1, 2)
    assert two.total_tokens == 128
    # a wave of two lasts at least one stream's schedule at the fastest (single-stream) rate
    assert within_schedule(128 / two.output_tok_s, schedule_64, whole)
    assert two.aggregate_decode_tok_s >= 2 * 63 / whole
    assert two.output_tok_s < two.aggregate_decode_tok_s
    assert two.ttft_p50_s <= two.ttft_p90_s <= two.ttft_p99_s
    check = report.metrics_check
    assert check.available and check.matches, check.detail
    assert (
        check.client_tokens
        == check.server_tokens
        == single.warmup.completion_tokens + 2 * 64 + 64 + 128
    )
    assert report.client.max_connections >= 2 and 0 < report.client.parse_share < 1
    assert report.sample is not None and report.sample.reasoning
    # JSON-lines round trip through the event union, and the text rendering.
    assert parse_event(result.to_json()) == result
    text = render(result)
    assert "decode" in text and "TTFT p50/p90/p99" in text and "no earlier run" in text


async def test_second_run_is_compared_with_the_first(server, tmp_path):
    history = JsonLinesHistory(tmp_path / "bench.jsonl", BenchReport)
    options = BenchOptions(max_tokens=32, runs=1)
    first = (await bench(server, options, history))[-1].report
    second = (await bench(server, options, history))[-1].report
    assert first.comparisons == [] and len(history.reports()) == 2
    names = [c.metric for c in second.comparisons]
    assert names == ["decode tok/s (1 stream)", "TTFT (1 stream)"]
    decode, ttft = second.comparisons
    assert (decode.current, decode.previous) == (
        second.single.decode_tok_s,
        first.single.decode_tok_s,
    )
    assert (ttft.current, ttft.previous) == (second.single.ttft_s, first.single.ttft_s)
    assert decode.change_pct == pytest.approx((decode.current / decode.previous - 1) * 100)


async def test_busy_server_is_refused(server):
    started = asyncio.Event()

    async def long_request():
        async with api_client(server.base_url, read_timeout=60) as client:
            body = chat_body(server.served_name, "keep busy", 20000, ignore_eos=True)
            async with client.stream("POST", "/v1/chat/completions", json=body) as response:
                async for _ in response.aiter_lines():
                    started.set()

    task = asyncio.create_task(long_request())
    try:
        await asyncio.wait_for(started.wait(), 10)
        events = await bench(server, BenchOptions(max_tokens=16, runs=1))
        assert len(events) == 1 and isinstance(events[0], Failed)
        assert (
            "refused to measure" in events[0].summary
            and "num_requests_running=1" in events[0].summary
        )
        events = await bench(server, BenchOptions(max_tokens=16, runs=1, allow_busy=True))
        assert isinstance(events[-1], BenchResult)
        assert any("busy" in w for w in events[-1].report.warnings)
    finally:
        task.cancel()
        with pytest.raises((asyncio.CancelledError, httpx.HTTPError)):
            await task


async def test_up_sample_uses_the_bench_parser(server):
    started = time.monotonic()
    async with api_client(server.base_url) as client:
        sample = await sample_completion(client, server.served_name, max_tokens=200)
    whole = time.monotonic() - started
    assert sample.finish_reason == "stop" and sample.text and sample.reasoning
    n = sample.completion_tokens
    assert within_schedule(sample.ttft_s, FAST["ttft_s"], whole)
    assert within_schedule(sample.e2e_s, FAST["ttft_s"] + (n - 1) / FAST["per_stream_tok_s"], whole)
    assert sample.decode_tps is not None and sample.decode_tps >= (n - 1) / whole
