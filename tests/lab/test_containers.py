"""Containers on each node's engine through an SSH-forwarded Docker socket (aiodocker),
then Ray across two containers and a TP=2 `vllm serve` by hand."""

from __future__ import annotations

import asyncio
import json
import re

import aiohttp
import pytest

from lab import topology as T

from .helpers import (
    EMULATOR_READY,
    docker_over_ssh,
    exec_detached,
    exec_out,
    run_container,
    ssh_to,
    wait_log_line,
)

pytestmark = pytest.mark.lab


async def _probe_node(lab, node):
    async with ssh_to(lab, node) as conn, docker_over_ssh(conn, node) as docker:
        script = (
            "ip -o -4 addr show; echo IBDEV-BEGIN; ibdev2netdev || echo IBDEV-FAILED; "
            "echo IBDEV-END; echo LAB-READY; sleep 30"
        )
        c = await run_container(
            docker, lab.image_tag, ["sh", "-c", script], f"lab-probe-{node.index}"
        )
        try:
            lines = await wait_log_line(docker, c, "LAB-READY", timeout=30)
            info = await c.show()
            assert info["HostConfig"]["NetworkMode"] == "host"
            assert info["Image"] == lab.image_id
        finally:
            await c.delete(force=True)
        return lines


async def test_container_on_every_node_via_forwarded_socket(lab):
    results = await asyncio.gather(*(_probe_node(lab, n) for n in lab.nodes))
    for node, lines in zip(lab.nodes, results, strict=True):
        text = "\n".join(lines)
        # host network: the container sees its node's namespace
        assert re.search(rf"{T.FABRIC_IFNAME}\s+inet {re.escape(node.fabric_ip)}/24", text), text
        assert f"{T.MGMT_IFNAME}" in text
        if EMULATOR_READY:
            ib = text.split("IBDEV-BEGIN", 1)[1].split("IBDEV-END", 1)[0]
            assert re.search(rf"==> {T.FABRIC_IFNAME} \(Up\)", ib), ib


@pytest.mark.skipif(not EMULATOR_READY, reason="the emulator (lab/emulator) has not landed yet")
async def test_ray_cluster_and_vllm_tp2_by_hand(lab):
    head, worker = lab.nodes[0], lab.nodes[1]

    def env(node):
        return {
            "VLLM_HOST_IP": node.fabric_ip,
            "RAY_NODE_IP_ADDRESS": node.fabric_ip,
            "NCCL_SOCKET_IFNAME": T.FABRIC_IFNAME,
            "GLOO_SOCKET_IFNAME": T.FABRIC_IFNAME,
            "SPARK_EMU_TIME_SCALE": "0.02",
        }  # the emulator's simulated durations, scaled

    async with (
        ssh_to(lab, head) as hconn,
        ssh_to(lab, worker) as wconn,
        docker_over_ssh(hconn, head) as hd,
        docker_over_ssh(wconn, worker) as wd,
    ):
        hc = await run_container(
            hd, lab.image_tag, ["sleep", "infinity"], "lab-vllm-head", env(head)
        )
        wc = await run_container(
            wd, lab.image_tag, ["sleep", "infinity"], "lab-vllm-worker", env(worker)
        )
        try:
            await exec_detached(
                hc,
                [
                    "sh",
                    "-c",
                    "ray start --block --head --port 6379 "
                    f"--node-ip-address {head.fabric_ip} > /tmp/ray.log 2>&1",
                ],
            )
            await asyncio.sleep(1)
            await exec_detached(
                wc,
                [
                    "sh",
                    "-c",
                    f"ray start --block --address={head.fabric_ip}:6379 "
                    f"--node-ip-address {worker.fabric_ip} > /tmp/ray.log 2>&1",
                ],
            )
            status = ""
            for _ in range(60):
                code, status = await exec_out(hc, ["ray", "status"], timeout=20)
                if code == 0 and "0.0/2.0 GPU" in status and len(re.findall(r"node_", status)) >= 2:
                    break
                await asyncio.sleep(0.5)
            if "0.0/2.0 GPU" not in status:
                _, hlog = await exec_out(hc, ["cat", "/tmp/ray.log"])
                _, wlog = await exec_out(wc, ["cat", "/tmp/ray.log"])
                raise AssertionError(f"ray status:\n{status}\nhead:\n{hlog}\nworker:\n{wlog}")
            assert len(re.findall(r"node_", status)) >= 2, status

            await exec_detached(
                hc,
                [
                    "sh",
                    "-c",
                    "vllm serve lab/model --tensor-parallel-size 2 --distributed-executor-backend ray "
                    "--host 0.0.0.0 --port 8000 > /tmp/vllm.log 2>&1",
                ],
            )
            log = ""
            for _ in range(240):
                _, log = await exec_out(hc, ["cat", "/tmp/vllm.log"])
                if "Application startup complete." in log:
                    break
                await asyncio.sleep(0.5)
            assert "Application startup complete." in log, log[-3000:]

            # the served model id, then a streamed chat completion at the head's mgmt IP
            base = f"http://{head.mgmt_ip}:8000"
            async with aiohttp.ClientSession() as s:
                async with s.get(f"{base}/v1/models") as r:
                    assert r.status == 200
                    model = (await r.json())["data"][0]["id"]
                body = {
                    "model": model,
                    "stream": True,
                    "max_tokens": 16,
                    "messages": [{"role": "user", "content": "Say hello."}],
                }
                text, done = "", False
                async with s.post(
                    f"{base}/v1/chat/completions",
                    json=body,
                    timeout=aiohttp.ClientTimeout(total=60),
                ) as r:
                    assert r.status == 200, await r.text()
                    async for raw in r.content:
                        line = raw.decode().strip()
                        if not line.startswith("data:"):
                            continue
                        data = line[5:].strip()
                        if data == "[DONE]":
                            done = True
                            break
                        delta = json.loads(data)["choices"][0].get("delta", {})
                        text += delta.get("content") or delta.get("reasoning_content") or ""
                assert done and text, text
        finally:
            await hc.delete(force=True)
            await wc.delete(force=True)
