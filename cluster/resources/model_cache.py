"""The served model on a node: where its files are (the node's Hugging Face cache, found through
the container's mounts) and whether they are complete: config.json, the safetensors index and
every shard it lists, each at its full size.

A safetensors file is 8 bytes (the header's length n, little-endian), n bytes of JSON header,
then the tensors' data; the header's largest `data_offsets` end is the data's length, so a
complete file is exactly 8 + n + that end bytes (safetensors refuses any other size: "Error
while deserializing header: incomplete metadata, file not fully covered"). An interrupted
download leaves a shard short. Only the first 8 bytes and the header of each shard are read
(over SFTP, no process started on the node), a few shards at a time.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from cluster.config import ClusterConfig
from cluster.errors import FileUnreadable
from cluster.nodes import NodeConnection
from cluster.operations.transfer import size
from cluster.resources.fit import ModelFiles, hf_home, host_path, hub_folder, index_total

MAX_HEADER_BYTES = 100_000_000  # safetensors' own bound on a header
CONFIG_BYTES = 1_048_576
INDEX_BYTES = 33_554_432  # an index of tens of thousands of tensors is a few MB
PARALLEL_READS = 8  # shards read at once on a node
INDEX = "model.safetensors.index.json"
SINGLE = "model.safetensors"
OFFLINE = "HF_HUB_OFFLINE"
_REF = re.compile(r"^[0-9A-Za-z._-]{1,100}$")
_SHARD_NAME = re.compile(r"^(?!.*\.\.)[A-Za-z0-9_.-][A-Za-z0-9_./-]{0,250}$")


@dataclass(frozen=True)
class Shard:
    name: str
    size: int | None  # None: the file is missing
    expected: int | None  # 8 + header + data, from its header; None: no readable header

    @property
    def complete(self) -> bool:
        return self.size is not None and self.size == self.expected

    def defect(self) -> str:
        if self.size is None:
            return f"{self.name} missing"
        if self.expected is None:
            return f"{self.name} has no readable safetensors header ({size(self.size)})"
        return f"{self.name} is {size(self.size)} of {size(self.expected)}"


@dataclass(frozen=True)
class ModelOnNode:
    """What one node's cache holds of the model."""

    node: str
    model: str
    snapshot: str | None = None  # the folder with config.json, on the node
    repo: str | None = None  # the hub layout's models--ORG--NAME folder, on the node
    unseen: str | None = None  # why the check cannot see the files (no mount): not checked
    problem: str | None = None  # what is missing before the shards (snapshot, config, index)
    shards: tuple[Shard, ...] = ()
    weights_checked: bool = True  # False with --load-format dummy: vLLM reads no weights
    config_json: dict[str, Any] | None = None  # parsed, as read
    weights_bytes: int | None = None  # the index's metadata.total_size, or the single file's size

    def files(self) -> ModelFiles | None:
        """What was read, for the fit check to read no file twice; None: nothing was found."""
        if self.snapshot is None or self.config_json is None:
            return None
        return ModelFiles(self.snapshot, self.config_json, self.weights_bytes)

    @property
    def complete(self) -> bool:
        return (
            self.unseen is None
            and self.problem is None
            and all(shard.complete for shard in self.shards)
        )

    @property
    def total_bytes(self) -> int:
        return sum(shard.size or 0 for shard in self.shards)

    def defects(self) -> str:
        """What is missing or short, in a line."""
        if self.problem is not None:
            return self.problem
        bad = [shard.defect() for shard in self.shards if not shard.complete]
        shown = "; ".join(bad[:6]) + (f"; and {len(bad) - 6} more" if len(bad) > 6 else "")
        return f"shards {len(self.shards) - len(bad)}/{len(self.shards)} complete: {shown}"

    def describe(self) -> str:
        """The evidence line: what was checked, and what was found."""
        if self.unseen is not None:
            return f"{self.node}: not checked: {self.unseen}"
        if not self.complete:
            return f"{self.node}: {self.defects()} (in {self.snapshot or self.repo})"
        if not self.weights_checked:
            return (
                f"{self.node}: config.json in {self.snapshot}; weights not checked "
                "(--load-format dummy: vLLM reads none)"
            )
        count = len(self.shards)
        return (
            f"{self.node}: config.json, {'index, ' if count > 1 or self.shards[0].name != SINGLE else ''}"
            f"shards {count}/{count} at full size, {size(self.total_bytes)} in {self.snapshot}"
        )


def load_format(extra_args: Sequence[str]) -> str | None:
    """`--load-format X` (or `--load-format=X`, `--load_format`) from vLLM's extra arguments."""
    args = list(extra_args)
    for index, arg in enumerate(args):
        flag, equals, value = arg.partition("=")
        if flag.replace("_", "-") == "--load-format":
            if equals:
                return value
            return args[index + 1] if index + 1 < len(args) else None
    return None


def hub_model(config: ClusterConfig) -> bool:
    """A hub id (looked up in the Hugging Face cache), not a path in the container."""
    return not config.serve.model.startswith("/")


async def model_on_node(config: ClusterConfig, node: NodeConnection, home: str) -> ModelOnNode:
    """The model's files on `node`, read with bounded reads under `timeouts.preflight` each."""
    timeout, model = config.timeouts.preflight, config.serve.model
    state = ModelOnNode(node.name, model)
    repo = None
    if not hub_model(config):
        snapshot = host_path(config, model, home)
        if snapshot is None:
            return _with(
                state, unseen=f"no container mount holds {model}, so its files are not seen"
            )
    else:
        hub = host_path(config, hf_home(config) + "/hub", home)
        if hub is None:
            return _with(
                state,
                unseen=f"no container mount holds the Hugging Face cache ({hf_home(config)}), "
                "so the check cannot see it",
            )
        repo = f"{hub}/{hub_folder(model)}"
        ref = (await _read(node, f"{repo}/refs/main", 200, timeout) or b"").decode(errors="replace")
        if not _REF.match(ref.strip()):
            return _with(state, repo=repo, problem=f"not in the cache (no {repo}/refs/main)")
        snapshot = f"{repo}/snapshots/{ref.strip()}"
    state = _with(state, repo=repo, snapshot=snapshot)
    config_json = await _read(node, f"{snapshot}/config.json", CONFIG_BYTES, timeout)
    parsed = None if config_json is None else _json_object(config_json)
    if parsed is None:
        what = "missing" if config_json is None else "not complete JSON"
        return _with(state, problem=f"config.json {what} in {snapshot}")
    state = _with(state, config_json=parsed)
    if load_format(config.serve.extra_args) == "dummy":
        return _with(state, weights_checked=False)
    listed = await _shard_names(node, snapshot, timeout)
    if isinstance(listed, str):
        return _with(state, problem=listed)
    names, weights_bytes = listed
    state = _with(state, weights_bytes=weights_bytes)
    reads = asyncio.Semaphore(PARALLEL_READS)

    async def shard(name: str) -> Shard:
        async with reads:
            return await _shard(node, f"{snapshot}/{name}", name, timeout)

    shards = await asyncio.gather(*(shard(name) for name in names))
    return _with(state, shards=tuple(shards))


def _with(state: ModelOnNode, **changes: Any) -> ModelOnNode:
    return dataclasses.replace(state, **changes)


async def _read(node: NodeConnection, path: str, limit: int, timeout: float) -> bytes | None:
    """The file's first `limit` bytes; None when it is not there."""
    try:
        read = await node.read_bytes(path, timeout=timeout, offset=0, length=limit)
    except FileUnreadable:
        return None
    return read.data


def _json_object(data: bytes) -> dict[str, Any] | None:
    try:
        parsed = json.loads(data)
    except ValueError:
        return None
    return parsed if isinstance(parsed, dict) else None


async def _shard_names(
    node: NodeConnection, snapshot: str, timeout: float
) -> tuple[list[str], int | None] | str:
    """The shards the index's weight_map lists (or the single file), and the weights' size (the
    index's total_size, or the single file's); a str says what is wrong."""
    index = await _read(node, f"{snapshot}/{INDEX}", INDEX_BYTES, timeout)
    if index is None:
        try:
            single = await node.read_bytes(
                f"{snapshot}/{SINGLE}", timeout=timeout, offset=0, length=0
            )
        except FileUnreadable:
            return f"neither {INDEX} nor {SINGLE} in {snapshot}"
        return [SINGLE], single.size
    try:
        parsed = json.loads(index)
        weight_map = parsed["weight_map"]
        names = sorted(set(weight_map.values()))
    except (ValueError, KeyError, TypeError, AttributeError):
        return f"{INDEX} in {snapshot} is not complete JSON with a weight_map"
    strange = [name for name in names if not isinstance(name, str) or not _SHARD_NAME.match(name)]
    if strange or not names:
        return f"{INDEX} in {snapshot} lists no shard or a strange one: {str(strange)[:80]}"
    return names, index_total(parsed)


async def _shard(node: NodeConnection, path: str, name: str, timeout: float) -> Shard:
    try:
        head = await node.read_bytes(path, timeout=timeout, offset=0, length=8)
    except FileUnreadable:
        return Shard(name, None, None)
    length = int.from_bytes(head.data, "little") if len(head.data) == 8 else -1
    if not 0 < length <= MAX_HEADER_BYTES or 8 + length > head.size:
        return Shard(name, head.size, None)
    body = await node.read_bytes(path, timeout=timeout, offset=8, length=length)
    try:
        header = json.loads(body.data)
        end = max(
            (
                int(entry["data_offsets"][1])
                for key, entry in header.items()
                if key != "__metadata__"
            ),
            default=0,
        )
    except (ValueError, KeyError, TypeError, IndexError, AttributeError):
        return Shard(name, body.size, None)
    return Shard(name, body.size, 8 + length + end)


@dataclass
class ModelCheck:
    """Every serving node's model, and what the launch should do with it."""

    config: ClusterConfig
    nodes: list[ModelOnNode] = field(default_factory=list)

    @property
    def complete_everywhere(self) -> bool:
        return bool(self.nodes) and all(m.complete for m in self.nodes)

    @property
    def incomplete(self) -> list[ModelOnNode]:
        return [m for m in self.nodes if m.unseen is None and not m.complete]

    @property
    def source(self) -> ModelOnNode | None:
        """A node with the model complete: the head when it has it."""
        return next((m for m in self.nodes if m.complete), None)

    def hub_offline(self) -> dict[str, str]:
        """HF_HUB_OFFLINE=1 for the containers when every node has a hub model complete (and
        the config does not say otherwise): no node then asks the hub for anything."""
        if (
            self.config.launcher is None  # a launcher's containers have only what it sets
            and hub_model(self.config)
            and self.complete_everywhere
            and OFFLINE not in self.config.container.env
        ):
            return {OFFLINE: "1"}
        return {}

    def offline_note(self) -> str:
        env = self.config.container.env
        if self.config.launcher is not None:
            return (
                f"{OFFLINE} is the launcher's to set: spark-bot sets no variable in the "
                "containers it starts (pass it in launcher.command if the script takes variables)"
            )
        if OFFLINE in env:
            return f"{OFFLINE}={env[OFFLINE]} in the containers, as the config sets it"
        if self.hub_offline():
            return f"{OFFLINE}=1 in the containers: every node has the model, none asks the hub"
        return f"{OFFLINE} not set: vLLM may ask the hub"

    def evidence(self) -> str:
        return "\n".join(m.describe() for m in self.nodes)


async def check_model(
    config: ClusterConfig, nodes: Sequence[NodeConnection], homes: dict[str, str]
) -> ModelCheck:
    """The model on every node at once."""
    found = await asyncio.gather(*(model_on_node(config, n, homes[n.name]) for n in nodes))
    return ModelCheck(config, list(found))
