"""What makes a lab node look like a DGX Spark to a launch script: GPU requests accepted, its own
hostname, ibdev2netdev's four ports, nvidia-smi's query fields, the tools launchers run, and the
NCCL lines naming the node's hostname and its fabric address."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import pytest

from bot.config import load_config
from lab import api
from lab import topology as T

from .helpers import bot_container, docker_over_ssh, exec_detached, exec_out, ssh_to

pytestmark = pytest.mark.lab

LAB_CONFIG = Path(__file__).resolve().parents[2] / "configs" / "lab.yaml"
LAUNCHER_TOOLS = "nc rsync sudo"


async def test_a_session_on_each_node_sees_a_spark(lab):
    for node in lab.nodes:
        async with ssh_to(lab, node) as conn:
            r = await conn.run("hostname", check=True)
            assert r.stdout.strip() == node.name
            r = await conn.run("ibdev2netdev", check=True)
            # the cabled port and its second-PCIe-link twin are Up, the other port is not
            assert r.stdout.splitlines() == [
                "rocep1s0f0 port 1 ==> enp1s0f0np0 (Down)",
                "rocep1s0f1 port 1 ==> enp1s0f1np1 (Up)",
                "roceP2p1s0f0 port 1 ==> enP2p1s0f0np0 (Down)",
                "roceP2p1s0f1 port 1 ==> enP2p1s0f1np1 (Up)",
            ]
            r = await conn.run(
                "nvidia-smi --query-gpu=name,pstate,memory.total,utilization.gpu,driver_version "
                "--format=csv,noheader",
                check=True,
            )
            assert r.stdout.strip() == "NVIDIA GB10, P8, [N/A], 0 %, 580.95.05"
            r = await conn.run(f"command -v {LAUNCHER_TOOLS}")
            assert r.exit_status == 0 and len(r.stdout.split()) == 3, r.stdout


async def _wait_in_log(container, path: str, pattern: str, timeout: float = 60) -> str:
    deadline = asyncio.get_running_loop().time() + timeout
    text = ""
    while asyncio.get_running_loop().time() < deadline:
        _, text = await exec_out(container, ["cat", path])
        if re.search(pattern, text):
            return text
        await asyncio.sleep(0.3)
    raise AssertionError(f"{pattern!r} not in {path} after {timeout}s:\n{text[-3000:]}")


async def test_gpu_containers_with_hostnames_and_fabric_nccl_bootstrap(lab):
    """The bot's own container spec (gpus: true) on both nodes, then a TP=2 mp launch whose
    rendezvous uses the head's management address, as launchers that resolve host names do:
    NCCL still binds to NCCL_SOCKET_IFNAME's (the fabric's) address on each node."""
    config = load_config(LAB_CONFIG).cluster
    assert config.container.gpus
    head, worker = lab.nodes[0], lab.nodes[1]
    env = {"NCCL_SOCKET_IFNAME": T.FABRIC_IFNAME, "NCCL_DEBUG": "INFO"}
    env.update(config.container.env)
    serve = ["vllm", "serve", "m", "-tp", "2", "--nnodes", "2", "--master-addr", head.mgmt_ip]
    serve += ["--master-port", "29511", "--port", "8011"]
    async with (
        ssh_to(lab, head) as hconn,
        ssh_to(lab, worker) as wconn,
        docker_over_ssh(hconn, head) as hd,
        docker_over_ssh(wconn, worker) as wd,
    ):
        hc = await bot_container(hd, config, 0, ["sleep", "infinity"], env)
        wc = await bot_container(wd, config, 1, ["sleep", "infinity"], env)
        try:
            for node, c in ((head, hc), (worker, wc)):
                info = await c.show()
                assert info["HostConfig"]["DeviceRequests"][0]["Driver"] == "nvidia"
                # dockerd's nvidia driver puts it in the container's own process (not in exec's)
                code, out = await exec_out(c, "hostname; tr '\\0' '\\n' </proc/1/environ")
                lines = out.split()
                assert code == 0 and lines[0] == node.name, out
                assert "NVIDIA_VISIBLE_DEVICES=all" in lines, out
            for c, rank_args in (
                (hc, ["--node-rank", "0"]),
                (wc, ["--node-rank", "1", "--headless"]),
            ):
                command = " ".join([*serve, *rank_args]) + " > /tmp/v.log 2>&1"
                await exec_detached(c, ["sh", "-c", command])
            for node, c, rank in ((head, hc, 0), (worker, wc, 1)):
                text = await _wait_in_log(
                    c, "/tmp/v.log", rf"rank {rank} nranks 2 .* Init COMPLETE"
                )
                prefix = rf"{re.escape(node.name)}:\d+:\d+ \[0\] NCCL INFO "
                want = rf"{prefix}Bootstrap: Using {T.FABRIC_IFNAME}:{re.escape(node.fabric_ip)}<0>"
                assert re.search(want, text), text[-3000:]
                assert not re.search(rf"{prefix}.*{re.escape(head.mgmt_ip)}", text), text[-3000:]
        finally:
            await hc.delete(force=True)
            await wc.delete(force=True)


async def test_sessions_find_the_roce_devices_in_sys_class_infiniband(lab):
    """As sparkrun's detection reads them: port 1's state, the backing netdev, the RoCE v2 GID
    index; consistent with ibdev2netdev, following the cable; the rest of /sys/class as before."""
    detect = (
        "for d in /sys/class/infiniband/*; do echo $(basename $d) $(cat $d/ports/1/state)"
        " $(cat $d/ports/1/link_layer) $(ls $d/device/net) $(cat $d/ports/1/gid_attrs/types/3"
        " 2>/dev/null | tr ' ' _) $(cat $d/ports/1/gids/3 2>/dev/null); done"
    )
    worker = lab.nodes[1]
    for node in lab.nodes:
        async with ssh_to(lab, node) as conn:
            r = await conn.run(detect, check=True)
            octets = node.fabric_ip.split(".")
            gid = "0000:0000:0000:0000:0000:ffff:{:02x}{:02x}:{:02x}{:02x}".format(
                *map(int, octets)
            )
            assert sorted(r.stdout.splitlines()) == sorted(
                [
                    "rocep1s0f0 1: DOWN Ethernet enp1s0f0np0",
                    f"rocep1s0f1 4: ACTIVE Ethernet enp1s0f1np1 RoCE_v2 {gid}",
                    "roceP2p1s0f0 1: DOWN Ethernet enP2p1s0f0np0",
                    "roceP2p1s0f1 4: ACTIVE Ethernet enP2p1s0f1np1",
                ]
            ), r.stdout
            r = await conn.run(
                f"cat /sys/class/net/{T.FABRIC_IFNAME}/operstate; ls /sys/class/block | wc -l;"
                " ls /sys/class/net",
                check=True,
            )
            operstate, block_devices, *netdevs = r.stdout.split()
            assert operstate == "up" and int(block_devices) > 0, r.stdout
            assert sorted(netdevs) == sorted([T.MGMT_IFNAME, T.FABRIC_IFNAME, "lo"]), r.stdout
    api.set_fabric_link(worker.index, False)
    try:
        async with ssh_to(lab, worker) as conn:
            r = await conn.run(
                "cat /sys/class/infiniband/rocep1s0f1/ports/1/state; ibdev2netdev", check=True
            )
            assert r.stdout.splitlines()[:3] == [
                "1: DOWN",
                "rocep1s0f0 port 1 ==> enp1s0f0np0 (Down)",
                "rocep1s0f1 port 1 ==> enp1s0f1np1 (Down)",
            ], r.stdout
    finally:
        api.set_fabric_link(worker.index, True)
    async with ssh_to(lab, worker) as conn:
        r = await conn.run("cat /sys/class/infiniband/rocep1s0f1/ports/1/state", check=True)
        assert r.stdout == "4: ACTIVE\n"
