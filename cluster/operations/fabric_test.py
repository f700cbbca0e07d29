"""`fabric-test`: the fabric's bandwidth between every pair of nodes, measured with the tool the
nodes have, held against the link's nominal speed and the last run of the same cluster.

perftest's `ib_write_bw` when both nodes of a pair have it: a server on the first, a client on
the second, one pair of processes per subnet both hold (NVIDIA's two-subnet layout: a logical
interface of the port each, ~100 Gb/s per PCIe x4 half), run at once on ports 18515, 18516…
and summed, as NVIDIA's benchmarking guide adds its two lanes (dgx-spark-playbooks@0db7c141
nvidia/connect-two-sparks/assets/performance_benchmarking_guide.md: 92.57 + 97.28 Gb/s). Else
nccl-tests' `all_reduce_perf` under `mpirun` from the pair's first node (on its PATH or in
~/nccl-tests/build, where NVIDIA's NCCL playbook builds it), with the NCCL_SOCKET_IFNAME and
NCCL_IB_HCA the launch gives NCCL. Pairs are measured one after another (two at once would share
a node's link and halve each other's figure); a pair that fails says why and the others go on.
Every command is an argv with a timeout; a server is hung up when its pair ends.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import AsyncGenerator
from dataclasses import dataclass
from datetime import UTC, datetime
from itertools import combinations

from cluster.bench.history import History
from cluster.bench.models import Comparison
from cluster.config import ClusterConfig
from cluster.diagnosis.failures import FABRIC_TEST_FAILED
from cluster.errors import FileUnreadable, NodeError
from cluster.events import Event, FabricTestResult, Progress
from cluster.nodes import ClusterConnection, NodeConnection, node_home
from cluster.nodes.fabric_link import read_link
from cluster.nodes.fabric_link import warnings as link_warnings
from cluster.nodes.fabric_paths import network_of
from cluster.nodes.interfaces import NodeInterfaces, Unresolved
from cluster.operations.fabric_report import FabricLane, FabricPair, FabricTestReport, pair_line
from cluster.operations.fabric_tools import (
    ALL_REDUCE_PERF,
    IB_WRITE_BW,
    MPIRUN,
    NCCL_TESTS_BUILD,
    all_reduce_perf_argv,
    ib_write_bw_client,
    ib_write_bw_server,
    listening,
    parse_all_reduce_perf,
    parse_ib_write_bw,
    perftest_version,
)
from cluster.operations.preflight import detect_interfaces
from cluster.progress.checkpoints import FABRIC_TEST
from cluster.progress.reporter import Reporter

DEFAULT_SECONDS = 5
MAX_SECONDS = 60
BASE_PORT = 18515  # perftest's default port (src/perftest_parameters.h DEF_PORT)
LISTEN_POLL_S = 0.1  # how often the server's node is asked whether it listens yet
ALL_REDUCE_SIZE = "256M"  # past the size where busbw levels off, small beside a Spark's memory
ALL_REDUCE_ITERS = 10
ALL_REDUCE_BUDGET_S = 180.0  # MPI start-up, NCCL's init on both ranks and the sizes' runs
ERROR_CHARS = 300


@dataclass(frozen=True)
class NodeTools:
    interfaces: NodeInterfaces | Unresolved
    perftest: str | None  # ib_write_bw's version, None: not on the node
    all_reduce: str | None  # all_reduce_perf's path when it and mpirun run on the node


async def _quietly(node: NodeConnection, argv: list[str], timeout: float) -> str:
    try:
        return (await node.run(argv, timeout=timeout)).stdout
    except NodeError:
        return ""


async def _all_reduce_tool(node: NodeConnection, timeout: float) -> str | None:
    if not (await _quietly(node, [MPIRUN, "--version"], timeout)).strip():
        return None
    try:
        home = await node_home(node, timeout)
    except NodeError:
        return None
    for tool in (ALL_REDUCE_PERF, f"{home}/{NCCL_TESTS_BUILD}"):
        if "USAGE" in await _quietly(node, [tool, "-h"], timeout):
            return tool
    return None


async def _interfaces(node: NodeConnection, config: ClusterConfig) -> NodeInterfaces | Unresolved:
    try:
        return await detect_interfaces(node, config)
    except NodeError as error:  # the node's pairs say so; the others are measured
        return Unresolved(str(error)[:ERROR_CHARS])


async def node_tools(node: NodeConnection, config: ClusterConfig) -> NodeTools:
    timeout = config.timeouts.preflight
    interfaces, version, all_reduce = await asyncio.gather(
        _interfaces(node, config),
        _quietly(node, [IB_WRITE_BW, "--version"], timeout),
        _all_reduce_tool(node, timeout),
    )
    return NodeTools(interfaces, perftest_version(version), all_reduce)


def _last_words(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return "; ".join(lines[-2:])[-ERROR_CHARS:] or "no output"


async def _wait_listening(node: NodeConnection, port: int, timeout: float) -> None:
    """Until a socket listens on `port` on the node (/proc/net/tcp, tcp6): perftest's client
    does not retry its connection. TimeoutError after `timeout`."""
    async with asyncio.timeout(timeout):
        while True:
            for table in ("/proc/net/tcp", "/proc/net/tcp6"):
                try:
                    if listening(await node.read_file(table, timeout=timeout), port):
                        return
                except FileUnreadable:
                    continue
            await asyncio.sleep(LISTEN_POLL_S)  # the poll's interval, not a synchronisation


async def _lane(
    server: NodeConnection,
    client: NodeConnection,
    lane: FabricLane,
    port: int,
    seconds: int,
    timeout: float,
) -> FabricLane:
    run_timeout = seconds + timeout
    serving = asyncio.create_task(
        server.run(
            ib_write_bw_server(lane.server_device, port, seconds),
            timeout=run_timeout,
            hang_up=True,  # ends with the pair, also when it waits for a client that never comes
        )
    )
    try:
        try:
            await _wait_listening(server, port, timeout)
        except TimeoutError:
            if serving.done() and not serving.cancelled() and serving.exception() is None:
                said = serving.result()
                return lane.model_copy(
                    update={"error": f"{server.name}: {_last_words(said.stdout + said.stderr)}"}
                )
            return lane.model_copy(
                update={
                    "error": f"{server.name}: ib_write_bw did not listen on port {port} "
                    f"within {timeout:g} s"
                }
            )
        if serving.done():  # the port listens, but not for this server: it has ended
            said = await serving
            return lane.model_copy(
                update={"error": f"{server.name}: {_last_words(said.stdout + said.stderr)}"}
            )
        said = await client.run(
            ib_write_bw_client(lane.client_device, port, seconds, lane.server_address),
            timeout=run_timeout,
        )
        figures = parse_ib_write_bw(said.stdout)
        if figures is None:
            return lane.model_copy(
                update={"error": f"{client.name}: {_last_words(said.stdout + said.stderr)}"}
            )
        return lane.model_copy(update={"gbps": round(figures.average_gbps, 2)})
    except NodeError as error:
        return lane.model_copy(update={"error": str(error)[:ERROR_CHARS]})
    finally:
        serving.cancel()
        await asyncio.gather(serving, return_exceptions=True)


def lanes_between(first: NodeInterfaces, second: NodeInterfaces) -> list[FabricLane]:
    """One lane per address of the first node's Up RoCE ports that the second has a peer for
    on the same subnet, the same interface name first (the same port cabled on both): two in
    NVIDIA's two-subnet layout, two as well when both halves share one link-local subnet."""
    free = list(second.addresses)
    lanes = []
    for address in first.addresses:
        subnet = network_of(address)
        same = [peer for peer in free if network_of(peer) == subnet]
        if not same:
            continue
        peer = next((p for p in same if p.netdev == address.netdev), same[0])
        free.remove(peer)
        lanes.append(
            FabricLane(
                subnet=subnet,
                server_device=address.device,
                client_device=peer.device,
                server_address=address.cidr.split("/")[0],
            )
        )
    return lanes


async def _with_perftest(
    server: NodeConnection,
    client: NodeConnection,
    pair: FabricPair,
    lanes: list[FabricLane],
    seconds: int,
    timeout: float,
) -> FabricPair:
    measured = await asyncio.gather(
        *(
            _lane(server, client, lane, BASE_PORT + i, seconds, timeout)
            for i, lane in enumerate(lanes)
        )
    )
    figures = [lane.gbps for lane in measured if lane.gbps is not None]
    errors = [f"{lane.subnet}: {lane.error}" for lane in measured if lane.error]
    if not figures:
        return pair.model_copy(update={"lanes": measured, "error": "; ".join(errors)})
    return pair.model_copy(
        update={"lanes": measured, "gbps": round(sum(figures), 2), "warnings": errors}
    )


async def _with_all_reduce(
    server: NodeConnection,
    tool: str,
    pair: FabricPair,
    ips: tuple[str, str],
    first: NodeInterfaces,
    second: NodeInterfaces,
) -> FabricPair:
    env = {"NCCL_SOCKET_IFNAME": first.eth_if, "NCCL_IB_HCA": ",".join(first.ib_if)}
    if (second.eth_if, second.ib_if) != (first.eth_if, first.ib_if):
        # mpirun's -x gives both ranks the same value: NVIDIA's playbook cables the same port
        # on both Sparks so that one value fits both
        pair = pair.model_copy(
            update={
                "warnings": [
                    f"{pair.client}'s interfaces ({second.eth_if}; {','.join(second.ib_if)}) differ "
                    f"from {pair.server}'s: both ranks were given {pair.server}'s"
                ]
            }
        )
    try:
        said = await server.run(
            all_reduce_perf_argv(tool, ips, env, ALL_REDUCE_SIZE, ALL_REDUCE_ITERS),
            timeout=ALL_REDUCE_BUDGET_S,
        )
    except NodeError as error:
        return pair.model_copy(update={"error": str(error)[:ERROR_CHARS]})
    figures = parse_all_reduce_perf(said.stdout)
    if figures is None:
        return pair.model_copy(
            update={"error": f"{server.name}: {_last_words(said.stdout + said.stderr)}"}
        )
    return pair.model_copy(update={"gbps": round(figures.gbps, 2)})


NO_TOOL = (
    "neither perftest's ib_write_bw (`sudo apt install perftest`, as NVIDIA's benchmarking guide "
    "does) nor nccl-tests' all_reduce_perf with mpirun (NVIDIA's NCCL playbook builds it in "
    "~/nccl-tests) was found on both nodes"
)


async def measure_pair(
    connection: ClusterConnection,
    tools: dict[str, NodeTools],
    server_name: str,
    client_name: str,
    seconds: int,
    config: ClusterConfig,
) -> FabricPair:
    pair = FabricPair(server=server_name, client=client_name)
    for name in (server_name, client_name):
        if name in connection.errors:
            return pair.model_copy(update={"error": str(connection.errors[name])[:ERROR_CHARS]})
    first, second = tools[server_name], tools[client_name]
    for name, found in ((server_name, first), (client_name, second)):
        if isinstance(found.interfaces, Unresolved):
            return pair.model_copy(update={"error": f"{name}: {found.interfaces.problem}"})
    assert isinstance(first.interfaces, NodeInterfaces)
    assert isinstance(second.interfaces, NodeInterfaces)
    server, client = connection.nodes[server_name], connection.nodes[client_name]
    timeout = config.timeouts.preflight
    if first.perftest and second.perftest:
        lanes = lanes_between(first.interfaces, second.interfaces)
        if not lanes:
            return pair.model_copy(update={"tool": "ib_write_bw", "error": NO_LANE})
        measured = await _with_perftest(
            server, client, pair.model_copy(update={"tool": "ib_write_bw"}), lanes, seconds,
            timeout,
        )  # fmt: skip
        if len(lanes) == 1 and measured.gbps is not None:
            measured = _warned(measured, ONE_SUBNET.format(subnet=lanes[0].subnet))
    elif first.all_reduce and first.all_reduce == second.all_reduce:
        ips = (server.config.fabric_ip, client.config.fabric_ip)
        measured = await _with_all_reduce(
            server, first.all_reduce, pair.model_copy(update={"tool": "all_reduce_perf"}), ips,
            first.interfaces, second.interfaces,
        )  # fmt: skip
    elif first.all_reduce and second.all_reduce:
        return pair.model_copy(update={"error": (
            f"all_reduce_perf is {first.all_reduce} on {server_name} but {second.all_reduce} on "
            f"{client_name}: mpirun starts the same path on both nodes"
        )})  # fmt: skip
    else:
        return pair.model_copy(update={"error": NO_TOOL})
    return await _with_link_facts(measured, (server, client), (first, second), config)


NO_LANE = (
    "no fabric subnet in common: the cables are on different ports, or configure the other "
    "subnet (preflight names which)"
)
ONE_SUBNET = (
    "one subnet only ({subnet}): one of the port's two halves; NVIDIA's layout gives the "
    "port's second interface a subnet of its own for the full speed"
)


def _warned(pair: FabricPair, *warnings: str) -> FabricPair:
    return pair.model_copy(update={"warnings": [*pair.warnings, *warnings]})


async def _with_link_facts(
    pair: FabricPair,
    nodes: tuple[NodeConnection, NodeConnection],
    tools: tuple[NodeTools, NodeTools],
    config: ClusterConfig,
) -> FabricPair:
    """The speed the link trained at, as both ends' sysfs reads it (the interfaces the figure
    crossed), and what preflight warns of on them: a link below its nominal speed, MTU below
    9000."""
    wanted = [
        (node, netdev)
        for node, found in zip(nodes, tools, strict=True)
        if isinstance(found.interfaces, NodeInterfaces)
        for netdev in dict.fromkeys(a.netdev for a in found.interfaces.addresses)
    ]
    timeout = config.timeouts.preflight
    try:
        read = await asyncio.gather(*(read_link(n, i, timeout) for n, i in wanted))
    except NodeError:
        return pair  # the figure stands; the link's facts are preflight's to report
    links = [link for link in read if link is not None]
    speeds = [link.speed_mbps for link in links if link.speed_mbps]
    trained = min(speeds) / 1000 if speeds and len(speeds) == len(links) else None
    updated = pair.model_copy(update={"trained_gbps": trained})
    return _warned(updated, *link_warnings(links, config.network.link_speed_mbps))


def setup_key(config: ClusterConfig) -> str:
    """What a run is compared on: the nodes and their fabric addresses."""
    nodes = [(node.name, node.fabric_ip) for node in config.nodes]
    text = json.dumps({"fabric_test": nodes}, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def compare(current: FabricTestReport, previous: FabricTestReport | None) -> list[Comparison]:
    if previous is None:
        return []
    earlier = {(p.server, p.client, p.tool): p for p in previous.pairs if p.gbps}
    found = []
    for pair in current.pairs:
        old = earlier.get((pair.server, pair.client, pair.tool))
        if old is not None and old.gbps and pair.gbps is not None:
            found.append(
                Comparison(
                    metric=f"{pair.name} ({pair.tool})",
                    unit="Gb/s",
                    current=pair.gbps,
                    previous=old.gbps,
                    change_pct=(pair.gbps - old.gbps) / old.gbps * 100.0,
                    previous_at=previous.at,
                )
            )
    return found


async def fabric_test(
    config: ClusterConfig,
    connection: ClusterConnection,
    reporter: Reporter,
    *,
    seconds: int = DEFAULT_SECONDS,
    history: History[FabricTestReport] | None = None,
) -> AsyncGenerator[Event, None]:
    if not 1 <= seconds <= MAX_SECONDS:
        raise ValueError(f"seconds must be between 1 and {MAX_SECONDS}")
    nominal = config.network.link_speed_mbps / 1000
    reachable = connection.ordered()
    found = await asyncio.gather(*(node_tools(node, config) for node in reachable))
    tools = {node.name: facts for node, facts in zip(reachable, found, strict=True)}
    pairs = []
    for server_name, client_name in combinations([n.name for n in config.nodes], 2):
        yield Progress(
            elapsed_s=reporter.elapsed(),
            phase="fabric_test",
            message=f"measuring {server_name} ↔ {client_name}",
        )
        pair = await measure_pair(connection, tools, server_name, client_name, seconds, config)
        pairs.append(pair)
        yield Progress(
            elapsed_s=reporter.elapsed(), phase="fabric_test", message=pair_line(pair, nominal)
        )
    report = FabricTestReport(
        at=datetime.now(UTC),
        setup_key=setup_key(config),
        nominal_gbps=nominal,
        seconds=seconds,
        pairs=pairs,
        duration_s=reporter.elapsed(),
    )
    if history is not None:
        report = report.model_copy(
            update={"comparisons": compare(report, await history.previous(report.setup_key))}
        )
        await history.record(report)
    yield FabricTestResult(elapsed_s=reporter.elapsed(), report=report)
    if report.failed:
        yield reporter.known(
            FABRIC_TEST,
            FABRIC_TEST_FAILED,
            {
                "pairs": ", ".join(p.name for p in report.failed),
                "reasons": "; ".join(f"{p.name}: {p.error}" for p in report.failed),
            },
        )
