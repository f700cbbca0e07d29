"""SSH with host-key checking, interfaces, fabric reachability, status, preflight."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import asyncssh
import pytest

from lab import api
from lab import topology as T

from .helpers import connect, ssh_to

pytestmark = pytest.mark.lab


async def test_ssh_every_node_checks_host_key(lab):
    for node in lab.nodes:
        async with await connect(lab, node) as conn:
            r = await conn.run("echo $DOCKER_HOST; echo $PATH; id -u", check=True)
            docker_host, path, uid = r.stdout.split("\n")[:3]
            assert docker_host == node.docker_host
            assert path.split(":").count(node.bin_dir) == 1
            assert uid == "0"
            r = await conn.run("command -v nvidia-smi ibdev2netdev docker", check=True)
            assert f"{node.bin_dir}/nvidia-smi" in r.stdout


async def test_wrong_known_hosts_is_refused(lab, tmp_path):
    other = asyncssh.generate_private_key("ssh-ed25519")
    bad = tmp_path / "known_hosts"
    bad.write_text(f"{lab.head.mgmt_ip} {other.export_public_key().decode()}")
    with pytest.raises((asyncssh.HostKeyNotVerifiable, asyncssh.DisconnectError)):
        await connect(lab, lab.head, known_hosts=str(bad))
    # an unknown host (empty known_hosts) is refused as well
    empty = tmp_path / "empty"
    empty.write_text("")
    with pytest.raises((asyncssh.HostKeyNotVerifiable, asyncssh.DisconnectError)):
        await connect(lab, lab.nodes[1], known_hosts=str(empty))


def test_known_hosts_lists_mgmt_and_fabric_ips(lab):
    text = Path(lab.known_hosts_path).read_text()
    for node in lab.nodes:
        line = next(l for l in text.splitlines() if node.fabric_ip in l.split()[0].split(","))
        assert node.mgmt_ip in line.split()[0].split(",")


async def test_interfaces_inside_each_node(lab):
    for node in lab.nodes:
        async with ssh_to(lab, node) as conn:
            r = await conn.run("ip -o -4 addr show", check=True)
            lines = r.stdout.splitlines()
            assert any(l.split()[1] == "lo" and "127.0.0.1/8" in l for l in lines), r.stdout
            assert any(
                l.split()[1] == T.MGMT_IFNAME and f"{node.mgmt_ip}/24" in l for l in lines
            ), r.stdout
            assert any(
                l.split()[1] == T.FABRIC_IFNAME and f"{node.fabric_ip}/24" in l for l in lines
            ), r.stdout
            assert len([l for l in lines if "inet " in l]) == 3, r.stdout


async def test_fabric_reachability_between_nodes(lab):
    head, worker = lab.nodes[0], lab.nodes[1]
    async with ssh_to(lab, head) as conn:
        r = await conn.run(
            f"timeout 5 bash -c 'exec 3<>/dev/tcp/{worker.fabric_ip}/22 && head -c 8 <&3'"
        )
        assert r.exit_status == 0 and r.stdout.startswith("SSH-2.0"), (r.stdout, r.stderr)
        py = (
            f"import socket;s=socket.create_connection(('{worker.fabric_ip}',22),3);"
            "print(s.getsockname()[0], s.recv(8).decode())"
        )
        r = await conn.run(f'python3 -c "{py}"', check=True)
        src, banner = r.stdout.split()
        assert src == head.fabric_ip and banner.startswith("SSH-2.0")


def test_status_all_good(lab):
    rep = api.status()
    assert rep["ok"], rep
    for _n, entry in zip(lab.nodes, rep["nodes"], strict=True):
        assert entry["dockerd_version"]
        assert entry["image_id"] == lab.image_id
    p = subprocess.run(
        [sys.executable, "-m", "lab", "status"],
        capture_output=True,
        text=True,
        cwd=os.path.dirname(os.path.dirname(os.path.dirname(__file__))),
    )
    assert p.returncode == 0, p.stdout + p.stderr


def test_warm_up_is_fast(lab):
    import time

    t = time.monotonic()
    api.lab_up(nodes=2)
    assert time.monotonic() - t < 3


def test_not_root_exits_2():
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    code = f"import sys; sys.path.insert(0, {repo!r}); from lab.__main__ import main; sys.exit(main(['up']))"
    p = subprocess.run(
        [
            "setpriv",
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "/usr/bin/python3",
            "-c",
            code,
        ],
        capture_output=True,
        text=True,
        cwd="/",
    )
    assert p.returncode == 2, (p.returncode, p.stderr)
    assert "root" in p.stderr


def test_missing_system_tool_says_what_to_install(monkeypatch):
    from lab import preflight
    from lab.errors import LabError

    monkeypatch.setitem(preflight.REQUIRED, "no-such-dockerd", "docker.io")
    with pytest.raises(LabError) as e:
        preflight.check()
    assert e.value.exit_code == 2
    assert "apt-get install -y docker.io" in str(e.value) and "bootstrap.sh" in str(e.value)
