"""The diagnostics bundle (cluster/operations/diag_bundle.py) over scripted nodes: every node's files, a missing
tool or a hung command recorded and not fatal, an unreachable node named, and no planted secret
in any file of the archive."""

from __future__ import annotations

import asyncio
import io
import json
import tarfile
from collections.abc import Sequence
from typing import Any

from bot.config import load_config
from cluster.config import Secrets
from cluster.errors import FileUnreadable, NodeTimedOut, NodeUnreachable
from cluster.nodes import ClusterConnection
from cluster.nodes.base import READ_LIMIT, CommandResult, NodeConnection
from cluster.operations.diag_bundle import NODE_COMMANDS, collect
from testkit.lab_cluster import LAB_CONFIG
from testkit.planted_secrets import HF_TOKEN, SLACK_BOT_TOKEN, planted_in

API_KEY = "sk-PlantedApiKeyForTheDiagBundle0123456789"


class ScriptedDocker:
    def __init__(self, node: str, log: str):
        self.node, self.log = node, log

    async def find_container(self, name: str) -> dict[str, Any]:
        return {
            "Id": "c0ffee" * 10,
            "Image": "sha256:" + "ab" * 32,
            "State": {"Running": True, "Status": "running"},
            "Config": {
                "Env": [f"HF_TOKEN={HF_TOKEN}", f"VLLM_API_KEY={API_KEY}", "VLLM_HOST_IP=10.0.0.1"],
                "Labels": {},
            },
        }

    async def image_id(self, reference: str) -> str:
        return "sha256:" + "ab" * 32

    async def log_tail(self, name: str, lines: int) -> str:
        return self.log

    async def exec_output(self, name: str, argv: list[str], *, timeout: float) -> str:
        return {"ray": "Active:\n 1 node_a\n 1 node_b\n", "vllm": "0.32.0"}[argv[0]]


class ScriptedNode(NodeConnection):
    """Answers each argv from `answers` (by its first word); absent: not installed (127)."""

    def __init__(self, config: Any, answers: dict[str, Any], log: str, started: asyncio.Event):
        super().__init__(config, ScriptedDocker(config.name, log), 0.0)  # type: ignore[arg-type]
        self.answers, self.started, self.running = answers, started, 0

    async def run(self, argv: Sequence[str], *, timeout: float) -> CommandResult:
        self.running += 1
        if self.running == len(NODE_COMMANDS):
            self.started.set()  # every command of this node is in flight at once
        await self.started.wait()
        answer = self.answers.get(argv[0])
        if answer is None:
            return CommandResult(127, "", f"{argv[0]}: command not found")
        if isinstance(answer, Exception):
            raise answer
        return CommandResult(0, answer, "")

    async def read_file(self, path: str, *, timeout: float, limit: int = READ_LIMIT) -> str:
        raise FileUnreadable(self.name, f"cannot read {path}", "the double reads no file")

    async def read_bytes(self, path: str, *, timeout: float, offset: int, length: int):
        raise FileUnreadable(self.name, f"cannot read {path}", "the double reads no file")

    async def api_base_url(self, port: int) -> str:
        return "http://127.0.0.1:9"  # nothing answers: the version comes from the container

    async def stream(self, argv: Sequence[str], *, timeout: float):
        raise AssertionError("the double streams no command")
        yield ""

    async def aclose(self) -> None:
        pass


async def test_every_nodes_files_missing_tools_and_no_secret_in_the_archive(tmp_path):
    base = load_config(LAB_CONFIG).cluster
    config = base.model_copy(
        update={
            "container": base.container.model_copy(update={"secret_env": {"HF_TOKEN": "HF"}}),
            "serve": base.serve.model_copy(update={"backend": "ray"}),
        }
    )
    head, worker = config.nodes[0], config.nodes[1]
    link = "3: enp1s0f1np1: <BROADCAST,MULTICAST,UP,LOWER_UP> mtu 9000 qdisc mq state UP mode"
    answers = {
        "ip": f"3: enp1s0f1np1    inet {head.fabric_ip}/24 scope global\n{link}\n",
        "cat": f"MemAvailable: 100 kB\nplanted {SLACK_BOT_TOKEN}\n",
        "date": "2026-12-01T12:00:00.000000000Z\n",
        "uname": "Linux spark 6.8.0\n",
        "ibdev2netdev": "rocep1s0f1 port 1 ==> enp1s0f1np1 (Up)\n",
        # no nvidia-smi on these nodes: recorded as missing
    }
    slow = {
        **answers,
        "ip": f"3: enp1s0f1np1    inet {worker.fabric_ip}/24\n"
        + link.replace("UP mode", "DOWN mode"),
        "uname": NodeTimedOut(worker.name, "`uname` did not finish within 1 s", ""),
    }
    log = f"INFO starting\nINFO token={HF_TOKEN}\nINFO key {API_KEY}\n"
    connection = ClusterConnection(config)
    connection.nodes[head.name] = ScriptedNode(head, answers, log, asyncio.Event())
    connection.nodes[worker.name] = ScriptedNode(worker, slow, log, asyncio.Event())
    if len(config.nodes) > 2:
        for extra in config.nodes[2:]:
            connection.errors[extra.name] = NodeUnreachable(extra.name, "no route", "")
    secrets = Secrets({"HF_TOKEN": HF_TOKEN, "VLLM_API_KEY": API_KEY})
    events = [json.dumps({"kind": "progress", "message": f"pasted {HF_TOKEN}"})]

    result = await asyncio.wait_for(
        collect(config, secrets, connection, events=events, events_note="job #7"), 10
    )

    with tarfile.open(fileobj=io.BytesIO(result.archive), mode="r:gz") as archive:
        members = archive.getmembers()
        texts = {m.name.split("/", 1)[1]: archive.extractfile(m).read().decode() for m in members}
    assert members[0].name.endswith("/SUMMARY.txt")
    for node in (head.name, worker.name):
        for file in (
            "container.log",
            "docker-inspect.json",
            "image.txt",
            "ip-addr.txt",
            "ip-link.txt",
            "meminfo.txt",
            "ibdev2netdev.txt",
            "date.txt",
        ):
            assert f"nodes/{node}/{file}" in texts, (node, file)
        assert f"nodes/{node}/nvidia-smi.txt" not in texts
    assert f"nodes/{head.name}/ray-status.txt" in texts and "0.32.0" in texts["vllm-version.txt"]
    assert "config.json" in texts and "events.jsonl" in texts
    summary = texts["SUMMARY.txt"]
    assert f"nodes/{head.name}/nvidia-smi.txt  (missing: `nvidia-smi` is not installed" in summary
    assert f"nodes/{worker.name}/uname.txt  (timed out after" in summary
    assert f"nodes/{head.name}/uname.txt" in summary and "job #7" in summary
    assert f"{head.name}: fabric {head.fabric_ip} on enp1s0f1np1, link state UP" in summary
    assert f"{worker.name}: fabric {worker.fabric_ip} on enp1s0f1np1, link state DOWN" in summary
    assert any("nvidia-smi" in p for p in result.problems)
    # the planted secrets were in the log, the inspect's environment, a command's output and the
    # job's events: none is in any file
    for name, text in texts.items():
        assert not planted_in(text) and API_KEY not in text, name
    inspect = json.loads(texts[f"nodes/{head.name}/docker-inspect.json"])
    assert (
        "HF_TOKEN=***" in inspect["Config"]["Env"]
        and "VLLM_HOST_IP=10.0.0.1" in inspect["Config"]["Env"]
    )
