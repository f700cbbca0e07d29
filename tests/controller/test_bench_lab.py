"""`bench` on the lab cluster: figures within the issue's bounds of the emulator profile's truth."""

from __future__ import annotations

import pytest

from cluster.events import BenchResult, Ready
from lab.emulator import truth
from tests.controller.helpers import collect, controller_for

pytestmark = pytest.mark.lab


def within(measured: float, expected: float, tolerance: float) -> bool:
    return abs(measured - expected) <= tolerance * expected


async def test_bench_on_the_lab_matches_the_profile(clean, tmp_path):
    controller = controller_for(clean)
    assert isinstance((await collect(controller.up()))[-1], Ready)
    profile = controller.config.container.env["SPARK_EMU_PROFILE"]
    history = tmp_path / "history.jsonl"
    events = await collect(controller.bench(concurrency=[1, 2, 4], max_tokens=64, history=history))
    report = events[-1]
    assert isinstance(report, BenchResult), report
    report = report.report
    one = truth(profile, 1)
    assert within(report.single.decode_tok_s, one["per_stream_tok_s"], 0.02)
    assert within(report.single.ttft_s, one["ttft_s"], 0.05)  # the SSH forward's latency counts
    for level in report.sweep:
        assert within(level.aggregate_decode_tok_s, truth(profile, level.concurrency)["aggregate_tok_s"], 0.03)
    assert report.metrics_check.client_tokens == report.metrics_check.server_tokens

    again = await collect(controller.bench(max_tokens=64, history=history))
    assert again[-1].report.comparisons, "the second run of the same setup is compared with the first"
