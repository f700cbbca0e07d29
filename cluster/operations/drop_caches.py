"""`drop-caches`: each node's page cache dropped by the command the config names.

spark-bot runs nothing as root of its own accord: the command is the operator's
(memory.drop_caches, an argv run over SSH without a shell, e.g. `sudo -n
/usr/local/sbin/drop-caches`), and the rights it needs are granted on the node. Each node's
/proc/meminfo is read before and after, so the evidence says what it freed.
"""

from __future__ import annotations

import asyncio
import shlex
from collections.abc import AsyncGenerator

from cluster.config import ClusterConfig
from cluster.diagnosis.failures import DROP_CACHES_NOT_CONFIGURED, DROP_CACHES_REFUSED
from cluster.events import Event, Failed
from cluster.nodes import ClusterConnection, CommandResult, NodeConnection
from cluster.operations.preflight import reachable
from cluster.progress.checkpoints import DROP_CACHES
from cluster.progress.reporter import Reporter
from cluster.resources.memory import GIB, MemoryBreakdown
from cluster.resources.memory_return import read_breakdown

SHOWN_STDERR = 300


async def _drop(
    node: NodeConnection, argv: list[str], timeout: float
) -> tuple[MemoryBreakdown | None, CommandResult, MemoryBreakdown | None]:
    before = await read_breakdown(node, timeout)
    result = await node.run(argv, timeout=timeout)
    return before, result, await read_breakdown(node, timeout)


def _freed(node: str, before: MemoryBreakdown | None, after: MemoryBreakdown | None) -> str:
    if before is None or after is None:
        return f"{node}: done (its /proc/meminfo is not what Linux writes)"
    return (
        f"{node}: {before.free / GIB:.1f} GiB free before, {after.free / GIB:.1f} GiB after "
        f"({max(0, after.free - before.free) / GIB:.1f} GiB given back; "
        f"{after.reclaimable / GIB:.1f} GiB still cached or reclaimable)"
    )


async def drop_caches(
    config: ClusterConfig, connection: ClusterConnection, reporter: Reporter
) -> AsyncGenerator[Event, None]:
    dropped = DROP_CACHES[1]
    first = reachable(connection, reporter)
    yield first
    if isinstance(first, Failed):
        return
    argv = config.memory.drop_caches
    if argv is None:
        yield reporter.known(dropped, DROP_CACHES_NOT_CONFIGURED, {})
        return
    nodes = connection.ordered()
    outcomes = await asyncio.gather(
        *(_drop(node, list(argv), config.timeouts.preflight) for node in nodes),
        return_exceptions=True,  # every node's drop ends before one's error is told
    )
    for outcome in outcomes:
        if isinstance(outcome, BaseException):
            raise outcome
    results = [outcome for outcome in outcomes if not isinstance(outcome, BaseException)]
    for node, (_, result, _) in zip(nodes, results, strict=True):
        if not result.ok:
            stderr = (result.stderr or result.stdout).strip()[:SHOWN_STDERR]
            yield reporter.known(
                dropped,
                DROP_CACHES_REFUSED,
                {
                    "command": shlex.join(argv),
                    "status": str(result.exit_status),
                    "node": node.name,
                    "stderr": stderr or "(nothing on stderr)",
                },
                node=node.name,
                evidence=stderr,
            )
            return
    yield reporter.passed(
        dropped,
        "\n".join(
            _freed(node.name, before, after)
            for node, (before, _, after) in zip(nodes, results, strict=True)
        ),
    )
