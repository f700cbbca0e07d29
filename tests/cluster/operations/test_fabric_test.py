"""fabric-test on two local-driver nodes of this machine (no lab, no root): each node's own PATH
with the lab's stand-ins of `ibdev2netdev` and `ib_write_bw` and a canned `ip -o -f inet addr`;
the server's port awaited in this machine's /proc/net/tcp, a real transfer on loopback, the
figure against the nominal speed, the history's comparison, and a pair that cannot be measured
(no perftest on a node) ending the run failed with its reason."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from cluster.bench.history import JsonLinesHistory
from cluster.config import Secrets
from cluster.controller import Controller
from cluster.events import FabricTestResult, Failed, Progress
from cluster.operations.fabric_report import FabricTestReport
from cluster.operations.fabric_test import lanes_between
from testkit.docker_standin import docker_standin, failing
from testkit.lab_cluster import collect
from testkit.local_cluster import local_cluster
from tests.cluster.nodes.test_fabric_paths import PORT_1_UP, ip_addr, node, two_subnets

LAB = Path(__file__).resolve().parents[3] / "lab"
IP_ADDR = (
    "1: lo    inet 127.0.0.1/8 scope host lo\\       valid_lft forever preferred_lft forever\n"
    "4: enp1s0f1np1    inet {ip}/24 brd 127.0.1.255 scope global enp1s0f1np1\\       "
    "valid_lft forever preferred_lft forever\n"
)


def node_bin(root: Path, name: str, ip: str, tools: tuple[str, ...]) -> dict[str, str]:
    """The node's PATH: stand-ins of `tools`, `ip` printing its address; and their sysfs."""
    bin_dir, net, ib = root / name / "bin", root / name / "net", root / name / "infiniband"
    bin_dir.mkdir(parents=True)
    (net / "enp1s0f1np1").mkdir(parents=True)
    (net / "enp1s0f1np1" / "operstate").write_text("up\n")
    (ib / "rocep1s0f1" / "ports" / "1").mkdir(parents=True)
    (ib / "rocep1s0f1" / "ports" / "1" / "state").write_text("4: ACTIVE\n")
    for tool in tools:
        (bin_dir / tool).write_text(
            f'#!/bin/sh\nPYTHONPATH={LAB} exec {sys.executable} -m emulator {tool} "$@"\n'
        )
    (bin_dir / "ip").write_text(f"#!/bin/sh\ncat <<'EOF'\n{IP_ADDR.format(ip=ip)}EOF\n")
    for script in bin_dir.iterdir():
        script.chmod(0o755)
    return {
        "PATH": f"{bin_dir}:/usr/bin:/bin",
        "SPARK_EMU_SYS_CLASS_NET": str(net),
        "SPARK_EMU_SYS_CLASS_INFINIBAND": str(ib),
    }


@asynccontextmanager
async def controller(tmp_path: Path, tools_b: tuple[str, ...]) -> AsyncIterator[Controller]:
    """fabric-test asks no Docker engine, but each node's connection opens one."""
    async with (
        docker_standin(tmp_path / "a.sock", failing) as a,
        docker_standin(tmp_path / "b.sock", failing) as b,
    ):
        yield _controller(tmp_path, [a, b], tools_b)


def _controller(tmp_path: Path, sockets: list[Path], tools_b: tuple[str, ...]) -> Controller:
    ips = ["127.0.1.1", "127.0.1.2"]
    config = local_cluster("fab", sockets, fabric_ips=ips)
    envs = [
        node_bin(tmp_path, "a", ips[0], ("ibdev2netdev", "ib_write_bw")),
        node_bin(tmp_path, "b", ips[1], tools_b),
    ]
    nodes = [
        n.model_copy(update={"local_env": env}) for n, env in zip(config.nodes, envs, strict=True)
    ]
    return Controller(config.model_copy(update={"nodes": nodes}), Secrets({}))


@pytest.mark.timeout(120)
async def test_the_pair_is_measured_compared_and_recorded(tmp_path):
    history = JsonLinesHistory(tmp_path / "fabric.jsonl", FabricTestReport)
    async with controller(tmp_path, ("ibdev2netdev", "ib_write_bw")) as fabric:
        first = await collect(fabric.fabric_test(seconds=1, history=history))
        second = await collect(fabric.fabric_test(seconds=1, history=history))
    for events in (first, second):
        assert not any(isinstance(e, Failed) for e in events), events
        assert next(e.message for e in events if isinstance(e, Progress)) == (
            "measuring spark-a ↔ spark-b"
        )
    [result] = [e for e in first if isinstance(e, FabricTestResult)]
    [pair] = result.report.pairs
    assert pair.tool == "ib_write_bw" and pair.gbps and pair.gbps > 0
    [lane] = pair.lanes
    assert (lane.subnet, lane.server_device, lane.server_address) == (
        "127.0.1.0/24",
        "rocep1s0f1",
        "127.0.1.1",
    )
    assert result.report.nominal_gbps == 200 and "one subnet only" in pair.warnings[0]
    [again] = [e for e in second if isinstance(e, FabricTestResult)]
    [compared] = again.report.comparisons
    assert compared.previous == pair.gbps and compared.metric == "spark-a ↔ spark-b (ib_write_bw)"
    assert len(history.reports()) == 2


@pytest.mark.timeout(120)
async def test_a_pair_that_cannot_be_measured_says_why_and_the_run_fails(tmp_path):
    async with controller(tmp_path, ("ibdev2netdev",)) as fabric:
        events = await collect(fabric.fabric_test(seconds=1))
    [result] = [e for e in events if isinstance(e, FabricTestResult)]
    [pair] = result.report.pairs
    assert pair.gbps is None and pair.error and "neither perftest's ib_write_bw" in pair.error
    failed = events[-1]
    assert isinstance(failed, Failed) and failed.signature == "fabric_test_failed"
    assert failed.summary == "the fabric could not be measured between spark-a ↔ spark-b"


def test_a_lane_per_half_of_the_port_in_both_layouts():
    # NVIDIA's two subnets: one lane each; the old link-local layout (both halves on one
    # 169.254.0.0/16): still one lane per half, paired by interface name
    first, second = two_subnets(10), two_subnets(11)
    assert [
        (lane.subnet, lane.server_device, lane.client_device)
        for lane in lanes_between(first, second)
    ] == [
        ("192.168.101.0/24", "roceP2p1s0f1", "roceP2p1s0f1"),
        ("192.168.100.0/24", "rocep1s0f1", "rocep1s0f1"),
    ]
    link_local = [
        node(
            PORT_1_UP,
            ip_addr(
                ("enp1s0f1np1", f"169.254.35.{host}/16"), ("enP2p1s0f1np1", f"169.254.36.{host}/16")
            ),
            f"169.254.35.{host}",
        )
        for host in (62, 63)
    ]
    lanes = lanes_between(*link_local)
    assert [(lane.server_device, lane.client_device, lane.server_address) for lane in lanes] == [
        ("roceP2p1s0f1", "roceP2p1s0f1", "169.254.36.62"),
        ("rocep1s0f1", "rocep1s0f1", "169.254.35.62"),
    ]
