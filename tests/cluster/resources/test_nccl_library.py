"""Which libnccl each node's ranks load (issue 25, item 3): the answer of the image, the nodes
compared, NCCL's own lines per rank, and the first suspect of a collective timeout."""

from __future__ import annotations

import subprocess
import sys
from datetime import UTC, datetime
from typing import Any

from bot.config import load_config
from cluster.diagnosis.engine import LogDiagnoser
from cluster.events import CheckpointPassed
from cluster.logs.container_stream import LogLine
from cluster.nodes import CommandResult
from cluster.resources.nccl_library import (
    ARGV,
    MARK,
    Library,
    NcclSeen,
    ask_node,
    differ,
    keep_launched,
    launched,
    parse,
    recorded,
    suspect_words,
)
from lab.emulator import nccl_lib
from testkit.lab_cluster import LAB_CONFIG, FakeNode

WATCHDOG = (
    "[rank1]:[E1204 22:10:01.000000000 ProcessGroupNCCL.cpp:683] [Rank 1] Watchdog caught "
    "collective operation timeout: WorkNCCL(SeqNum=12590, OpType=_ALLGATHER_BASE, "
    "NumelIn=1404928, NumelOut=2809856, Timeout(ms)=600000) ran for 600060 milliseconds "
    "before timing out."
)


def library(path: str, sha: str, version: str = "2.28.9+cuda13.0") -> Library:
    return Library(path=path, sha256=sha * 64, size=1, version=version)


def test_the_image_is_asked_as_vllm_loads_it(tmp_path):
    lib = tmp_path / "libnccl.so.2"
    nccl_lib.make(str(lib), "2.28.9", "a")
    env = {"VLLM_NCCL_SO_PATH": str(lib), "PATH": "/usr/bin:/bin"}
    run = subprocess.run(
        [sys.executable if ARGV[0] == "python3" else ARGV[0], *ARGV[1:]],
        capture_output=True, text=True, env=env, timeout=60, check=True,
    )  # fmt: skip
    answer = parse(run.stdout)
    assert isinstance(answer, Library), answer
    assert answer.path == str(lib) and answer.version == "2.28.9+cuda13.0"
    assert answer.sha256 is not None and len(answer.sha256) == 64
    assert answer.describe().startswith(f"{lib} (NCCL 2.28.9+cuda13.0, sha256 ")


def test_nothing_loaded_says_why():
    run = subprocess.run(
        [sys.executable, *ARGV[1:]],
        capture_output=True, text=True, timeout=60, check=True,
        env={"VLLM_NCCL_SO_PATH": "/nowhere/libnccl.so.2", "PATH": "/usr/bin:/bin"},
    )  # fmt: skip
    answer = parse(run.stdout)
    assert isinstance(answer, Library) and answer.path is None
    assert answer.describe().startswith("no NCCL loaded (/nowhere/libnccl.so.2")


def test_an_image_without_python_is_said_in_words():
    assert parse("exec: python3: not found").startswith("the image printed no answer")


def test_two_builds_of_one_version_differ_the_same_file_does_not():
    same = {"a": library("/x/libnccl.so.2", "1"), "b": library("/x/libnccl.so.2", "1")}
    assert differ(same) is None
    mixed = {"a": library("/pip/libnccl.so.2", "1"), "b": library("/usr/libnccl.so.2", "2")}
    found = differ(mixed)
    assert found is not None and "(the same version, different binaries)" in found
    assert "a loads /pip/libnccl.so.2 (NCCL 2.28.9+cuda13.0, sha256 1111" in found
    versions = {"a": library("/x", "1"), "b": library("/x", "2", "2.29.3+cuda13.0")}
    assert "(different versions)" in (differ(versions) or "")
    assert differ({"a": library("/x", "1"), "b": Library(load_error="gone")}) is None


def line(node: str, text: str) -> LogLine:
    return LogLine(node, text, datetime.now(UTC))


def test_each_ranks_own_lines_are_recorded_and_compared():
    seen = NcclSeen()
    seen.observe(line("head", "head:89:89 [0] NCCL INFO NCCL version 2.28.9+cuda13.0"))
    seen.observe(line("worker", "NCCL version 2.28.9+cuda13.0"))  # before 2.22.3: bare
    seen.observe(line("worker", "(Worker pid=3) INFO [pynccl.py:148] vLLM is using nccl==2.28.9"))
    assert seen.by_rank == {"head": "2.28.9+cuda13.0", "worker": "2.28.9+cuda13.0"}
    assert seen.differ() is None
    seen.observe(line("head", "head:89:89 [0] NCCL INFO NCCL git version master v2.29.2-1"))
    seen.observe(line("head", "head:90:90 [0] NCCL INFO NCCL version 2.28.9+cuda13.0"))
    assert seen.by_rank["head"] == "2.28.9+cuda13.0, master v2.29.2-1", "each said once"
    assert "head: NCCL 2.28.9+cuda13.0, master v2.29.2-1" in (seen.differ() or "")


def test_the_nccl_checkpoint_names_each_nodes_file_and_warns_of_a_mismatch():
    passed = CheckpointPassed(elapsed_s=1, checkpoint="nccl", title="NCCL", evidence="via NET/IB")
    libraries = {"a": library("/pip/libnccl.so.2", "1"), "b": library("/usr/libnccl.so.2", "2")}
    seen = NcclSeen()
    out = recorded(passed, seen, libraries, differ(libraries))
    assert "a loads /pip/libnccl.so.2 (NCCL 2.28.9+cuda13.0" in out.evidence
    assert out.warning and "different NCCL libraries" in out.warning
    same = {"a": library("/x", "1"), "b": library("/x", "1")}
    assert recorded(passed, seen, same, differ(same)).warning is None


def test_a_collective_timeout_names_a_recorded_mismatch_first():
    plain = LogDiagnoser()
    assert plain.feed(WATCHDOG) is not None
    assert "first suspect" not in (plain.diagnosis.cause if plain.diagnosis else "")
    mismatch = differ({"a": library("/pip/x", "1"), "b": library("/usr/x", "2")})
    assert mismatch is not None
    told = LogDiagnoser()
    told.learn(suspect_words(mismatch))
    told.feed("NCCL version 2.28.3+cuda13.0 on aarch64")  # what the log shows loses to it
    diagnosis = told.feed(WATCHDOG)
    assert diagnosis is not None and diagnosis.signature_id == "nccl_watchdog_timeout"
    assert diagnosis.cause.startswith(
        "The watchdog killed the process: the ranks load different NCCL libraries"
    )
    assert "the first suspect (operators saw collectives wedge under load" in diagnosis.cause
    assert "the same libnccl.so.2" in diagnosis.fix


CONFIG = load_config(LAB_CONFIG).cluster
IMAGE_ID = "sha256:" + "d" * 64


class CheckDocker:
    """Runs no container: answers the NCCL check with `answer`, keeps the bodies it was given."""

    def __init__(self, answer: Library):
        self.answer, self.bodies = answer, []

    async def run_to_end(self, body: dict[str, Any], name: str, *, timeout: float):
        self.bodies.append(body)
        return 0, MARK + self.answer.model_dump_json() + "\n"


def node(answer: Library, files: dict[str, str] | None = None) -> FakeNode:
    commands = {"sh": CommandResult(0, "", ""), "printenv": CommandResult(0, "/root\n", "")}
    return FakeNode(CONFIG.nodes[0].name, files or {}, commands, CheckDocker(answer))


async def test_the_images_own_nccl_is_kept_a_mounted_one_asked_every_time():
    mount = CONFIG.container.mounts[0]
    own = node(library("/usr/lib/libnccl.so.2", "1"))
    known: dict[str, Library] = {}
    answer, how = await ask_node(CONFIG, own, "/root", IMAGE_ID, known)
    assert how == "asked" and isinstance(answer, Library) and len(known) == 1
    [body] = own.docker.bodies
    assert body["Cmd"] == ARGV and body["HostConfig"]["Binds"] == [
        f"{mount.source}:{mount.target}:ro"
    ], "the launch's mounts, read-only"
    [write] = own.ran
    assert list(write[:2]) == ["sh", "-c"] and write[-1] == answer.model_dump_json()
    again, how = await ask_node(CONFIG, own, "/root", IMAGE_ID, known)
    assert again == answer and how == "remembered from an earlier preflight"

    mounted, known = node(library(f"{mount.target}/libnccl.so.2", "2")), {}
    for _ in range(2):
        _, how = await ask_node(CONFIG, mounted, "/root", IMAGE_ID, known)
        assert how == "asked"
    assert len(mounted.docker.bodies) == 2 and mounted.ran == [], "never kept"


async def test_a_launchs_answers_are_left_on_each_node_for_its_watch():
    answer = library("/usr/lib/libnccl.so.2", "1")
    head = node(answer)
    await keep_launched(CONFIG, [head], {head.name: "/root"}, {head.name: answer})
    [write] = head.ran
    folder, name, text = write[4:]
    assert (
        f"{folder}/{name}" == f"/root/.cache/spark-bot/nccl/launched-{CONFIG.container.name}.json"
    )
    read = node(answer, {f"{folder}/{name}": text})
    assert await launched(CONFIG, [read]) == {read.name: answer}
    assert await launched(CONFIG, [node(answer)]) == {}, "no launch's answer: nothing known"

    fresh = node(answer)
    await keep_launched(CONFIG, [fresh], {fresh.name: "/root"}, {})
    assert Library.model_validate_json(fresh.ran[0][-1]).path is None, (
        "a launch that asked nothing leaves no earlier launch's answer standing"
    )
