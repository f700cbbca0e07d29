"""The same NCCL on every rank: the libnccl each node's container loads, asked before the load.

Operators of Spark pairs found the pip wheel's NCCL and the system's reporting one version while
being different builds, and collectives wedging under load until every rank loaded the same one
(vllm-project/vllm#42354, #41725: both 2.28.9, different Build IDs). NCCL's INFO lines say the
version and never the file (NVIDIA/nccl src/init.cc showVersion, src/debug.cc), and vLLM names
only what it hands dlopen (vllm/utils/nccl.py find_nccl_library, 0.32.0: VLLM_NCCL_SO_PATH, else
`libnccl.so.2` at DEBUG). So each node is asked in a throw-away container with the launch's
image, environment and mounts (read-only): ASK loads the library as vLLM does (`import torch`
first: its CUDA build links libnccl.so.2, which dlopen of that name then returns), and prints
the file the process mapped, its sha256 and the version string NCCL builds into it (`NCCL
version 2.28.9+cuda13.0`, kept whole "so that running strings on the lib can quickly reveal
the version", init.cc) and, from 2.29.2, its `NCCL git version` string.

An answer is kept per image ID, environment and mounts like gpu_arch's (memory and the node's
disk), unless the file lies under a mount: the node's own files change without the image. What
a launch's preflight found is also left on each node (`keep_launched`), so that the watch of its
containers, in this process or another (the bot's next job, the CLI), knows the mismatch.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import re
from collections.abc import Mapping

from pydantic import BaseModel, ConfigDict, ValidationError

from cluster.config import ClusterConfig
from cluster.errors import NodeError
from cluster.events import CheckpointPassed
from cluster.logs.container_stream import LogLine
from cluster.logs.logtext import strip_prefixes
from cluster.nodes import NodeConnection, node_home
from cluster.operations.launch_lease import FOLDER as LEASE_FOLDER
from cluster.progress.checkpoint_follower import rank_label
from cluster.resources.gpu_arch import answer_key, keep_on_node
from cluster.serving.containers import throwaway_body

MARK = "spark-bot-nccl "
# Fixed code, no value of the config in it.
ASK = f"""
import ctypes, hashlib, json, os, re
out = {{}}
name = os.environ.get("VLLM_NCCL_SO_PATH") or "libnccl.so.2"
out["asked"] = name
try:
    import torch
except Exception as e:
    out["torch_error"] = f"{{type(e).__name__}}: {{e}}"[:300]
try:
    ctypes.CDLL(name)
except OSError as e:
    out["load_error"] = str(e)[:300]
loaded = []
with open("/proc/self/maps") as maps:
    for line in maps:
        parts = line.split(None, 5)
        if len(parts) == 6 and os.path.basename(parts[5].strip()).startswith("libnccl.so"):
            path = os.path.realpath(parts[5].strip())
            if path not in loaded:
                loaded.append(path)
want = os.path.realpath(name) if "/" in name else None
named = [p for p in loaded if os.path.basename(p) == name]  # a name dlopen searched for
path = want if want in loaded else (named or loaded or [None])[0]
out["loaded"] = loaded[:8]
if path:
    digest, version, git, tail = hashlib.sha256(), None, None, b""
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
            window = tail + chunk
            if version is None:
                m = re.search(rb"NCCL version (\\d+\\.\\d+\\.\\d+[\\w.-]*\\+cuda\\d+\\.\\d+)", window)
                version = m and m[1].decode()
            if git is None:
                m = re.search(rb"NCCL git version ([\\x21-\\x7e]+ [\\x21-\\x7e]+)", window)
                git = m and m[1].decode()
            tail = chunk[-256:]
    out.update(path=path, sha256=digest.hexdigest(), size=os.path.getsize(path))
    out.update(version=version, git=git)
print({MARK!r} + json.dumps(out), flush=True)
"""
ARGV = ["python3", "-c", ASK]
CHECK_CONTAINER_SUFFIX = "-nccl-check"
CACHE_FOLDER = f"{LEASE_FOLDER}/nccl"


class Library(BaseModel):
    """What ASK printed: the NCCL a rank on that node loads."""

    model_config = ConfigDict(frozen=True)

    asked: str = "libnccl.so.2"  # what vLLM hands dlopen
    path: str | None = None  # the file the process mapped; None: none loaded
    sha256: str | None = None
    size: int | None = None
    version: str | None = None  # "2.28.9+cuda13.0", from the file's own string
    git: str | None = None  # "master v2.29.2-1" (NCCL >= 2.29.2)
    loaded: list[str] = []
    load_error: str | None = None
    torch_error: str | None = None

    def describe(self) -> str:
        if self.path is None:
            why = self.load_error or self.torch_error or "nothing named libnccl was mapped"
            return f"no NCCL loaded ({why})"
        version = f"NCCL {self.version}" if self.version else "NCCL of an unknown version"
        git = f", {self.git}" if self.git else ""
        return f"{self.path} ({version}{git}, sha256 {(self.sha256 or '')[:16]}…)"


def parse(output: str) -> Library | str:
    """ASK's answer in a container's output; why not, in words."""
    line = next((ln for ln in reversed(output.splitlines()) if ln.startswith(MARK)), None)
    if line is None:
        tail = " | ".join(output.strip().splitlines()[-3:])[:300]
        return f"the image printed no answer (python3 missing?): {tail or 'no output'}"
    try:
        return Library.model_validate(json.loads(line[len(MARK) :]))
    except (ValueError, ValidationError) as error:
        return f"the image's answer is not what spark-bot asks for: {error}"


def differ(libraries: Mapping[str, Library]) -> str | None:
    """Why the nodes' ranks do not load the same NCCL (each node's file), None when they do
    (or fewer than two nodes said which they load)."""
    loaded = {node: lib for node, lib in libraries.items() if lib.path is not None}
    if len(loaded) < 2 or len({lib.sha256 for lib in loaded.values()}) == 1:
        return None
    versions = {lib.version for lib in loaded.values()}
    how = "the same version, different binaries" if len(versions) == 1 else "different versions"
    each = "; ".join(f"{node} loads {lib.describe()}" for node, lib in loaded.items())
    return f"the ranks load different NCCL libraries ({how}): {each}"


def suspect_words(mismatch: str) -> dict[str, str]:
    """The failure texts' `{nccl_hang}` and `{nccl_hang_fix}` once a mismatch was recorded: a
    collective that times out names it first."""
    return {
        "nccl_hang": f"{mismatch}, the first suspect (operators saw collectives wedge under "
        "load until every rank loaded the same libnccl, vllm-project/vllm#42354)",
        "nccl_hang_fix": "Make every node load the same libnccl.so.2 (the same file, sha256 "
        "equal): the same image without node-specific NCCL, or the same system NCCL on every "
        "node through VLLM_NCCL_SO_PATH / LD_PRELOAD and a mount; `spark-bot preflight` says "
        "which file each node loads; then relaunch.",
    }


async def ask_node(
    config: ClusterConfig,
    node: NodeConnection,
    home: str,
    image_id: str,
    known: dict[str, Library],
) -> tuple[Library | str, str]:
    """The library a rank on `node` loads (or why not), and how it was had: remembered, kept on
    the node, or asked in a throw-away container there (then kept, unless it comes from a
    mount)."""
    key = _key(config, image_id)
    remembered = known.get(f"{node.name}/{key}")
    if remembered is not None:
        return remembered, "remembered from an earlier preflight"
    cached = f"{home}/{CACHE_FOLDER}/{key}.json"
    with contextlib.suppress(NodeError, ValueError, ValidationError):
        text = await node.read_file(cached, timeout=config.timeouts.preflight)
        known[f"{node.name}/{key}"] = Library.model_validate_json(text)
        return known[f"{node.name}/{key}"], f"kept on {node.name} in ~/{CACHE_FOLDER}"
    status, output = await node.docker.run_to_end(
        throwaway_body(config, ARGV, mounts_home=home),
        config.container.name + CHECK_CONTAINER_SUFFIX,
        timeout=config.timeouts.preflight,
    )
    answer = parse(output)
    if isinstance(answer, str):
        return f"{answer} (exit {status})", "asked"
    if answer.path is not None and not _under_a_mount(config, answer.path):
        known[f"{node.name}/{key}"] = answer
        await keep_on_node(node, cached, answer.model_dump_json(), config.timeouts.preflight)
    return answer, "asked"


def _launched_file(config: ClusterConfig, home: str) -> str:
    return f"{home}/{CACHE_FOLDER}/launched-{config.container.name}.json"


async def keep_launched(
    config: ClusterConfig, nodes: list[NodeConnection], homes: Mapping[str, str],
    libraries: Mapping[str, Library],
) -> None:  # fmt: skip
    """Each node's answer beside the containers this launch starts there (best effort); a node
    not asked gets an empty one, so that no earlier launch's answer stands for this one's."""
    unknown = Library(load_error="not asked by the launch's preflight")
    await asyncio.gather(
        *(
            keep_on_node(
                node,
                _launched_file(config, homes[node.name]),
                libraries.get(node.name, unknown).model_dump_json(),
                config.timeouts.preflight,
            )
            for node in nodes
            if node.name in homes
        )
    )


async def launched(config: ClusterConfig, nodes: list[NodeConnection]) -> dict[str, Library]:
    """What the last launch's preflight found on each node (nodes without an answer left out)."""

    async def read(node: NodeConnection) -> Library | None:
        with contextlib.suppress(NodeError, ValueError, ValidationError):
            home = await node_home(node, config.timeouts.preflight)
            text = await node.read_file(
                _launched_file(config, home), timeout=config.timeouts.preflight
            )
            return Library.model_validate_json(text)
        return None

    found = await asyncio.gather(*(read(node) for node in nodes))
    return {node.name: lib for node, lib in zip(nodes, found, strict=True) if lib is not None}


def _under_a_mount(config: ClusterConfig, path: str) -> bool:
    return any(
        path == m.target or path.startswith(m.target.rstrip("/") + "/")
        for m in config.container.mounts
    )


def _key(config: ClusterConfig, image_id: str) -> str:
    """gpu_arch's key (the image ID, the environment) and the mounts' (they can shadow the
    image's files)."""
    mounts = json.dumps([m.model_dump() for m in config.container.mounts]).encode()
    return f"{answer_key(config, image_id)}-{hashlib.sha256(mounts).hexdigest()[:8]}"


# NCCL's own lines of itself, at NCCL_DEBUG=INFO (src/init.cc showVersion: every rank from
# 2.22.3, rank 0 alone and bare before; the git line from 2.29.2): searched in the bare message.
VERSION_LINE = re.compile(r"(?:^|NCCL INFO )NCCL version (?P<version>\d+\.\d+\.\d+\S*)")
GIT_LINE = re.compile(r"(?:^|NCCL INFO )NCCL git version (?P<git>\S+ \S+)")


class NcclSeen:
    """What each rank's NCCL said of itself, as the launch's log lines are read (bounded: one
    entry a rank)."""

    MAX_RANKS = 64

    def __init__(self) -> None:
        self.by_rank: dict[str, str] = {}  # rank label -> "2.28.9+cuda13.0[, master v2.29.2]"

    def observe(self, line: LogLine) -> None:
        message = strip_prefixes(line.text).strip()
        found = VERSION_LINE.search(message) or GIT_LINE.search(message)
        if found is None or len(self.by_rank) >= self.MAX_RANKS:
            return
        rank = rank_label(line)
        said = found.groupdict().get("version") or found["git"]
        known = self.by_rank.get(rank)
        if known is None:
            self.by_rank[rank] = said
        elif said not in known.split(", "):  # once: a rank's processes repeat it
            self.by_rank[rank] = f"{known}, {said}"

    def differ(self) -> str | None:
        if len(set(self.by_rank.values())) < 2:
            return None
        each = "; ".join(f"{rank}: NCCL {said}" for rank, said in self.by_rank.items())
        return f"the ranks report different NCCL versions: {each}"


def recorded(
    passed: CheckpointPassed,
    seen: NcclSeen,
    libraries: Mapping[str, Library],
    mismatch: str | None,
) -> CheckpointPassed:
    """The NCCL checkpoint with, per rank, the version its lines said and, per node, the file a
    rank loads there (preflight's answer: NCCL's lines never name it); a mismatch is a warning."""
    lines = [f"NCCL {said}  [{rank}]" for rank, said in seen.by_rank.items()]
    lines += [f"{node} loads {library.describe()}" for node, library in libraries.items()]
    differs = "; ".join(filter(None, [seen.differ(), mismatch]))
    warning = "; ".join(
        filter(
            None,
            [
                passed.warning,
                differs and f"{differs}: collectives between them may wedge under load",
            ],
        )
    )
    return passed.model_copy(
        update={
            "evidence": "\n".join([passed.evidence, *lines]),
            "warning": warning or None,
        }
    )
