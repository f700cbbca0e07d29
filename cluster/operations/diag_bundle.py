"""The diagnostics bundle: what someone helping needs, from every node at once, in one .tar.gz.

Per node: our container's log (the last `log_lines`), its `docker inspect`, the image's ID, and
what the node's own tools say (NODE_COMMANDS: GPUs, RDMA devices, every interface's addresses
and link state, memory, clock); from the head's container `ray status` (Ray backend); the vLLM
version; the cluster config with secrets masked; and the events of the job the bundle is for.
SUMMARY.txt goes first. Every command runs as an argv under a timeout, all nodes and commands
concurrently; a tool a node lacks (no nvidia-smi in the lab) is recorded as missing, a node that
cannot be reached as unreachable: neither fails the bundle. Every file passes through the
redactor (the config's secret values and anything shaped like a secret) as it is added.
"""

from __future__ import annotations

import asyncio
import io
import json
import re
import tarfile
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from cluster.config import ClusterConfig, Secrets, shown_cluster
from cluster.errors import ContainerMissing, NodeError, NodeTimedOut
from cluster.nodes import ClusterConnection, NodeConnection
from cluster.nodes.interfaces import ipv4_addresses
from cluster.operations.inventory import read_log_tail
from cluster.operations.launch import api_base_url
from cluster.redact import MASK, secret_name
from cluster.serving import api

MAX_FILE_CHARS = 4_000_000  # a file's text beyond this keeps its end: the archive stays bounded
MISSING = 127  # the exit status of a command the node does not have (as a shell says it)
_LINK_STATE = re.compile(r"^\d+:\s+(?P<ifname>[^\s:@]+)\S*\s.*?\sstate\s(?P<state>\S+)")


@dataclass(frozen=True)
class NodeCommand:
    file: str
    argv: tuple[str, ...]
    what: str


# What each node's own tools say (argv lists: nothing here is shell code).
NODE_COMMANDS = (
    NodeCommand("nvidia-smi.txt", ("nvidia-smi",), "GPUs, driver and memory"),
    NodeCommand("ibdev2netdev.txt", ("ibdev2netdev",), "RDMA devices and their interfaces"),
    NodeCommand("ip-addr.txt", ("ip", "-o", "addr", "show"), "every interface's addresses"),
    NodeCommand("ip-link.txt", ("ip", "-o", "-s", "link", "show"), "link state and counters"),
    NodeCommand("meminfo.txt", ("cat", "/proc/meminfo"), "memory"),
    NodeCommand("date.txt", ("date", "-u", "+%Y-%m-%dT%H:%M:%S.%NZ"), "the node's clock"),
    NodeCommand("uname.txt", ("uname", "-a"), "kernel"),
)


@dataclass(frozen=True)
class Collected:
    path: str
    outcome: str  # "ok", "missing: …", "timed out: …", "failed: …", "not run: …"


@dataclass
class Bundle:
    """The files of a bundle, redacted as they are added, and what became of each."""

    name: str
    secrets: Secrets
    files: dict[str, str] = field(default_factory=dict)
    outcomes: list[Collected] = field(default_factory=list)

    def add(self, path: str, text: str, outcome: str = "ok") -> None:
        if len(text) > MAX_FILE_CHARS:
            text = f"[… {len(text) - MAX_FILE_CHARS} characters cut]\n" + text[-MAX_FILE_CHARS:]
        self.files[path] = self.secrets.redact(text)
        self.outcomes.append(Collected(path, outcome))

    def note(self, path: str, outcome: str) -> None:
        """A file that could not be collected: only its outcome, in the summary."""
        self.outcomes.append(Collected(path, outcome))

    def tar_gz(self, summary: str) -> bytes:
        """The archive: SUMMARY.txt first, then every file, under one directory."""
        buffer = io.BytesIO()
        now = time.time()
        with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
            for path, text in [("SUMMARY.txt", self.secrets.redact(summary)), *self.files.items()]:
                data = text.encode("utf-8", errors="replace")
                info = tarfile.TarInfo(f"{self.name}/{path}")
                info.size, info.mtime, info.mode = len(data), int(now), 0o644
                archive.addfile(info, io.BytesIO(data))
        return buffer.getvalue()


@dataclass(frozen=True)
class DiagResult:
    archive: bytes
    summary: str
    files: list[str]
    problems: list[str]  # the outcomes other than ok, as "node/file: outcome"


def masked_inspect(info: dict[str, Any], secret_vars: set[str]) -> dict[str, Any]:
    """`docker inspect` with the values of secret environment variables masked by name (the
    redactor masks known values and shapes in the text as well)."""
    config = dict(info.get("Config") or {})
    env = []
    for entry in config.get("Env") or []:
        name, sep, _ = str(entry).partition("=")
        env.append(
            f"{name}={MASK}" if sep and (name in secret_vars or secret_name(name)) else entry
        )
    config["Env"] = env
    return {**info, "Config": config}


async def _bounded_command(
    node: NodeConnection, command: NodeCommand, within: float
) -> tuple[str, str]:
    """(text, outcome) of one command on a node; never raises for the node's own failures."""
    try:
        result = await node.run(list(command.argv), timeout=within)
    except NodeTimedOut:
        return "", f"timed out after {within:g} s"
    except NodeError as error:
        return "", f"failed: {error.problem}"
    if result.exit_status == MISSING:
        return "", f"missing: `{command.argv[0]}` is not installed on {node.name}"
    text = result.stdout + (f"\n[stderr]\n{result.stderr}" if result.stderr.strip() else "")
    if not result.ok:
        return text, f"exit status {result.exit_status}"
    return text, "ok"


async def _attempt(
    bundle: Bundle, path: str, produce: Callable[[], Awaitable[str | None]], absent: str
) -> None:
    """Add what `produce` gives at `path` (None: `absent` is the outcome); a node error is
    recorded as the outcome, never raised."""
    try:
        text = await produce()
    except NodeTimedOut as error:
        bundle.note(path, f"timed out: {error.problem}")
        return
    except NodeError as error:
        bundle.note(path, f"failed: {error.problem}")
        return
    if text is None:
        bundle.note(path, absent)
    else:
        bundle.add(path, text)


async def _collect_node(
    bundle: Bundle,
    config: ClusterConfig,
    secrets: Secrets,
    node: NodeConnection,
    *,
    log_lines: int,
    within: float,
) -> None:
    container = config.container.name
    secret_vars = set(config.container.secret_env) | set(secrets.container_env())
    where = f"nodes/{node.name}"

    async def command(c: NodeCommand) -> None:
        text, outcome = await _bounded_command(node, c, within)
        if outcome.startswith("missing") or (not text and outcome != "ok"):
            bundle.note(f"{where}/{c.file}", outcome)
        else:
            bundle.add(f"{where}/{c.file}", text, outcome)

    async def inspect() -> str | None:
        info = await node.docker.find_container(container)
        if info is None:
            return None
        return json.dumps(masked_inspect(info, secret_vars), indent=2, default=str)

    async def log() -> str | None:
        lines = await read_log_tail(node, container, log_lines, secrets)
        return "\n".join(lines) + "\n" if lines else None

    async def image() -> str | None:
        wanted = config.container.image
        image_id = await node.docker.image_id(wanted)
        info = await node.docker.find_container(container)
        running = info.get("Image") if info else None
        return (
            f"configured image: {wanted}\nits ID on {node.name}: {image_id or 'absent'}\n"
            f"our container runs: {running or '(no container)'}\n"
        )

    absent = f"not run: no container {container} on {node.name}"
    await asyncio.gather(
        *(command(c) for c in NODE_COMMANDS),
        _attempt(bundle, f"{where}/docker-inspect.json", inspect, absent),
        _attempt(bundle, f"{where}/container.log", log, absent),
        _attempt(bundle, f"{where}/image.txt", image, absent),
    )


async def _collect_head(
    bundle: Bundle, config: ClusterConfig, secrets: Secrets, head: NodeConnection
) -> None:
    """What only the head knows: `ray status` in its container, the server's vLLM version."""
    container = config.container.name
    where = f"nodes/{head.name}"
    running = bool((info := await _find(head, container)) and info["State"].get("Running"))

    async def ray_status() -> str | None:
        if config.serve.backend != "ray" or not running:
            return None
        try:
            return await head.docker.exec_output(
                container, ["ray", "status"], timeout=config.timeouts.ray
            )
        except ContainerMissing:
            return None

    async def version() -> str | None:
        if not running:
            return None
        async with api.api_client(
            await api_base_url(config, head), read_timeout=10, api_key=secrets.api_key
        ) as client:
            answered = await api.vllm_version(client)
        if answered is not None:
            return f"GET /version: {answered}\n"
        printed = await head.docker.exec_output(
            container, ["vllm", "--version"], timeout=config.timeouts.preflight
        )
        return f"`vllm --version` in {container} (the API did not answer): {printed.strip()}\n"

    why = (
        f"not run: the backend is {config.serve.backend}, not ray"
        if config.serve.backend != "ray"
        else f"not run: {container} is not running on {head.name}"
    )
    await asyncio.gather(
        _attempt(bundle, f"{where}/ray-status.txt", ray_status, why),
        _attempt(
            bundle,
            "vllm-version.txt",
            version,
            f"not asked: {container} is not running on {head.name}",
        ),
    )


async def _find(node: NodeConnection, container: str) -> dict[str, Any] | None:
    try:
        return await node.docker.find_container(container)
    except NodeError:
        return None


async def collect(
    config: ClusterConfig,
    secrets: Secrets,
    connection: ClusterConnection,
    *,
    events: Sequence[str] = (),
    events_note: str = "",
    log_lines: int = 2000,
) -> DiagResult:
    """The bundle of `config`'s cluster over `connection`, with `events` (JSON lines) of the
    job it is for; `events_note` says where they come from."""
    started = time.monotonic()
    stamp = datetime.now(UTC)
    bundle = Bundle(f"spark-diag-{config.name}-{stamp:%Y%m%d-%H%M%S}", secrets)
    bundle.add("config.json", json.dumps(shown_cluster(config), indent=2) + "\n")
    if events:
        bundle.add("events.jsonl", "\n".join(events) + "\n")
    else:
        bundle.note("events.jsonl", f"none: {events_note or 'no job events given'}")
    nodes = connection.ordered()
    work = [
        _collect_node(
            bundle,
            config,
            secrets,
            node,
            log_lines=log_lines,
            within=config.timeouts.preflight,
        )
        for node in nodes
    ]
    if config.head.name in connection.nodes:
        work.append(_collect_head(bundle, config, secrets, connection.head))
    await asyncio.gather(*work)
    for name, error in connection.errors.items():
        bundle.note(f"nodes/{name}", f"unreachable: {error.problem}")
    summary = _summary(config, bundle, stamp, time.monotonic() - started, events_note)
    archive = await asyncio.to_thread(bundle.tar_gz, summary)
    problems = [f"{c.path}: {c.outcome}" for c in bundle.outcomes if c.outcome != "ok"]
    return DiagResult(archive, summary, sorted(bundle.files), problems)


def _fabric(bundle: Bundle, node: str, fabric_ip: str) -> str:
    """Which interface holds the node's fabric IP, and its link state, from what was collected."""
    addresses = bundle.files.get(f"nodes/{node}/ip-addr.txt")
    if addresses is None:
        return "fabric interface unknown (no `ip addr` output)"
    holder = next(
        (name for name, ips in ipv4_addresses(addresses).items() if fabric_ip in ips), None
    )
    if holder is None:
        return f"NO interface holds the fabric IP {fabric_ip}"
    states = {
        m["ifname"]: m["state"]
        for line in bundle.files.get(f"nodes/{node}/ip-link.txt", "").splitlines()
        if (m := _LINK_STATE.match(line.strip()))
    }
    return f"fabric {fabric_ip} on {holder}, link state {states.get(holder, 'unknown')}"


def _summary(
    config: ClusterConfig, bundle: Bundle, stamp: datetime, took: float, events_note: str
) -> str:
    lines = [
        f"spark-bot diagnostics for cluster {config.name}",
        f"collected {stamp:%Y-%m-%d %H:%M:%S} UTC in {took:.1f} s; model {config.serve.model}, "
        f"image {config.container.image}, backend {config.serve.backend}, "
        f"container {config.container.name}",
        "Secrets are masked in every file (the config's secret values and anything shaped like "
        "a token); check before sharing anyway.",
    ]
    if events_note:
        lines.append(f"Events: {events_note}")
    lines.append("")
    by_node: dict[str, list[Collected]] = {}
    for c in bundle.outcomes:
        parts = c.path.split("/")
        key = parts[1] if parts[0] == "nodes" else "(cluster)"
        by_node.setdefault(key, []).append(c)
    for key in ["(cluster)", *[n.name for n in config.nodes]]:
        if key != "(cluster)":
            lines.append(f"{key}: {_fabric(bundle, key, config.node(key).fabric_ip)}")
        for c in sorted(by_node.get(key, []), key=lambda c: c.path):
            mark = "ok " if c.outcome == "ok" else "-- "
            detail = "" if c.outcome == "ok" else f"  ({c.outcome})"
            lines.append(f"{mark}{c.path}{detail}")
    return "\n".join(lines) + "\n"
