"""The bench against a locally started emulated vLLM server (a subprocess, always killed)."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from benchmarks.emulator_server import EmulatorServer
from bot.render_text import render
from cluster.api import api_client
from cluster.bench.history import JsonLinesHistory, make_fingerprint
from cluster.bench.runner import BenchOptions, run_bench
from cluster.bench.stream import chat_body, sample_completion
from cluster.events import BenchResult, Failed, parse_event
from lab.emulator.profiles import truth

FAST = truth("fast-test", 1)


@pytest.fixture
def server():
    with EmulatorServer("fast-test", reasoning_parser="qwen3") as emulator:
        yield emulator


async def bench(server, options, history=None):
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
    return events


def close(measured, expected, tolerance):
    return measured is not None and abs(measured - expected) <= tolerance * expected


async def test_single_stream_and_sweep_give_sane_figures_and_an_exact_cross_check(server, tmp_path):
    events = await bench(server, BenchOptions(max_tokens=64, runs=2, concurrency=(1, 2)))
    assert [e.kind for e in events][-1] == "bench", events
    result = events[-1]
    report = result.report
    single = report.single
    assert single is not None and len(single.runs) == 2 and all(r.ok for r in single.runs)
    assert single.completion_tokens == 64 and not single.tokens_approximate
    assert single.reasoning_tokens + single.answer_tokens == 64 and single.reasoning_tokens > 0
    assert close(single.decode_tok_s, FAST["per_stream_tok_s"], 0.10)
    assert 0.8 * FAST["ttft_s"] <= single.ttft_s <= FAST["ttft_s"] + 0.05
    assert single.e2e_tok_s < single.decode_tok_s  # e2e includes TTFT
    one, two = report.sweep
    assert (one.concurrency, two.concurrency, one.ok, two.ok) == (1, 2, 1, 2)
    assert two.total_tokens == 128
    assert close(two.aggregate_decode_tok_s, truth("fast-test", 2)["aggregate_tok_s"], 0.10)
    assert two.output_tok_s < two.aggregate_decode_tok_s
    assert two.ttft_p50_s <= two.ttft_p90_s <= two.ttft_p99_s
    check = report.metrics_check
    assert check.available and check.matches, check.detail
    assert (
        check.client_tokens
        == check.server_tokens
        == single.warmup.completion_tokens + 2 * 64 + 64 + 128
    )
    assert report.client.max_connections >= 2 and report.client.parse_share < 0.2
    assert report.sample is not None and report.sample.reasoning
    # JSON-lines round trip through the event union, and the text rendering.
    assert parse_event(result.to_json()) == result
    text = render(result)
    assert "decode" in text and "TTFT p50/p90/p99" in text and "no earlier run" in text


async def test_second_run_is_compared_with_the_first(server, tmp_path):
    history = JsonLinesHistory(tmp_path / "bench.jsonl")
    options = BenchOptions(max_tokens=32, runs=1)
    first = (await bench(server, options, history))[-1].report
    second = (await bench(server, options, history))[-1].report
    assert first.comparisons == [] and len(history.reports()) == 2
    names = [c.metric for c in second.comparisons]
    assert names == ["decode tok/s (1 stream)", "TTFT (1 stream)"]
    assert (
        abs(second.comparisons[0].change_pct) < 30
    )  # same setup, same server: alike, even on a busy machine


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
    async with api_client(server.base_url) as client:
        sample = await sample_completion(client, server.served_name, max_tokens=200)
    assert sample.finish_reason == "stop" and sample.text and sample.reasoning
    assert sample.decode_tps is not None and close(
        sample.decode_tps, FAST["per_stream_tok_s"], 0.10
    )
