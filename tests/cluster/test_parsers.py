"""Pure parsers of node output: interfaces, `ray status`, container specs."""

from pathlib import Path

import pytest

from bot.config import load_config
from cluster.config import Secrets
from cluster.logs.timestamps import parse_docker_timestamp
from cluster.nodes.interfaces import InterfaceProblem, resolve_interfaces
from cluster.serving.containers import (
    create_body,
    into_container_log,
    node_environment,
    serve_command,
)
from cluster.serving.ray_status import parse_ray_status

IBDEV = """rocep1s0f1 port 1 ==> enp1s0f1np1 (Up)
roceP2p1s0f1 port 1 ==> enP2p1s0f1np1 (Up)
rocep1s0f0 port 1 ==> enp1s0f0np0 (Down)
"""
IP_ADDR = """1: lo    inet 127.0.0.1/8 scope host lo\\       valid_lft forever preferred_lft forever
2: enP7s7    inet 10.1.230.180/24 brd 10.1.230.255 scope global enP7s7\\       valid_lft forever
4: enp1s0f1np1    inet 192.168.200.12/24 brd 192.168.200.255 scope global enp1s0f1np1\\       valid_lft forever
"""
SEED = load_config(Path(__file__).resolve().parents[2] / "configs" / "sparks.example.yaml").cluster


def test_auto_detection_like_the_community_launcher():
    found = resolve_interfaces(
        fabric_ip="192.168.200.12",
        eth_choice="auto",
        ib_choice="auto",
        ibdev2netdev_output=IBDEV,
        ip_addr_output=IP_ADDR,
    )
    assert found.ib_if == ("rocep1s0f1", "roceP2p1s0f1")
    assert found.eth_if == "enp1s0f1np1" and found.local_ip == "192.168.200.12"


def test_configured_interfaces_must_exist_and_be_up():
    with pytest.raises(InterfaceProblem, match="eth9 has no IPv4"):
        resolve_interfaces(
            fabric_ip="192.168.200.12",
            eth_choice="eth9",
            ib_choice="auto",
            ibdev2netdev_output=IBDEV,
            ip_addr_output=IP_ADDR,
        )
    with pytest.raises(InterfaceProblem, match="rocep1s0f0 is not Up"):
        resolve_interfaces(
            fabric_ip="192.168.200.12",
            eth_choice="auto",
            ib_choice="rocep1s0f0",
            ibdev2netdev_output=IBDEV,
            ip_addr_output=IP_ADDR,
        )
    with pytest.raises(
        InterfaceProblem, match=r"no interface holds the fabric IP 192\.168\.200\.99"
    ):
        resolve_interfaces(
            fabric_ip="192.168.200.99",
            eth_choice="auto",
            ib_choice="auto",
            ibdev2netdev_output=IBDEV,
            ip_addr_output=IP_ADDR,
        )


def test_ray_status_counts_active_nodes_and_gpus():
    text = """======== Autoscaler status: 2026-11-30 05:42:03.123456 ========
Node status
---------------------------------------------------------------
Active:
 1 node_6a1f
 1 node_9b2c
Pending:
 (no pending nodes)
Recent failures:
 (no failures)

Resources
---------------------------------------------------------------
Usage:
 0.0/40.0 CPU
 0.0/2.0 GPU
 0B/200.00GiB memory
"""
    state = parse_ray_status(text)
    assert (state.active_nodes, state.gpus_total) == (2, 2.0)
    assert parse_ray_status("Active:\n 1 node_a\nPending:\n 1 node_b\n").active_nodes == 1


def test_serve_command_and_container_body_come_from_config():
    argv = serve_command(SEED)
    assert argv[:3] == ["vllm", "serve", "Qwen/Qwen3.5-122B-A10B-FP8"]
    assert "--tensor-parallel-size" in argv and "ray" in argv and "--reasoning-parser" in argv
    wrapped = into_container_log(argv)
    assert wrapped[:2] == ["sh", "-c"] and wrapped[2].endswith(">/proc/1/fd/1 2>/proc/1/fd/2")
    found = resolve_interfaces(
        fabric_ip="192.168.200.12",
        eth_choice="auto",
        ib_choice="auto",
        ibdev2netdev_output=IBDEV,
        ip_addr_output=IP_ADDR,
    )
    env = node_environment(SEED, found, Secrets({"HF_TOKEN": "hf_x"}))
    assert (
        env["NCCL_IB_HCA"] == "rocep1s0f1,roceP2p1s0f1"
        and env["GLOO_SOCKET_IFNAME"] == "enp1s0f1np1"
    )
    assert env["VLLM_HOST_IP"] == "192.168.200.12" and env["HF_TOKEN"] == "hf_x"
    body = create_body(SEED, SEED.head, "head", ["sleep", "infinity"], env, "/home/aurora")
    host = body["HostConfig"]
    assert host["NetworkMode"] == "host" and host["IpcMode"] == "host" and host["Privileged"]
    assert host["Binds"] == ["/home/aurora/.cache/huggingface:/root/.cache/huggingface"]
    assert host["DeviceRequests"][0]["Capabilities"] == [["gpu"]]


def test_mp_ranks():
    mp = SEED.model_copy(update={"serve": SEED.serve.model_copy(update={"backend": "mp"})})
    worker = serve_command(mp, rank=1, head_ip="192.168.200.12")
    assert worker[-9:] == [
        "--nnodes",
        "2",
        "--node-rank",
        "1",
        "--master-addr",
        "192.168.200.12",
        "--master-port",
        "29501",
        "--headless",
    ]
    assert "--headless" not in serve_command(mp, rank=0, head_ip="192.168.200.12")


@pytest.mark.parametrize(
    ("stamp", "expected"),
    [
        ("2026-11-30T07:01:38.123456789Z", "2026-11-30T07:01:38.123456+00:00"),
        ("2026-11-30T07:01:38.1234Z", "2026-11-30T07:01:38.123400+00:00"),
        ("2026-11-30T07:01:38Z", "2026-11-30T07:01:38+00:00"),
        ("0001-01-01T00:00:00Z", None),
        ("not a time", None),
    ],
)
def test_docker_timestamps_with_trailing_zeros_dropped(stamp, expected):
    parsed = parse_docker_timestamp(stamp)
    assert (parsed.isoformat() if parsed else None) == expected
