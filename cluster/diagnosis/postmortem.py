"""After a death no signature explains: probe the cluster before reporting, and name what was found.

A log that ends in "Some Ray subprocesses exited unexpectedly" or an EngineDeadError says that
something died, not why. Before such a failure is reported, every node is asked at once: the
fabric interface's link state (/sys/class/net/<if>/operstate), whether each node reaches the
others over the fabric, the Docker engine, memory and the kernel's OOM kills, `ray status` on the
head, the nodes' clocks, and each node's hardware: its boot id against the one its launch
recorded (a reboot), its kernel log since the launch (GPU Xid and PCIe AER errors) and its
GPU's clocks and throttle reasons (cluster.nodes.boot, cluster.nodes.kernel_log, cluster.nodes.gpu_clocks). The
first finding that explains the death becomes the failure's cause ("the fabric link
enp1s0f1np1 on spark-worker is down"); every finding is listed in the evidence, so an
unexplained death still says what was ruled out. A failure whose log names a cause a hardware
fault can be behind (a CUDA error, an NCCL watchdog timeout: what the rank on the other side
of a dead node sees) is probed too, and only a node's hardware finding replaces its cause.

`probe` does the asking (bounded, concurrent); `ProbeReport`, `needs_probe` and `amend` are pure.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field

from cluster.config import ClusterConfig
from cluster.diagnosis.failures import (
    API_DOWN,
    FABRIC_LINK_DOWN,
    FABRIC_UNREACHABLE,
    FOLLOW_LOST,
    GPU_APPLICATION_XID,
    GPU_LOW_CLOCKS,
    GPU_THROTTLED,
    GPU_XID,
    KERNEL_OOM_KILL,
    NODE_ENGINE_GONE,
    NODE_NOT_ANSWERING,
    NODE_REBOOTED,
    PCIE_AER_ERROR,
    RAY_NODES_MISSING,
    ROW_WITHOUT_A_LOG_LINE_BY_ID,
    SERVING_HUNG,
    STALLED,
    THROTTLE_FIXES,
    UNRECOGNISED,
    XID_FIXES,
    FailureSignature,
    KnownFailure,
)
from cluster.diagnosis.xids import xid
from cluster.errors import NodeError, NodeTimedOut, NodeUnreachable
from cluster.events import Failed
from cluster.nodes import ClusterConnection, NodeConnection
from cluster.nodes.boot import Boot, duration, read_boot
from cluster.nodes.gpu_clocks import ClocksReading, read_clocks
from cluster.nodes.interfaces import ipv4_addresses
from cluster.nodes.kernel_log import KernelLog, XidError, try_read_kernel_log
from cluster.resources.memory import MemoryWatch, read_memory
from cluster.serving.ray_status import parse_ray_status

# The probe's whole budget, and each command's within it.
PROBE_S = 15.0
COMMAND_S = 5.0
CLOCK_SKEW_S = 2.0  # nodes further apart than this are reported
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
# Causes a node's hardware fault can be behind: the rank beside a GPU that fell off the bus
# sees a CUDA error, the rank across from a node that rebooted an NCCL watchdog timeout.
_HARDWARE_MAY_BE_BEHIND = {"cuda_runtime", "nccl", "engine_hang", "distributed_init"}
# ... and rows of other families that say a node went away without saying why
_NODE_WENT_AWAY = {"ray_node_marked_dead"}
# Which finding explains a death best when several are found, first first: a reboot explains
# a link, an engine and a Ray node gone (and resets the kernel's OOM count); a GPU off the bus
# or a failed PCIe link explains a rank gone.
_PRIORITY = (
    NODE_REBOOTED.id,
    NODE_NOT_ANSWERING.id,
    GPU_XID.id,
    PCIE_AER_ERROR.id,
    FABRIC_LINK_DOWN.id,
    NODE_ENGINE_GONE.id,
    FABRIC_UNREACHABLE.id,
    KERNEL_OOM_KILL.id,
    GPU_APPLICATION_XID.id,
    GPU_THROTTLED.id,
    GPU_LOW_CLOCKS.id,
    RAY_NODES_MISSING.id,
)
# The hardware findings that prove a fault, and so explain a failure whose log named another
# cause (the rank across from a rebooted node sees an NCCL timeout); a GPU held back by heat,
# power or low clocks is slow, not broken: it is evidence beside a named cause, never its
# replacement (an application Xid is the named error's own echo in the kernel log).
_HARDWARE_FAULTS = {NODE_REBOOTED.id, NODE_NOT_ANSWERING.id, GPU_XID.id, PCIE_AER_ERROR.id}


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

    def cause(self, *, faults_only: bool = False) -> Finding | None:
        """The finding that explains a death best; `faults_only`: only a proven hardware fault
        (for a failure whose log named its cause)."""
        explaining = [
            f
            for f in self.findings
            if f.failure is not None and (f.failure.id in _HARDWARE_FAULTS or not faults_only)
        ]
        ranked = sorted(
            explaining,
            key=lambda f: _PRIORITY.index(f.failure.id) if f.failure else len(_PRIORITY),
        )
        return ranked[0] if ranked else None

    def lines(self) -> list[str]:
        return [f"{f.check}: {f.text}" for f in self.findings]


def _row(failed: Failed, table: tuple[FailureSignature, ...]) -> KnownFailure | None:
    if failed.signature is None:
        return None
    row: KnownFailure | None = next((r for r in table if r.id == failed.signature), None)
    return row or ROW_WITHOUT_A_LOG_LINE_BY_ID.get(failed.signature)


def needs_probe(failed: Failed, table: tuple[FailureSignature, ...]) -> bool:
    """Whether `failed` says only that something died (a symptom, or no signature at all), or
    names a cause a node's hardware fault can be behind."""
    if failed.signature in _UNEXPLAINED:
        return True
    row = _row(failed, table)
    return row is not None and (
        row.role == "symptom" or row.family in _HARDWARE_MAY_BE_BEHIND or row.id in _NODE_WENT_AWAY
    )


def amend(failed: Failed, report: ProbeReport, table: tuple[FailureSignature, ...] = ()) -> Failed:
    """`failed` with what the probe found: its cause and fix when a finding explains the death
    (for a failure whose log named its cause, only a node's proven hardware fault does), and every
    finding in the evidence either way."""
    probed = "probed after the failure:\n" + "\n".join(f"  {line}" for line in report.lines())
    # first: the findings are a few lines, the failure's own evidence can be long, and a chat
    # message keeps the start of evidence that does not fit
    evidence = f"{probed}\n{failed.evidence}"
    row = _row(failed, table)
    named = failed.signature not in _UNEXPLAINED and row is not None and row.role == "cause"
    found = report.cause(faults_only=named)
    if named and (found is None or found.failure is None):
        return failed.model_copy(update={"evidence": evidence})
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
    boots: Mapping[str, Boot | None] | None = None,
    budget_s: float = PROBE_S,
) -> ProbeReport:
    """Ask every node at once; what did not answer within `budget_s` is reported as such.
    `boots`: each node's boot as its launch recorded it (cluster.nodes.boot.launch_boots)."""
    nodes = connection.ordered()
    checks: list[Callable[[], Awaitable[list[Finding]]]] = []
    for node in nodes:
        checks += [
            _bind(_link_and_reach, config, node, nodes),
            _bind(_docker, node),
            _bind(_memory, node, memory),
            _bind(_hardware, connection, node, (boots or {}).get(node.name)),
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
        if kills is not None and kills < 0:
            findings.append(
                Finding(
                    "kernel OOM",
                    node.name,
                    f"the kernel's OOM-kill count on {node.name} went back since the watch "
                    "began (it counts from boot: the node restarted)",
                )
            )
        elif kills:
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
    kernel = await try_read_kernel_log(node, since_s=None, timeout=COMMAND_S)
    if kernel.unreadable is not None:
        return f"(the kernel log is not readable by the SSH user: {kernel.unreadable})"
    return " | ".join(line.strip()[:160] for line in kernel.oom()[-2:])


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


async def _hardware(
    connection: ClusterConnection, node: NodeConnection, launched: Boot | None
) -> list[Finding]:
    """The node's boot against the launch's, its kernel log since then (Xid, AER), and its GPU's
    clocks: what a node that dropped out for hardware reasons shows. A node whose connection
    broke (it restarted under it) is opened again once, within a command's time; one whose
    session went silent is not answering: a host that is off or hung drops packets, and a new
    connection to it would only wait out the probe's budget."""
    try:
        try:
            boot: Boot | None = await read_boot(node, timeout=COMMAND_S)
        except NodeUnreachable:
            try:
                async with asyncio.timeout(COMMAND_S):
                    node = await connection.reopen(node.name)
            except TimeoutError:
                raise NodeTimedOut(
                    node.name, f"no new SSH connection within {COMMAND_S:g} s", "is it up?"
                ) from None
            boot = await read_boot(node, timeout=COMMAND_S)
        problem = ""
    except (NodeUnreachable, NodeTimedOut) as error:
        return [
            Finding(
                "boot",
                node.name,
                f"{node.name} does not answer: {error.problem}",
                NODE_NOT_ANSWERING,
                {"node": node.name, "problem": error.problem},
            )
        ]
    except (NodeError, ValueError) as error:
        boot, problem = None, error.problem if isinstance(error, NodeError) else str(error)
    rebooted = boot is not None and launched is not None and boot.boot_id != launched.boot_id
    since = launched.uptime_s if launched is not None and not rebooted else None
    kernel, clocks = await asyncio.gather(
        try_read_kernel_log(node, since_s=since, timeout=COMMAND_S),
        read_clocks(node, timeout=COMMAND_S),
    )
    return [
        _boot_finding(node.name, boot, launched, problem),
        *_kernel_findings(node.name, kernel, rebooted, since),
        *_clocks_findings(node.name, clocks),
    ]


def _boot_finding(name: str, boot: Boot | None, launched: Boot | None, problem: str) -> Finding:
    if boot is None:
        return Finding("boot", name, f"not read: {problem}")
    up = duration(boot.uptime_s)
    if launched is None:
        return Finding("boot", name, f"up {up} (no boot id recorded at launch to compare with)")
    if boot.boot_id == launched.boot_id:
        return Finding("boot", name, f"the same boot as at launch (up {up})")
    return Finding(
        "boot",
        name,
        f"{name} rebooted: boot id {boot.boot_id} is not the launch's {launched.boot_id}; up {up}",
        NODE_REBOOTED,
        {"node": name, "uptime": up},
    )


def _kernel_findings(
    name: str, kernel: KernelLog, rebooted: bool, since: float | None
) -> list[Finding]:
    if kernel.unreadable is not None:
        return [
            Finding(
                "kernel log",
                name,
                f"not readable on {name} ({kernel.unreadable}): add the SSH user to the adm "
                "group (journalctl -k), or let it read dmesg (kernel.dmesg_restrict=0)",
            )
        ]
    span = (
        "since the reboot" if rebooted else "since the launch" if since is not None else "this boot"
    )
    findings = []
    xids, aer = kernel.xids(), kernel.aer()
    for found in _worst_xids(xids):
        entry = xid(found.code)
        row = GPU_XID if entry.kind == "hardware" else GPU_APPLICATION_XID
        findings.append(
            Finding(
                "kernel log",
                name,
                f"{found.line[:200]}",
                row if entry.kind != "informational" else None,
                {
                    "node": name,
                    "code": str(found.code),
                    "mnemonic": entry.mnemonic or f"Xid {found.code}",
                    "description": entry.description,
                    "resolution": entry.resolution or "not in its catalog",
                    "xid_fix": XID_FIXES.get(entry.resolution, XID_FIXES[""]).format(node=name),
                },
            )
        )
    uncorrectable = [a for a in aer if not a.corrected]
    if uncorrectable:
        # the device's own line names its driver too; the root port's names only the address
        first = next((a for a in uncorrectable if "PCIe Bus Error" in a.line), uncorrectable[0])
        findings.append(
            Finding(
                "kernel log",
                name,
                first.line[:200],
                PCIE_AER_ERROR,
                {"node": name, "severity": first.severity, "device": first.device},
            )
        )
    corrected = len(aer) - len(uncorrectable)
    summary = f"{kernel.source} {span}: {len(xids)} Xid line(s), {len(aer)} PCIe AER line(s)" + (
        f" ({corrected} corrected)" if corrected else ""
    )
    if not xids and not aer:
        summary = f"{kernel.source} {span}: no GPU Xid or PCIe AER error"
    return [Finding("kernel log", name, summary), *findings]


def _worst_xids(xids: list[XidError]) -> list[XidError]:
    """One line per code, hardware codes first (a 79 is behind the 13s and 45s it causes)."""
    order = {"hardware": 0, "application": 1, "informational": 2}
    first: dict[int, XidError] = {}
    for found in xids:
        first.setdefault(found.code, found)
    return sorted(first.values(), key=lambda f: order[xid(f.code).kind])[:3]


def _clocks_findings(name: str, reading: ClocksReading) -> list[Finding]:
    if reading.problem is not None:
        return [Finding("gpu clocks", name, f"not read: {reading.problem}")]
    findings = []
    for gpu in reading.gpus:
        verdict = gpu.verdict()
        clocks = (
            f"{gpu.sm_mhz:g} of {gpu.max_sm_mhz:g} MHz" if gpu.sm_mhz and gpu.max_sm_mhz else "?"
        )
        values = {
            "node": name,
            "clocks": clocks,
            "reasons": ", ".join(gpu.reason_names()) or "no reason",
            "kind": {"thermal": "heat", "power": "power"}.get(verdict, verdict),
            "kind_fix": THROTTLE_FIXES.get(verdict, "").format(node=name),
        }
        row = {"thermal": GPU_THROTTLED, "power": GPU_THROTTLED, "low_clocks": GPU_LOW_CLOCKS}
        findings.append(Finding("gpu clocks", name, gpu.describe(), row.get(verdict), values))
    return findings or [Finding("gpu clocks", name, "nvidia-smi lists no GPU")]
