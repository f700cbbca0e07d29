"""Open every node of a cluster at once (jump hosts first), and close them all afterwards."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable
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
    # Connections `reopen` replaced: closed with the rest, not before (an API port forward or
    # a jumped node's tunnel may still run over one).
    replaced: list[NodeConnection] = field(default_factory=list)

    @property
    def head(self) -> NodeConnection:
        return self.nodes[self.config.head.name]

    def ordered(self) -> list[NodeConnection]:
        return [self.nodes[n.name] for n in self.config.nodes if n.name in self.nodes]

    async def reopen(self, name: str) -> NodeConnection:
        """Open node `name` again (its Docker engine or SSH went away) and use the new
        connection from now on; NodeError when it cannot be opened."""
        node = self.config.node(name)
        via = None
        if node.ssh is not None and node.ssh.jump is not None:
            via = self.nodes.get(node.ssh.jump)
            if via is None:
                raise NodeUnreachable(
                    name,
                    f"unreachable through {node.ssh.jump}",
                    f"check that {node.ssh.jump} is up and reachable over SSH",
                )
        opened = await _connect_one(node, self.config.timeouts, via)
        if name in self.nodes:
            self.replaced.append(self.nodes[name])
        self.nodes[name] = opened
        self.errors.pop(name, None)
        return opened


async def _connect_one(
    config: NodeConfig, timeouts: Timeouts, via: NodeConnection | None
) -> NodeConnection:
    if config.driver == "local":
        return await LocalNode.connect(
            config, timeout=timeouts.connect, call_timeout=timeouts.docker
        )
    if via is not None and not isinstance(via, SSHNode):
        raise NodeError(
            config.name,
            f"jump node {via.name} uses the local driver",
            "Give the jump node driver: ssh.",
        )
    return await SSHNode.connect(
        config, timeout=timeouts.connect, call_timeout=timeouts.docker, via=via
    )


@asynccontextmanager
async def connect_cluster(config: ClusterConfig) -> AsyncIterator[ClusterConnection]:
    """Connect to all nodes concurrently; a node behind a jump host waits for that host only."""
    result = ClusterConnection(config)
    opened: dict[str, asyncio.Task[NodeConnection | NodeError]] = {}

    async def connect(node: NodeConfig) -> NodeConnection:
        via: NodeConnection | None = None
        if node.ssh is not None and node.ssh.jump is not None:
            jump = await opened[node.ssh.jump]
            if isinstance(jump, NodeError):
                raise NodeUnreachable(node.name, f"unreachable through {node.ssh.jump}", jump.fix)
            via = jump
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
        originals = [
            task.result() for task in opened.values() if task.done() and not task.cancelled()
        ]
        reopened = [
            result.nodes.get(node.name) for node in reversed(config.nodes)
        ] + result.replaced[::-1]
        for node_connection in reopened:
            if node_connection is not None and all(node_connection is not o for o in originals):
                await node_connection.aclose()
        # Close jumped-through nodes last: their tunnels carry the others.
        for node in reversed(config.nodes):
            task = opened.get(node.name)
            if task is not None and task.done() and not task.cancelled():
                outcome = task.result()
                if isinstance(outcome, NodeConnection):
                    await outcome.aclose()


async def _guarded(coro: Awaitable[NodeConnection]) -> NodeConnection | NodeError:
    try:
        return await coro
    except NodeError as exc:
        return exc
