"""The lab's mpirun and all_reduce_perf held against nccl-tests' own formats (tests/data/fabric/
nccl-tests-formats.json: the PRINT formats of NVIDIA/nccl-tests@a0b82b2 src/util.cu), and what the
real ones do that the stand-ins must do too: two ranks under mpirun, rank 0 alone prints, the
bus bandwidth of two ranks is the algorithm bandwidth (src/all_reduce.cu: x 2(n-1)/n), `-h`
prints the usage, and the tool alone (without mpirun's two ranks) cannot measure a link."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from cluster.operations.fabric_tools import all_reduce_perf_argv, parse_all_reduce_perf

from .conftest import LAB, REPO

FORMATS = json.loads((Path(REPO) / "tests/data/fabric/nccl-tests-formats.json").read_text())


def c_format(text: str) -> str:
    return text.replace("%li", "%d").replace("%ld", "%d")


@pytest.fixture
def tools(tmp_path):
    """mpirun and all_reduce_perf on the PATH, as a node's bin dir has them."""
    for name in ("mpirun", "all_reduce_perf"):
        tool = tmp_path / name
        tool.write_text(f'#!/bin/sh\nexec {sys.executable} -m emulator {name} "$@"\n')
        tool.chmod(0o755)
    return dict(os.environ, PYTHONPATH=LAB, PATH=f"{tmp_path}:{os.environ['PATH']}")


def run(argv: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, env=env, cwd=REPO, capture_output=True, text=True, timeout=60)


def test_two_ranks_print_nccl_tests_table_with_a_measured_figure(tools):
    argv = all_reduce_perf_argv(
        "all_reduce_perf",
        ("127.0.0.1", "127.0.0.1"),
        {"NCCL_IB_HCA": "rocep1s0f1", "NCCL_SOCKET_IFNAME": "lo"},
        "8M",
        3,
    )
    done = run(argv, tools)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[1] == "# Collective test starting: all_reduce_perf"
    devices = [line for line in lines if line.startswith("#  Rank ")]
    assert len(devices) == 2, "rank 0 prints both ranks' devices, nobody else prints"
    for rank, line in enumerate(devices):
        fields = re.match(
            r"#  Rank +(\d+) Group +(\d+) Pid +(\d+) on +(\S+) device +(\d+) \[(\w+):(\w+):(\w+)\] (.*)",
            line,
        )
        assert fields and int(fields[1]) == rank
        again = FORMATS["device_line"] % (
            rank, 0, int(fields[3]), fields[4], 0, 0x000F, 0x01, 0x00, fields[9]
        )  # fmt: skip
        assert line == again and fields[9] == "NVIDIA GB10"
    assert FORMATS["header_places"] % ("", "", "", "", "") in lines
    [row] = [line for line in lines if line and not line.startswith("#")]
    size, count, kind, op, root, *body = row.split()
    assert (int(size), int(count), kind, op, root) == (8 * 2**20, 2 * 2**20, "float", "sum", "-1")
    again = c_format(FORMATS["preamble"]) % (int(size), int(count), kind, op, "%6i" % -1) + "".join(
        FORMATS["body"] % (body[i], body[i + 1], body[i + 2], float(body[i + 3])) for i in (0, 4)
    )
    assert row == again, "the row is nccl-tests' preamble and two bodies, field for field"
    assert body[1] == body[2], "two ranks: busbw = algbw"
    figures = parse_all_reduce_perf(done.stdout)
    assert figures is not None and figures.largest_busbw_gbytes_s > 0
    footer = FORMATS["footer"] % ("Avg bus bandwidth", figures.avg_bus_gbytes_s, "")
    assert footer in lines and FORMATS["errors"] % ("Out of bounds values", 0, "OK") in lines


def test_the_usage_and_a_rank_alone(tools):
    usage = run(["all_reduce_perf", "-h"], tools)
    assert usage.returncode == 0 and usage.stdout.startswith("USAGE: all_reduce_perf")
    alone = run(["all_reduce_perf", "-b", "1M", "-e", "1M"], tools)
    assert alone.returncode == 1 and "two ranks under mpirun" in alone.stderr
    assert run(["mpirun", "--version"], tools).stdout.startswith("mpirun (Open MPI)")
