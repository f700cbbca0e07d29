"""The lab's ib_write_bw held against perftest's own formats (tests/data/fabric/
perftest-formats.json: the C literals of linux-rdma/perftest@00b55b6 src/perftest_parameters.h),
and what the real one does that the stand-in must do too: refuse a device that is not there or
not ACTIVE, fail at once when no server listens (perftest's client does not retry), print its
version and exit 1."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cluster.operations.fabric_tools import listening, parse_ib_write_bw

from .conftest import LAB, REPO, free_port

FORMATS = json.loads(
    (Path(REPO) / "tests" / "data" / "fabric" / "perftest-formats.json").read_text()
)


def c_literal(text: str) -> str:
    """A C string literal (with `" PRIu64 "` spliced in) as the Python format it prints."""
    joined = re.sub(r'"\s*PRIu64\s*"', "d", text.strip())
    body = joined.strip('"').replace("\\n", "")
    return body.replace("lu", "d").replace("lf", "f")


@pytest.fixture
def infiniband(tmp_path):
    for device, state in (("rocep1s0f1", "4: ACTIVE"), ("rocep1s0f0", "1: DOWN")):
        port = tmp_path / device / "ports" / "1"
        port.mkdir(parents=True)
        (port / "state").write_text(state + "\n")
    return tmp_path


def tool(*args: str, infiniband: Path) -> subprocess.Popen[str]:
    env = dict(os.environ, PYTHONPATH=LAB, SPARK_EMU_SYS_CLASS_INFINIBAND=str(infiniband))
    return subprocess.Popen(
        [sys.executable, "-m", "emulator", "ib_write_bw", *args],
        env=env,
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def wait_listening(port: int, server: subprocess.Popen[str]) -> None:
    # the same event the controller waits for: /proc/net/tcp shows the socket listening
    for _ in range(600):
        if listening(Path("/proc/net/tcp").read_text(), port):
            return
        assert server.poll() is None, server.communicate()
        time.sleep(0.05)  # the poll's interval
    raise AssertionError("the server never listened")


def test_a_server_and_a_client_print_perftests_table_with_a_measured_figure(infiniband):
    port = free_port()
    args = ["-d", "rocep1s0f1", "-i", "1", "-p", str(port), "-F", "--report_gbits", "-D", "1"]
    server = tool(*args, infiniband=infiniband)
    wait_listening(port, server)
    client = tool(*args, "127.0.0.1", infiniband=infiniband)
    out, err = client.communicate(timeout=30)
    served, _ = server.communicate(timeout=30)
    assert client.returncode == 0 and server.returncode == 0, err
    for text in (out, served):
        lines = text.splitlines()
        assert c_literal(FORMATS["RESULT_FMT_G"]) in lines
        header = lines.index(c_literal(FORMATS["RESULT_FMT_G"]))
        assert lines[header - 1] == c_literal(FORMATS["RESULT_LINE"])
        row = lines[header + 1]
        figures = parse_ib_write_bw(text)
        assert figures is not None and figures.average_gbps > 0
        again = c_literal(FORMATS["REPORT_FMT"]) % (
            figures.bytes,
            figures.iterations,
            figures.peak_gbps,
            figures.average_gbps,
            figures.msg_rate_mpps,
        )
        assert row == again, "the row is perftest's REPORT_FMT, field for field"
    assert " WARNING: BW peak won't be measured in this run." in out.splitlines()[0]
    assert parse_ib_write_bw(out) == parse_ib_write_bw(served), "both ends print one figure"


def test_without_report_gbits_the_table_is_in_mib(infiniband):
    port = free_port()
    args = ["-d", "rocep1s0f1", "-p", str(port), "-n", "200"]
    server = tool(*args, infiniband=infiniband)
    wait_listening(port, server)
    out, _ = tool(*args, "127.0.0.1", infiniband=infiniband).communicate(timeout=30)
    server.communicate(timeout=30)
    assert c_literal(FORMATS["RESULT_FMT"]) in out.splitlines()


@pytest.mark.parametrize(
    ("device", "said"),
    [
        ("mlx5_9", "IB device mlx5_9 not found"),
        ("rocep1s0f0", "Unable to Connect the HCA's through the link"),
    ],
)
def test_a_device_not_there_or_down_is_refused(infiniband, device, said):
    p = tool("-d", device, "-p", str(free_port()), "127.0.0.1", infiniband=infiniband)
    _, err = p.communicate(timeout=30)
    assert p.returncode == 1 and said in err


def test_a_client_with_no_server_fails_at_once_as_perftests_does(infiniband):
    port = free_port()
    p = tool("-d", "rocep1s0f1", "-p", str(port), "127.0.0.1", infiniband=infiniband)
    _, err = p.communicate(timeout=30)
    assert p.returncode == 1 and f"Couldn't connect to 127.0.0.1:{port}" in err


def test_version(infiniband):
    p = tool("--version", infiniband=infiniband)
    out, _ = p.communicate(timeout=30)
    assert out == "Version: 6.29\n" and p.returncode == 1
