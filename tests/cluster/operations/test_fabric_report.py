"""fabric-test's report: its words on every surface, the comparison with the last run, and the
history it shares with bench (a JSON-lines file holds both kinds; each is read back as its own)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from bot.render_text import render_fabric_test
from cluster.bench.history import JsonLinesHistory
from cluster.bench.models import BenchReport
from cluster.operations.fabric_report import FabricLane, FabricPair, FabricTestReport
from cluster.operations.fabric_test import compare
from handlers.render import fabric_test_message

AT = datetime(2026, 12, 4, 22, 0, tzinfo=UTC)


def report(gbps: float | None, at: datetime = AT) -> FabricTestReport:
    lanes = [
        FabricLane(
            subnet="192.168.100.0/24",
            server_device="rocep1s0f1",
            client_device="rocep1s0f1",
            server_address="192.168.100.10",
            gbps=None if gbps is None else gbps / 2,
            error=None if gbps is not None else "spark-b: Couldn't connect to 192.168.100.10:18515",
        ),
        FabricLane(
            subnet="192.168.101.0/24",
            server_device="roceP2p1s0f1",
            client_device="roceP2p1s0f1",
            server_address="192.168.101.10",
            gbps=None if gbps is None else gbps / 2,
            error=None if gbps is not None else "spark-b: Couldn't connect to 192.168.101.10:18516",
        ),
    ]
    pair = FabricPair(
        server="spark-a",
        client="spark-b",
        tool="ib_write_bw",
        gbps=gbps,
        lanes=lanes,
        error=None if gbps is not None else "no lane measured",
    )
    return FabricTestReport(
        at=at, setup_key="k1", nominal_gbps=200, seconds=5, pairs=[pair], duration_s=11.0
    )


def test_the_figure_against_the_nominal_speed_on_the_terminal_and_in_the_chat():
    text = render_fabric_test(report(189.85))
    assert (
        "spark-a ↔ spark-b: 189.85 Gb/s with perftest's ib_write_bw (RDMA write, one per subnet, "
        "summed), 95 % of the link's nominal 200 Gb/s" in text
    )
    assert "192.168.101.0/24: roceP2p1s0f1 → roceP2p1s0f1 (192.168.101.10): 94.92 Gb/s" in text
    message = fabric_test_message(report(189.85))
    assert message.tone == "success" and "95 % of the link's nominal 200 Gb/s" in message.text
    assert len(message.code) == 2 and message.code_title == "each subnet's ib_write_bw"


def test_a_pair_not_measured_says_why_and_the_message_warns():
    message = fabric_test_message(report(None))
    assert message.tone == "warning"
    assert "✘ spark-a ↔ spark-b: not measured: no lane measured" in message.text
    assert "not measured: spark-b: Couldn't connect to 192.168.100.10:18515" in message.code[0]


def test_the_comparison_matches_the_pair_and_the_tool():
    earlier, now = report(150.0, AT - timedelta(days=1)), report(189.85)
    [change] = compare(now, earlier)
    assert change.metric == "spark-a ↔ spark-b (ib_write_bw)" and change.previous == 150.0
    assert round(change.change_pct, 1) == 26.6
    assert compare(now, None) == [] and compare(now, report(None)) == []


async def test_the_history_file_keeps_each_kind_apart(tmp_path):
    path = tmp_path / "history.jsonl"
    fabric = JsonLinesHistory(path, FabricTestReport)
    await fabric.record(report(120.0))
    with path.open("a") as handle:  # a line of another kind under the same key
        handle.write('{"kind": "bench_report", "setup_key": "k1"}\n')
    assert (await fabric.previous("k1")) == report(120.0)
    assert await JsonLinesHistory(path, BenchReport).previous("k1") is None
    assert await fabric.previous("other") is None
