"""Open every node of a cluster at once (jump hosts first), and close them all afterwards."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

from cluster.config import ClusterConfig, NodeConfig, Timeouts
from cluster.errors import NodeError, NodeUnreachable
from cluster.nodes.base import NodeConnection
from cluster.nodes.local import LocalNode
from cluster.nodes.ssh import SSHNode


@dataclass
class ClusterConnection:
    """The outcome of connecting: an open connection or the error, per node, in config order."""

    config: ClusterConfig
    nodes: dict[str, NodeConnection] = field(default_factory=dict)
    errors: dict[str, NodeError] = field(default_factory=dict)

    @property
    def head(self) -> NodeConnection:
        return self.nodes[self.config.head.name]

    def ordered(self) -> list[NodeConnection]:
        return [self.nodes[n.name] for n in self.config.nodes if n.name in self.nodes]


async def _connect_one(
    config: NodeConfig, timeouts: Timeouts, via: NodeConnection | None
) -> NodeConnection:
    if config.driver == "local":
        return await LocalNode.connect(config, timeout=timeouts.connect, call_timeout=timeouts.docker)
    if via is not None and not isinstance(via, SSHNode):
        raise NodeError(config.name, f"jump node {via.name} uses the local driver", "Give the jump node driver: ssh.")
    return await SSHNode.connect(config, timeout=timeouts.connect, call_timeout=timeouts.docker, via=via)


@asynccontextmanager
async def connect_cluster(config: ClusterConfig) -> AsyncIterator[ClusterConnection]:
    """Connect to all nodes concurrently; a node behind a jump host waits for that host only."""
    result = ClusterConnection(config)
    opened: dict[str, asyncio.Task[NodeConnection]] = {}

    async def connect(node: NodeConfig) -> NodeConnection:
        via = None
        if node.ssh is not None and node.ssh.jump is not None:
            via = await opened[node.ssh.jump]
            if isinstance(via, NodeError):
                raise NodeUnreachable(node.name, f"unreachable through {node.ssh.jump}", via.fix)
        return await _connect_one(node, config.timeouts, via)

    try:
        async with asyncio.TaskGroup() as group:
            for node in config.nodes:
                opened[node.name] = group.create_task(_guarded(connect(node)))
        for node in config.nodes:
            outcome = opened[node.name].result()
            if isinstance(outcome, NodeError):
                result.errors[node.name] = outcome
            else:
                result.nodes[node.name] = outcome
        yield result
    finally:
        # Close jumped-through nodes last: their tunnels carry the others.
        for node in reversed(config.nodes):
            task = opened.get(node.name)
            if task is not None and task.done() and not task.cancelled():
                outcome = task.result()
                if isinstance(outcome, NodeConnection):
                    await outcome.aclose()


async def _guarded(coro) -> NodeConnection | NodeError:
    try:
        return await coro
    except NodeError as exc:
        return exc
