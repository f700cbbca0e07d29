"""The sweep chart: a real PNG drawn from a real sweep against the emulator."""

from typing import ClassVar

import pytest

from benchmarks.emulator_server import EmulatorServer
from cluster.bench.history import make_fingerprint
from cluster.bench.runner import BenchOptions, run_bench
from handlers.bench_chart import sweep_chart_png

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


async def test_a_sweep_becomes_a_png_chart():
    with EmulatorServer("fast-test") as server:
        events = [
            e
            async for e in run_bench(
                server.base_url,
                server.served_name,
                BenchOptions(max_tokens=16, runs=1, concurrency=(1, 2, 4)),
                make_fingerprint(server.served_name, {"profile": "fast-test"}),
            )
        ]
    report = events[-1].report
    png = sweep_chart_png(report)
    assert png.startswith(PNG_SIGNATURE) and len(png) > 10_000
    width, height = int.from_bytes(png[16:20], "big"), int.from_bytes(png[20:24], "big")
    assert (width, height) == (770, 440)


def test_a_sweep_without_a_successful_level_is_refused():
    class Empty:
        sweep: ClassVar[list[object]] = []
        model = "m"

    with pytest.raises(ValueError, match="no successful level"):
        sweep_chart_png(Empty())
