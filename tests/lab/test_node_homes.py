"""Each node is a machine of its own on disk and to the others: its own /root (so its own SSH
files and Hugging Face cache) and /tmp, seen alike by its SSH sessions and its containers, and SSH
trust between the nodes with checked host keys, as on a real pair."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from bot.config import load_config
from lab import api

from .helpers import bot_container, docker_over_ssh, exec_out, ssh_to

pytestmark = pytest.mark.lab

LAB_CONFIG = Path(__file__).resolve().parents[2] / "configs" / "lab.yaml"
PROBE_MODEL = "spark-lab/homes-probe"


async def test_a_file_in_one_nodes_home_or_tmp_is_in_no_other_home_nor_on_the_host(lab):
    name = f"homes-{uuid.uuid4().hex[:8]}"
    head, worker = lab.nodes[0], lab.nodes[1]
    try:
        async with ssh_to(lab, head) as conn:
            r = await conn.run(f"cd && pwd && echo head > {name} && echo head > /tmp/{name}")
            assert r.exit_status == 0 and r.stdout.strip() == "/root", r.stderr
        assert (Path(head.home) / name).read_text() == "head\n"
        assert not Path("/root", name).exists() and not Path("/tmp", name).exists()
        async with ssh_to(lab, worker) as conn:
            r = await conn.run(f"ls /root/{name} /tmp/{name}")
            assert r.exit_status != 0 and r.stdout == "", r.stdout
    finally:
        (Path(head.home) / name).unlink(missing_ok=True)
    status = api.status()
    assert all(entry["own_home"] for entry in status["nodes"]), status


async def test_a_container_sees_its_own_nodes_cache_through_the_configs_mount(lab):
    """configs/lab.yaml mounts /root/.cache/huggingface: on each node, that node's cache, the one
    its SSH sessions see (the worker here has a partial download of the model, the head all)."""
    config = load_config(LAB_CONFIG).cluster
    head, worker = lab.nodes[0], lab.nodes[1]
    complete = api.put_model(head.index, PROBE_MODEL)
    partial = api.put_model(worker.index, PROBE_MODEL, missing=[2])
    snapshot = (
        f"/root/.cache/huggingface/hub/models--spark-lab--homes-probe/snapshots/{complete.commit}"
    )
    try:
        for node, model in ((head, complete), (worker, partial)):
            async with ssh_to(lab, node) as conn, docker_over_ssh(conn, node) as docker:
                await conn.run(
                    f"echo {node.name} > ~/.cache/huggingface/written-by-ssh", check=True
                )
                c = await bot_container(
                    docker, config, node.index, ["sleep", "infinity"], {}, "homes"
                )
                try:
                    code, out = await exec_out(
                        c, f"ls {snapshot}; cat /root/.cache/huggingface/written-by-ssh"
                    )
                finally:
                    await c.delete(force=True)
            present = [n for n, state in model.shards.items() if state == "complete"]
            files = sorted(["config.json", "model.safetensors.index.json", *present])
            assert out.split() == [*files, node.name], out
            assert code == 0
    finally:
        for node in (head, worker):
            api.remove_model(node.index, PROBE_MODEL)
            (Path(node.hf_cache) / "written-by-ssh").unlink(missing_ok=True)


async def test_the_head_ssh_es_to_the_worker_with_checked_host_keys(lab):
    """As launch scripts do: root's own key, the worker's host key already known under its fabric
    IP, management IP and hostname; an unknown host key is refused."""
    head, worker = lab.nodes[0], lab.nodes[1]
    strict = "ssh -o StrictHostKeyChecking=yes -o BatchMode=yes -o ConnectTimeout=5"
    async with ssh_to(lab, head) as conn:
        for name in (worker.fabric_ip, worker.mgmt_ip, worker.name):
            r = await conn.run(f"{strict} {name} hostname")
            assert (r.exit_status, r.stdout.strip()) == (0, worker.name), (name, r.stderr)
        r = await conn.run(f"{strict} -o UserKnownHostsFile=/dev/null {worker.fabric_ip} true")
        assert r.exit_status == 255 and "Host key verification failed" in r.stderr, r.stderr
    async with ssh_to(lab, worker) as conn:
        r = await conn.run(f"{strict} {head.fabric_ip} hostname")
        assert (r.exit_status, r.stdout.strip()) == (0, head.name), r.stderr
