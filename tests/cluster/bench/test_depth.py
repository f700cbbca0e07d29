"""Bench at depth against a locally started emulated vLLM server whose truth is known: at each
prompt length, TTFT, prefill tok/s and decode tok/s between the profile's schedule (the emulator
is never early) and the test's own clock around the bench, which holds at any machine speed.
How close they come to the profile (2 %) is benchmarks/bench_accuracy.py's to measure."""

from __future__ import annotations

import time

import pytest

from benchmarks.emulator_server import EmulatorServer
from bot.render_text import render
from cluster.bench.depth import chat_tokens, depth_prompt, fit, parse_depths
from cluster.bench.history import make_fingerprint
from cluster.bench.runner import BenchOptions, run_bench
from cluster.events import BenchResult, parse_event
from cluster.serving.api import api_client
from handlers.bench_chart import bench_chart_png
from handlers.render import bench_message
from lab.emulator.profiles import truth


def test_depths_are_parsed_in_tokens_with_k_as_1024_and_bad_ones_say_what_is_expected():
    assert parse_depths("1k,4k,16K,2000") == [1024, 4096, 16384, 2000]
    for bad in ("", "1m", "4 k", "-1", "1.5k"):
        with pytest.raises(ValueError, match=r"e\.g\. 1k,4k,16k,32k"):
            parse_depths(bad)
    with pytest.raises(ValueError, match="depth 1024 appears twice"):
        BenchOptions(depth=(1024, 1024)).validate()
    with pytest.raises(ValueError, match="each depth must be between 1 and"):
        BenchOptions(depth=(0,)).validate()
    with pytest.raises(ValueError, match="at most 8 depths in one run, not 9"):
        BenchOptions(depth=tuple(range(1, 10))).validate()


PROFILE = "lab"  # 100 tok/s and TTFT(p) = 0.2 s + p / 8192: slow enough to time on a busy machine


@pytest.fixture(scope="module")
def server():
    with EmulatorServer(PROFILE) as emulator:
        yield emulator


async def test_a_prompt_is_fitted_to_the_depth_in_the_servers_own_tokens(server):
    async with api_client(server.base_url, read_timeout=30) as client:
        fitted = await fit(client, server.served_name, 4096, output=16)
        assert 4090 <= fitted.tokens <= 4096
        # another request's fresh prefix has the same length: the depth holds for every run
        again, _ = await chat_tokens(
            client, server.served_name, depth_prompt("12345678", fitted.words)
        )
        assert again == fitted.tokens


async def test_depth_figures_keep_to_the_emulators_schedule(server):
    # the single stream is measured elsewhere (test_bench_emulator.py); here only the depths
    options = BenchOptions(max_tokens=64, runs=2, depth=(8192, 16384, 40000), single=False)
    started = time.monotonic()
    events = [
        e
        async for e in run_bench(
            server.base_url,
            server.served_name,
            options,
            make_fingerprint(server.served_name, {"profile": PROFILE}),
        )
    ]
    whole = time.monotonic() - started
    result = events[-1]
    assert isinstance(result, BenchResult), events
    report = result.report
    measured, too_deep = report.depth[:2], report.depth[2]
    assert [d.depth for d in measured] == [8192, 16384]
    for level in measured:
        assert level.ok == level.requests == 2, level.errors
        assert level.depth - 8 <= level.prompt_tokens <= level.depth
        t = truth(PROFILE, 1, level.prompt_tokens)
        assert t["ttft_s"] <= level.ttft_s <= whole, (level.depth, level.ttft_s, t)
        assert level.prompt_tokens / whole <= level.prefill_tok_s <= t["prefill_tok_s"], level
        assert level.prefill_tok_s == pytest.approx(level.prompt_tokens / level.ttft_s, rel=0.01)
        assert level.decode_tok_s >= 63 / whole, level
    # deeper means a longer TTFT: the deeper one is at least its own (longer) schedule
    assert measured[1].ttft_s >= truth(PROFILE, 1, measured[1].prompt_tokens)["ttft_s"]
    # a depth beyond the server's max_model_len is told, not a crash nor a request sent
    assert too_deep.requests == 0 and "max_model_len 32768" in too_deep.errors[0]
    assert any("depth 40000" in w for w in report.warnings)
    # every depth request is in the token cross-check
    assert report.metrics_check.matches, report.metrics_check.detail
    # the JSON, the table, the chat message and the chart carry it
    assert parse_event(result.to_json()) == result
    assert report.settings.depth == [8192, 16384, 40000]
    text = render(result)
    assert "prefill tok/s" in text and f"{measured[1].prompt_tokens:>10}" in text
    message = bench_message(report, bench_chart_png(report))
    assert any("prefill tok/s" in line for line in message.code)
    assert message.attachment is not None and message.attachment.content[:4] == b"\x89PNG"
