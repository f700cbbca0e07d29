"""After a death no signature explains: probe the cluster before reporting, and name what was found.

A log that ends in "Some Ray subprocesses exited unexpectedly" or an EngineDeadError says that
something died, not why. Before such a failure is reported, every node is asked at once: the
fabric interface's link state (/sys/class/net/<if>/operstate), whether each node reaches the
others over the fabric, the Docker engine, memory and the kernel's OOM kills, `ray status` on the
head, and the nodes' clocks. The first finding that explains the death becomes the failure's
cause ("the fabric link enp1s0f1np1 on spark-worker is down"); every finding is listed in the
evidence, so an unexplained death still says what was ruled out.

`probe` does the asking (bounded, concurrent); `ProbeReport`, `needs_probe` and `amend` are pure.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from cluster.config import ClusterConfig
from cluster.diagnosis.failures import (
    API_DOWN,
    FABRIC_LINK_DOWN,
    FABRIC_UNREACHABLE,
    FOLLOW_LOST,
    KERNEL_OOM_KILL,
    NODE_ENGINE_GONE,
    RAY_NODES_MISSING,
    ROW_WITHOUT_A_LOG_LINE_BY_ID,
    SERVING_HUNG,
    STALLED,
    UNRECOGNISED,
    FailureSignature,
    KnownFailure,
)
from cluster.errors import NodeError
from cluster.events import Failed
from cluster.nodes import ClusterConnection, NodeConnection
from cluster.nodes.interfaces import ipv4_addresses
from cluster.resources.memory import MemoryWatch, read_memory
from cluster.serving.ray_status import parse_ray_status

# The probe's whole budget, and each command's within it.
PROBE_S = 15.0
COMMAND_S = 5.0
CLOCK_SKEW_S = 2.0  # nodes further apart than this are reported
_OOM_LINE = re.compile(r"Out of memory|oom-kill|oom_reaper|Killed process", re.IGNORECASE)
# Reachability without ping: a TCP connection to the peer's fabric address; a refusal is an
# answer (the peer is there), a timeout or "no route" is not. The script is constant; the
# address and port are its arguments.
_TCP_REACH = (
    "import socket,sys\n"
    "try:\n"
    "    socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=2).close()\n"
    "except ConnectionRefusedError:\n"
    "    pass\n"
    "except OSError as e:\n"
    "    print(e); sys.exit(1)\n"
)

# The failures that say something died, not why: a probe may find the why.
_UNEXPLAINED = {UNRECOGNISED.id, STALLED.id, SERVING_HUNG.id, FOLLOW_LOST.id, API_DOWN.id}
# Which finding explains a death best when several are found, first first.
_PRIORITY = (
    FABRIC_LINK_DOWN.id,
    NODE_ENGINE_GONE.id,
    FABRIC_UNREACHABLE.id,
    KERNEL_OOM_KILL.id,
    RAY_NODES_MISSING.id,
)


@dataclass(frozen=True)
class Finding:
    check: str  # what was asked: "fabric link", "fabric reach", "docker", "memory", ...
    node: str | None
    text: str  # what was found, one line
    failure: KnownFailure | None = None  # set when it explains a death
    values: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class ProbeReport:
    findings: list[Finding]

    def cause(self) -> Finding | None:
        explaining = [f for f in self.findings if f.failure is not None]
        ranked = sorted(
            explaining,
            key=lambda f: _PRIORITY.index(f.failure.id) if f.failure else len(_PRIORITY),
        )
        return ranked[0] if ranked else None

    def lines(self) -> list[str]:
        return [f"{f.check}: {f.text}" for f in self.findings]


def needs_probe(failed: Failed, table: tuple[FailureSignature, ...]) -> bool:
    """Whether `failed` says only that something died (a symptom, or no signature at all)."""
    if failed.signature in _UNEXPLAINED:
        return True
    if failed.signature is None:
        return False
    row: KnownFailure | None = next((r for r in table if r.id == failed.signature), None)
    row = row or ROW_WITHOUT_A_LOG_LINE_BY_ID.get(failed.signature)
    return row is not None and row.role == "symptom"


def amend(failed: Failed, report: ProbeReport) -> Failed:
    """`failed` with what the probe found: its cause and fix when a finding explains the death,
    and every finding in the evidence either way."""
    probed = "probed after the failure:\n" + "\n".join(f"  {line}" for line in report.lines())
    # first: the findings are a few lines, the failure's own evidence can be long, and a chat
    # message keeps the start of evidence that does not fit
    evidence = f"{probed}\n{failed.evidence}"
    found = report.cause()
    if found is None or found.failure is None:
        cleared = "; ".join(report.lines()) or "nothing could be asked"
        return failed.model_copy(
            update={
                "evidence": evidence,
                "cause": f"{failed.cause} (probed after the failure, nothing else was found "
                f"wrong: {cleared})",
            }
        )
    title, cause, fix = found.failure.render(found.values)
    if failed.signature == UNRECOGNISED.id:
        # "... during Serving: Failed in serving on X (unrecognised error)" -> "...: <finding>"
        head, sep, _ = failed.summary.partition(": ")
        summary = f"{head}{sep or ': '}{title}"
    else:
        summary = f"{failed.summary}; the probe found: {title}"
    return failed.model_copy(
        update={
            "summary": summary,
            "evidence": evidence,
            "cause": f"{cause} (the log showed: {failed.cause})",
            "fix": fix,
            "signature": found.failure.id,
        }
    )


async def probe(
    config: ClusterConfig,
    connection: ClusterConnection,
    *,
    memory: MemoryWatch | None = None,
    budget_s: float = PROBE_S,
) -> ProbeReport:
    """Ask every node at once; what did not answer within `budget_s` is reported as such."""
    nodes = connection.ordered()
    checks: list[Callable[[], Awaitable[list[Finding]]]] = []
    for node in nodes:
        checks += [
            _bind(_link_and_reach, config, node, nodes),
            _bind(_docker, node),
            _bind(_memory, node, memory),
        ]
    checks.append(_bind(_clocks, nodes))
    if config.serve.backend == "ray" and config.head.name in connection.nodes:
        checks.append(_bind(_ray, config, connection.head, len(config.nodes)))
    findings: list[Finding] = []
    tasks = [asyncio.ensure_future(check()) for check in checks]
    done, pending = await asyncio.wait(tasks, timeout=budget_s)
    for task in pending:
        task.cancel()
    await asyncio.gather(*pending, return_exceptions=True)
    for task in tasks:
        if task in done and task.exception() is None:
            findings += task.result()
    if pending:
        findings.append(
            Finding("probe", None, f"{len(pending)} check(s) did not answer within {budget_s:g} s")
        )
    for name in connection.errors:
        findings.append(Finding("ssh", name, f"{name} was not reachable when the watch began"))
    return ProbeReport(findings)


def _bind(
    fn: Callable[..., Awaitable[list[Finding]]], *args: object
) -> Callable[[], Awaitable[list[Finding]]]:
    return lambda: fn(*args)


async def _fabric_interfaces(config: ClusterConfig, node: NodeConnection) -> list[str]:
    choice = config.network.eth_if
    if isinstance(choice, list):
        return choice
    if choice != "auto":
        return [choice]
    listing = await node.run(["ip", "-o", "-f", "inet", "addr", "show"], timeout=COMMAND_S)
    addresses = ipv4_addresses(listing.stdout)
    return [name for name, ips in addresses.items() if node.config.fabric_ip in ips]


async def _link_and_reach(
    config: ClusterConfig, node: NodeConnection, nodes: list[NodeConnection]
) -> list[Finding]:
    findings: list[Finding] = []
    try:
        interfaces = await _fabric_interfaces(config, node)
    except NodeError as error:
        return [Finding("fabric link", node.name, f"not asked: {error.problem}")]
    if not interfaces:
        findings.append(
            Finding(
                "fabric link",
                node.name,
                f"no interface on {node.name} holds its fabric IP {node.config.fabric_ip}",
            )
        )
    for interface in interfaces:
        try:
            state = (
                await node.read_file(f"/sys/class/net/{interface}/operstate", timeout=COMMAND_S)
            ).strip()
        except NodeError as error:
            findings.append(Finding("fabric link", node.name, f"{interface}: {error.problem}"))
            continue
        values = {"interface": interface, "node": node.name, "state": state}
        findings.append(
            Finding(
                "fabric link",
                node.name,
                f"{interface} on {node.name} is {state}",
                FABRIC_LINK_DOWN if state != "up" else None,
                values,
            )
        )
    for peer in nodes:
        if peer is not node:
            findings.append(await _reach(node, peer))
    return findings


async def _reach(node: NodeConnection, peer: NodeConnection) -> Finding:
    address = peer.config.fabric_ip
    values = {"node": node.name, "peer": peer.name, "address": address}
    try:
        result = await node.run(["ping", "-c", "1", "-W", "2", "-n", address], timeout=COMMAND_S)
        how = "ping"
        if result.exit_status == 127:  # no ping on the node: a TCP connection says as much
            how = "TCP"
            result = await node.run(["python3", "-c", _TCP_REACH, address, "22"], timeout=COMMAND_S)
    except NodeError as error:
        return Finding("fabric reach", node.name, f"not asked: {error.problem}")
    if result.exit_status == 127:
        return Finding("fabric reach", node.name, "not asked: neither ping nor python3 on it")
    if result.ok:
        return Finding("fabric reach", node.name, f"{node.name} reaches {peer.name} at {address}")
    said = (result.stdout + result.stderr).strip().splitlines()
    return Finding(
        "fabric reach",
        node.name,
        f"{node.name} gets no answer from {peer.name} at {address} ({how}"
        + (f": {said[-1][:120]}" if said else "")
        + ")",
        FABRIC_UNREACHABLE,
        values,
    )


async def _docker(node: NodeConnection) -> list[Finding]:
    try:
        version = await node.docker.version()
    except NodeError as error:
        return [
            Finding(
                "docker",
                node.name,
                f"the engine on {node.name} does not answer: {error.problem}",
                NODE_ENGINE_GONE,
                {"node": node.name, "problem": error.problem},
            )
        ]
    return [Finding("docker", node.name, f"engine {version.get('Version', '?')} answers")]


async def _memory(node: NodeConnection, watch: MemoryWatch | None) -> list[Finding]:
    try:
        reading = await read_memory(node, timeout=COMMAND_S, at=time.monotonic())
    except (NodeError, ValueError) as error:
        problem = error.problem if isinstance(error, NodeError) else str(error)
        return [Finding("memory", node.name, f"not read: {problem}")]
    findings = [Finding("memory", node.name, f"{node.name}: {reading.describe()}")]
    if watch is not None:
        watch.observe(reading)
        kills = watch.oom_kills_since_start(node.name)
        if kills:
            lines = await _oom_lines(node)
            findings.append(
                Finding(
                    "kernel OOM",
                    node.name,
                    f"{kills} OOM kill(s) on {node.name} since the watch began"
                    + (f": {lines}" if lines else ""),
                    KERNEL_OOM_KILL,
                    {"kills": str(kills), "node": node.name, "memory": reading.describe()},
                )
            )
        elif kills == 0:
            findings.append(Finding("kernel OOM", node.name, "no OOM kill since the watch began"))
    return findings


async def _oom_lines(node: NodeConnection) -> str:
    """The kernel's last OOM lines, where the SSH user may read the kernel log."""
    try:
        result = await node.run(["dmesg"], timeout=COMMAND_S)
    except NodeError:
        return ""
    if not result.ok:
        return "(the kernel log is not readable by the SSH user)"
    lines = [line for line in result.stdout.splitlines() if _OOM_LINE.search(line)]
    return " | ".join(line.strip()[:160] for line in lines[-2:])


async def _clocks(nodes: list[NodeConnection]) -> list[Finding]:
    async def offset(node: NodeConnection) -> float | None:
        sent = time.time()
        try:
            result = await node.run(["date", "+%s.%N"], timeout=COMMAND_S)
            told = float(result.stdout.strip())
        except (NodeError, ValueError):
            return None
        return told - (sent + time.time()) / 2  # against the midpoint of the round trip

    told = await asyncio.gather(*map(offset, nodes))
    offsets = dict(zip([n.name for n in nodes], told, strict=True))
    known = {name: o for name, o in offsets.items() if o is not None}
    if len(known) < 2:
        return [Finding("clocks", None, "not compared (fewer than two nodes told their time)")]
    spread = max(known.values()) - min(known.values())
    listing = ", ".join(f"{name} {o:+.2f} s" for name, o in known.items())
    verdict = "apart" if spread > CLOCK_SKEW_S else "within"
    return [
        Finding(
            "clocks",
            None,
            f"nodes {spread:.2f} s apart ({verdict} {CLOCK_SKEW_S:g} s; "
            f"against the bot: {listing})",
        )
    ]


async def _ray(config: ClusterConfig, head: NodeConnection, want: int) -> list[Finding]:
    try:
        output = await head.docker.exec_output(
            config.container.name, ["ray", "status"], timeout=COMMAND_S
        )
    except NodeError as error:
        return [Finding("ray status", head.name, f"not asked: {error.problem}")]
    state = parse_ray_status(output)
    if state.active_nodes == 0 and not state.gpu_line:
        return [Finding("ray status", head.name, "no answer: " + output.strip()[-160:])]
    failure = RAY_NODES_MISSING if state.active_nodes < want else None
    return [
        Finding(
            "ray status",
            head.name,
            state.describe(),
            failure,
            {"active_nodes": str(state.active_nodes), "want_nodes": str(want)},
        )
    ]
