"""The fabric tools' output read on real samples: ib_write_bw's client on a Spark pair (NVIDIA's
benchmarking guide, dgx-spark-playbooks@0db7c141 nvidia/connect-two-sparks/assets/
performance_benchmarking_guide.md, "Client-1 Output"), all_reduce_perf on two Sparks
(NVIDIA/dgx-spark-playbooks PR #103's run; its footer as nccl-tests@a0b82b2 src/util.cu
writeResultFooter prints it), all_gather_perf's 16 GiB row (dgx-spark-playbooks issue #25)."""

from __future__ import annotations

from pathlib import Path

import pytest

from cluster.operations.fabric_tools import (
    MIB_PER_GBIT,
    all_reduce_perf_argv,
    ib_write_bw_client,
    ib_write_bw_server,
    listening,
    parse_all_reduce_perf,
    parse_ib_write_bw,
    perftest_version,
)

DATA = Path(__file__).resolve().parents[2] / "data" / "fabric"


def footer(errors: int, average: float) -> str:
    """nccl-tests' footer, with its own printf formats (src/util.cu writeResultFooter)."""
    return "\n".join(
        [
            "# %-20s : %d %s" % ("Out of bounds values", errors, "FAILED" if errors else "OK"),  # noqa: UP031 (the source's printf format)
            "# %-20s : %g %s" % ("Avg bus bandwidth", average, ""),  # noqa: UP031
            "#",
            "# Collective test concluded: all_reduce_perf",
        ]
    )


def test_ib_write_bw_on_a_spark_pair_reads_the_last_row_in_gbits():
    figures = parse_ib_write_bw((DATA / "ib_write_bw-client-spark.txt").read_text())
    assert figures is not None
    assert figures.bytes == 65536 and figures.iterations == 882821
    assert figures.average_gbps == 92.57 and figures.peak_gbps == 0.0  # -D/run_infinitely
    assert figures.msg_rate_mpps == pytest.approx(0.176555)


def test_ib_write_bw_without_report_gbits_is_converted_from_mib():
    text = (
        " #bytes     #iterations    BW peak[MiB/sec]    BW average[MiB/sec]   MsgRate[Mpps]\n"
        " 65536      882805           0.00               11035.16\t\t     0.176554\n"
    )
    figures = parse_ib_write_bw(text)
    assert figures is not None and figures.average_gbps == pytest.approx(11035.16 / MIB_PER_GBIT)
    assert figures.average_gbps == pytest.approx(92.57, abs=0.01)


@pytest.mark.parametrize(
    "text",
    [
        "",
        "Couldn't connect to 192.168.200.12:12000\n Unable to init the socket connection\n",
        " #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]\n",
    ],
)
def test_ib_write_bw_with_no_table_is_no_figure(text):
    assert parse_ib_write_bw(text) is None


def test_perftest_version_line():
    assert perftest_version("Version: 6.29\n") == "6.29"
    assert perftest_version("sh: 1: ib_write_bw: not found\n") is None


def test_all_reduce_perf_on_two_sparks_reads_the_largest_size_and_the_average():
    text = (DATA / "all_reduce_perf-two-sparks.txt").read_text() + footer(0, 0.6275) + "\n"
    figures = parse_all_reduce_perf(text)
    assert figures is not None
    assert figures.largest_bytes == 65536 and figures.largest_busbw_gbytes_s == 0.96
    assert figures.gbps == pytest.approx(7.68)  # GB/s (10^9 bytes) x 8
    assert figures.avg_bus_gbytes_s == 0.6275 and figures.version == "2.20.0"


def test_all_gather_perfs_16_gib_row_reads_too():
    row = (
        " 17179869184    2147483648     float    none      -1   453650   37.87   18.94       0"
        "   410049   41.90   20.95       0"
    )
    figures = parse_all_reduce_perf(row + "\n" + footer(0, 18.94))
    assert figures is not None and figures.largest_busbw_gbytes_s == 18.94


def test_all_reduce_perf_that_did_not_finish_is_no_figure():
    assert parse_all_reduce_perf((DATA / "all_reduce_perf-two-sparks.txt").read_text()) is None


def test_the_commands_are_argv_as_nvidias_guide_runs_them():
    assert ib_write_bw_server("rocep1s0f1", 18515, 5) == [
        "ib_write_bw", "-d", "rocep1s0f1", "-i", "1", "-p", "18515", "-F", "--report_gbits",
        "-D", "5",
    ]  # fmt: skip
    assert ib_write_bw_client("rocep1s0f1", 18516, 5, "192.168.101.10")[-1] == "192.168.101.10"
    argv = all_reduce_perf_argv(
        "all_reduce_perf",
        ("192.168.100.10", "192.168.100.11"),
        {"NCCL_SOCKET_IFNAME": "enp1s0f1np1", "NCCL_IB_HCA": "rocep1s0f1,roceP2p1s0f1"},
        "1G",
        10,
    )
    assert argv[:5] == ["mpirun", "-np", "2", "-H", "192.168.100.10:1,192.168.100.11:1"]
    assert "NCCL_IB_HCA=rocep1s0f1,roceP2p1s0f1" in argv
    assert argv[-9:] == ["all_reduce_perf", "-b", "1G", "-e", "1G", "-g", "1", "-n", "10"]


def test_a_listening_socket_in_proc_net_tcp():
    table = (
        "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid\n"
        "   0: 00000000:4853 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0\n"
        "   1: 0A12010A:4854 0A12010B:C350 01 00000000:00000000 00:00000000 00000000     0\n"
    )
    assert listening(table, 18515)  # 0x4853, state 0A: LISTEN
    assert not listening(table, 18516)  # 0x4854 is an established connection
