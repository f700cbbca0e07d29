"""The fabric's bandwidth tools: how spark-bot runs them and what their output says.

- perftest's `ib_write_bw` (linux-rdma/perftest@00b55b6660d0170dabe2c1b49193e8fbe265086e): a
  server on one node, a client on the other naming the server's address; `--report_gbits`
  turns the table into Gb/s (src/perftest_parameters.h RESULT_FMT_G: ` #bytes     #iterations
  BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]`, rows REPORT_FMT), `-D` runs for that
  many seconds (peak not measured: 0.00). Both ends print the client's figures. `--version`
  prints `Version: 6.29` (and exits 1: perftest returns FAILURE after VERSION_EXIT). The client
  does not retry its connection: "Couldn't connect to IP:PORT" (perftest_communication.c) when
  the server is not listening yet.
- nccl-tests' `all_reduce_perf` (NVIDIA/nccl-tests@a0b82b2260cf5152b9f8c061bbf7eaf0ba096432),
  two ranks under `mpirun` (README: the tests rely on MPI for more than one process): rows of
  size, count, type, redop, root, then time, algbw, busbw, #wrong out of place and in place
  (src/util.cu writeBenchmarkLinePreamble/Body), and the footer `# Avg bus bandwidth    : %g`
  (writeResultFooter), in GB/s (10^9 bytes: src/all_reduce.cu AllReduceGetBw).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

IB_WRITE_BW = "ib_write_bw"
ALL_REDUCE_PERF = "all_reduce_perf"
MPIRUN = "mpirun"
# where NVIDIA's NCCL playbook builds nccl-tests (`make MPI=1` in ~/nccl-tests)
NCCL_TESTS_BUILD = "nccl-tests/build/all_reduce_perf"
MIB_PER_GBIT = 10**9 / (2**20 * 8)  # perftest's usage: Factor=10^9/(2^20*8)=119.2

_VERSION = re.compile(r"^Version:\s*(\S+)", re.MULTILINE)
_PERFTEST_HEADER = re.compile(r"#bytes\s+#iterations\s+BW peak\[(Gb|MiB)/sec\]\s+BW average")
_NUMBER = r"[-+]?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?"
_PERFTEST_ROW = re.compile(rf"^\s*(\d+)\s+(\d+)\s+({_NUMBER})\s+({_NUMBER})\s+({_NUMBER})(?:\s|$)")
_AVG_BUS = re.compile(rf"^#\s*Avg bus bandwidth\s*:\s*({_NUMBER})", re.MULTILINE)
_NCCL_ROW = re.compile(
    rf"^\s*(\d+)\s+(\d+)\s+\S+\s+\S+\s+-?\d+\s+({_NUMBER})\s+({_NUMBER})\s+({_NUMBER})\s"
)
_NCCL_VERSION = re.compile(r"^# nccl-tests version (\S+)(?: \S+)? nccl-headers=(\d+)", re.M)


@dataclass(frozen=True)
class PerftestFigures:
    """One row of ib_write_bw's table (its last: with -D there is one)."""

    bytes: int
    iterations: int
    peak_gbps: float
    average_gbps: float
    msg_rate_mpps: float


@dataclass(frozen=True)
class AllReduceFigures:
    avg_bus_gbytes_s: float  # the footer's "Avg bus bandwidth", GB/s
    largest_bytes: int  # the largest size of the table
    largest_busbw_gbytes_s: float  # its out-of-place busbw, GB/s
    version: str | None

    @property
    def gbps(self) -> float:
        """The largest size's bus bandwidth in Gb/s: the link's figure (small sizes measure
        latency, not bandwidth; nccl-tests' doc/PERFORMANCE.md)."""
        return self.largest_busbw_gbytes_s * 8


def perftest_version(output: str) -> str | None:
    match = _VERSION.search(output)
    return match[1] if match else None


def parse_ib_write_bw(output: str) -> PerftestFigures | None:
    """The figures of the table after its header, in Gb/s (a MiB/s table, without
    --report_gbits, is converted); None when the output holds no table."""
    lines = output.splitlines()
    for index, line in enumerate(lines):
        header = _PERFTEST_HEADER.search(line)
        if header is None:
            continue
        rows = [m for m in (_PERFTEST_ROW.match(row) for row in lines[index + 1 :]) if m]
        if not rows:
            return None
        last = rows[-1]
        scale = 1.0 if header[1] == "Gb" else 1 / MIB_PER_GBIT
        return PerftestFigures(
            bytes=int(last[1]),
            iterations=int(last[2]),
            peak_gbps=float(last[3]) * scale,
            average_gbps=float(last[4]) * scale,
            msg_rate_mpps=float(last[5]),
        )
    return None


def parse_all_reduce_perf(output: str) -> AllReduceFigures | None:
    """The footer's average and the largest size's out-of-place bus bandwidth; None without
    the footer (the run did not finish)."""
    average = _AVG_BUS.search(output)
    rows = [m for m in (_NCCL_ROW.match(line) for line in output.splitlines()) if m]
    if average is None or not rows:
        return None
    largest = max(rows, key=lambda m: int(m[1]))
    version = _NCCL_VERSION.search(output)
    return AllReduceFigures(
        avg_bus_gbytes_s=float(average[1]),
        largest_bytes=int(largest[1]),
        largest_busbw_gbytes_s=float(largest[5]),
        version=version[1] if version else None,
    )


def ib_write_bw_server(device: str, port: int, seconds: int) -> list[str]:
    # -F: no warning about the CPU frequency governor; -i 1: the port of a ConnectX-7 device
    return [
        IB_WRITE_BW,
        "-d",
        device,
        "-i",
        "1",
        "-p",
        str(port),
        "-F",
        "--report_gbits",
        "-D",
        str(seconds),
    ]


def ib_write_bw_client(device: str, port: int, seconds: int, server_ip: str) -> list[str]:
    return [*ib_write_bw_server(device, port, seconds), server_ip]


def all_reduce_perf_argv(
    tool: str, hosts: tuple[str, str], env: dict[str, str], size: str, iters: int
) -> list[str]:
    """Two ranks, one per node, one GPU each, one size (`-b` = `-e`): NVIDIA's NCCL playbook's
    `mpirun -np 2 -H <ip1>:1,<ip2>:1 -x …`, without its ssh options (the nodes' own trust)."""
    exported = [arg for name in sorted(env) for arg in ("-x", f"{name}={env[name]}")]
    return [
        MPIRUN,
        "-np",
        "2",
        "-H",
        ",".join(f"{h}:1" for h in hosts),
        *exported,
        tool,
        "-b",
        size,
        "-e",
        size,
        "-g",
        "1",
        "-n",
        str(iters),
    ]


def listening(proc_net_tcp: str, port: int) -> bool:
    """Whether /proc/net/tcp (or tcp6) shows a socket listening on `port` (state 0A)."""
    wanted = f":{port:04X}"
    for line in proc_net_tcp.splitlines()[1:]:
        fields = line.split()
        if len(fields) > 3 and fields[1].endswith(wanted) and fields[3] == "0A":
            return True
    return False
