"""What of ours exists on each node: our container's state, read from every engine at once."""

from __future__ import annotations

import asyncio
from datetime import datetime

import aiodocker

from cluster.events import ContainerState
from cluster.nodes import NodeConnection


async def container_state(node: NodeConnection, name: str) -> ContainerState:
    try:
        info = await node.docker.containers.container(name).show()
    except aiodocker.DockerError as error:
        if error.status == 404:
            return ContainerState(node=node.name, container=name, present=False)
        raise
    state = info["State"]
    started = state.get("StartedAt")
    return ContainerState(
        node=node.name,
        container=name,
        present=True,
        running=bool(state.get("Running")),
        status=state.get("Status", "unknown"),
        started_at=datetime.fromisoformat(started.replace("Z", "+00:00")[:26] + "+00:00")
        if started and not started.startswith("0001")
        else None,
        image_id=info.get("Image"),
        exit_code=None if state.get("Running") else state.get("ExitCode"),
    )


async def container_states(nodes: list[NodeConnection], name: str) -> list[ContainerState]:
    return list(await asyncio.gather(*(container_state(n, name) for n in nodes)))
