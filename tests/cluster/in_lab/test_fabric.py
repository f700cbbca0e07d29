"""The fabric on the lab's nodes (MTU 9000 and 200 Gb/s, as a Spark pair's ConnectX-7, until a
test changes one end), from the command line: preflight reads each end's state, MTU and speed,
refuses a mismatched MTU and warns of a link trained slower; NVIDIA's two-subnet layout (both
logical interfaces of the port, both in NCCL_IB_HCA), a subnet one node lacks and a worker cabled
to the other port; `fabric-test` reports a figure for every pair of nodes (the lab's ib_write_bw
measures a real TCP transfer across the fabric bridge) and keeps the history."""

from __future__ import annotations

import re
from contextlib import contextmanager
from pathlib import Path

import pytest
import yaml

from cluster.events import FabricTestResult, parse_event
from lab import api as lab_api
from lab import topology as T
from lab.proc import run
from tests.cluster.in_lab.test_cli import CONFIG, spark_bot

pytestmark = [pytest.mark.lab, pytest.mark.timeout(240)]
CONFIG_PATH = Path(CONFIG)


@pytest.fixture
def fabric_restored(clean):
    yield clean
    lab_api.set_fabric_mtu(1, 9000)
    lab_api.set_fabric_speed(1, 200_000)


async def test_preflight_reads_both_ends_of_the_fabric(fabric_restored):
    code, out, _ = await spark_bot("preflight")
    assert code == 0, out
    assert "spark-lab-0 enp1s0f1np1: up, MTU 9000, 200 Gb/s" in out
    assert "spark-lab-1 enp1s0f1np1: up, MTU 9000, 200 Gb/s" in out

    lab_api.set_fabric_mtu(1, 1500)  # left at the default on one end
    code, out, _ = await spark_bot("preflight")
    assert code == 1, out
    assert "the fabric's MTU differs between the nodes" in out
    assert "spark-lab-1 enp1s0f1np1: up, MTU 1500" in out
    assert "`sudo ip link set dev enp1s0f1np1 mtu 9000` on spark-lab-1" in out

    lab_api.set_fabric_mtu(1, 9000)
    lab_api.set_fabric_speed(1, 100_000)  # the link trained at half its speed
    code, out, _ = await spark_bot("preflight")
    assert code == 0, out
    assert (
        "⚠ the fabric link enp1s0f1np1 on spark-lab-1 runs at 100 Gb/s, not its nominal 200" in out
    )


@pytest.fixture
def layout_restored(clean):
    """The lab's own layout after: one interface and one subnet per node, cabled to port 1."""
    yield clean
    for node in (0, 1):
        lab_api.set_second_subnet(node, False)
    lab_api.set_cable_port(1, 1)


def fabric_figures(out: str) -> dict[str, float]:
    return {
        m["pair"]: float(m["gbps"])
        for m in re.finditer(
            r"(?P<pair>spark-lab-\d ↔ spark-lab-\d): (?P<gbps>[\d.]+) Gb/s with perftest's "
            r"ib_write_bw",
            out,
        )
    }


async def test_fabric_test_measures_the_pair_and_keeps_the_history(clean, tmp_path):
    history = ["--seconds", "1", "--history", str(tmp_path / "fabric.jsonl")]
    code, out, _ = await spark_bot("fabric-test", *history)
    assert code == 0, out
    figures = fabric_figures(out)
    assert (
        list(figures) == ["spark-lab-0 ↔ spark-lab-1"] and figures["spark-lab-0 ↔ spark-lab-1"] > 0
    )
    assert "% of the link's nominal 200 Gb/s" in out
    assert "198.18.1.0/24: rocep1s0f1 → rocep1s0f1 (198.18.1.10): " in out
    assert "one subnet only (198.18.1.0/24)" in out  # the lab's default layout: one interface
    assert "vs previous: no earlier run of these nodes" in out

    code, out, _ = await spark_bot("fabric-test", *history, "--json")
    assert code == 0, out
    [result] = [e for e in map(parse_event, out.splitlines()) if isinstance(e, FabricTestResult)]
    [pair] = result.report.pairs
    assert pair.tool == "ib_write_bw" and pair.gbps and pair.gbps > 0
    [compared] = result.report.comparisons
    assert compared.metric == "spark-lab-0 ↔ spark-lab-1 (ib_write_bw)" and compared.unit == "Gb/s"


async def test_fabric_test_says_the_speed_the_link_trained_at(fabric_restored):
    lab_api.set_fabric_speed(1, 100_000)  # the worker's end trained at half its speed
    code, out, _ = await spark_bot("fabric-test", "--seconds", "1", "--no-history")
    assert code == 0, out
    assert "% of the link's nominal 200 Gb/s (it trained at 100 Gb/s)" in out
    assert (
        "⚠ the fabric link enp1s0f1np1 on spark-lab-1 runs at 100 Gb/s, not its nominal 200" in out
    )


async def test_fabric_test_reports_every_pair_of_three_nodes(relab, tmp_path):
    lab = relab(nodes=3)
    data = yaml.safe_load(CONFIG_PATH.read_text())
    template = data["cluster"]["nodes"][0]
    data["cluster"]["nodes"] = [
        {
            **template,
            "name": info.name,
            "ssh": {**template["ssh"], "host": info.mgmt_ip},
            "fabric_ip": info.fabric_ip,
            "docker_socket": info.docker_socket,
        }
        for info in lab.nodes
    ]
    data["cluster"]["serve"].update(tensor_parallel_size=1, pipeline_parallel_size=3)
    config = tmp_path / "lab3.yaml"
    config.write_text(yaml.safe_dump(data))
    code, out, _ = await spark_bot(
        "fabric-test", "--seconds", "1", "--no-history", config=str(config)
    )
    assert code == 0, out
    figures = fabric_figures(out)
    assert sorted(figures) == [
        "spark-lab-0 ↔ spark-lab-1",
        "spark-lab-0 ↔ spark-lab-2",
        "spark-lab-1 ↔ spark-lab-2",
    ]
    assert all(gbps > 0 for gbps in figures.values())


@contextmanager
def without(node: int, *tools: str):
    """The node without these tools on its PATH (not installed), for the test's length."""
    wrappers = [T.Node(node).bin_dir / tool for tool in tools]
    for wrapper in wrappers:
        wrapper.rename(wrapper.with_name(wrapper.name + ".absent"))
    try:
        yield
    finally:
        for wrapper in wrappers:
            wrapper.with_name(wrapper.name + ".absent").rename(wrapper)


async def test_without_perftest_on_a_node_nccl_tests_measures_the_pair(clean):
    with without(1, "ib_write_bw"):
        code, out, _ = await spark_bot("fabric-test", "--no-history")
    assert code == 0, out
    figure = re.search(
        r"spark-lab-0 ↔ spark-lab-1: ([\d.]+) Gb/s with nccl-tests' all_reduce_perf", out
    )
    assert figure and float(figure[1]) > 0, out


async def test_a_pair_without_either_tool_says_why_and_fails(clean):
    with without(1, "ib_write_bw", "all_reduce_perf"):
        code, out, _ = await spark_bot("fabric-test", "--seconds", "1", "--no-history")
    assert code == 1, out
    assert "spark-lab-0 ↔ spark-lab-1: not measured: neither perftest's ib_write_bw" in out
    assert "`sudo apt install perftest`" in out and "found on both nodes" in out
    assert "the fabric could not be measured between spark-lab-0 ↔ spark-lab-1" in out


async def test_nvidias_two_subnet_layout_both_halves_in_nccl_ib_hca_and_measured(
    layout_restored, tmp_path
):
    for node in (0, 1):
        lab_api.set_second_subnet(node, True)
    code, out, _ = await spark_bot("preflight")
    assert code == 0, out
    assert "Detected IB_IF: rocep1s0f1,roceP2p1s0f1" in out  # NCCL_IB_HCA: both halves
    assert (
        "spark-lab-1 fabric subnets: enp1s0f1np1 198.18.1.11/24 (rocep1s0f1), "
        "enP2p1s0f1np1 198.18.2.11/24 (roceP2p1s0f1)" in out
    )
    assert "spark-lab-1 enP2p1s0f1np1: up, MTU 9000, 200 Gb/s" in out

    code, out, _ = await spark_bot("fabric-test", "--seconds", "1", "--no-history")
    assert code == 0, out
    assert "198.18.1.0/24: rocep1s0f1 → rocep1s0f1 (198.18.1.10): " in out
    assert "198.18.2.0/24: roceP2p1s0f1 → roceP2p1s0f1 (198.18.2.10): " in out
    assert "one subnet only" not in out
    lanes = [float(g) for g in re.findall(r"\): ([\d.]+) Gb/s", out)]
    assert len(lanes) == 2 and fabric_figures(out)["spark-lab-0 ↔ spark-lab-1"] == pytest.approx(
        sum(lanes), abs=0.02
    )  # the pair's figure is its two lanes' sum, as NVIDIA's guide adds them

    lab_api.set_second_subnet(1, False)  # the worker's second interface not configured
    code, out, _ = await spark_bot("preflight")
    assert code == 1, out
    assert "spark-lab-1 has no address on the fabric subnet 198.18.2.0/24" in out
    assert "configure the other subnet on spark-lab-1" in out


async def test_a_second_interface_up_without_an_address_is_a_warning(layout_restored):
    for node in (0, 1):  # the port's second interface Up on both, its netplan not written
        lab_api.set_second_subnet(node, True)
        run(["ip", "-n", T.Node(node).netns, "addr", "flush", "dev", T.SECOND_FABRIC_IFNAME])
    code, out, _ = await spark_bot("preflight")
    assert code == 0, out
    assert (
        "enP2p1s0f1np1 on spark-lab-0 is Up (behind roceP2p1s0f1, in NCCL_IB_HCA) but holds no "
        "address: NVIDIA's two-subnet layout gives the port's second interface a subnet" in out
    )


async def test_a_worker_cabled_to_the_other_port_is_named_with_the_fix(layout_restored):
    lab_api.set_cable_port(1, 0)
    code, out, _ = await spark_bot("preflight")
    assert code == 1, out
    assert (
        "the cables are on different ports: spark-lab-1's fabric is Up on enp1s0f0np0, "
        "enP2p1s0f0np0, which holds no address on 198.18.1.0/24" in out
    )
    assert "plug the cable into the same port on both nodes" in out
