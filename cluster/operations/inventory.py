"""What of ours exists on each node: our container's state, read from every engine at once."""

from __future__ import annotations

import asyncio

from cluster.config import Secrets
from cluster.errors import ContainerMissing, DockerRefused
from cluster.events import ContainerState
from cluster.logs.logtext import clean_line
from cluster.logs.timestamps import parse_docker_timestamp
from cluster.nodes import NodeConnection
from cluster.serving.containers import LABEL_CLUSTER, LABEL_RECIPE


async def container_state(node: NodeConnection, name: str) -> ContainerState:
    info = await node.docker.find_container(name)
    if info is None:
        return ContainerState(node=node.name, container=name, present=False)
    state = info["State"]
    return ContainerState(
        node=node.name,
        container=name,
        present=True,
        running=bool(state.get("Running")),
        status=state.get("Status", "unknown"),
        started_at=parse_docker_timestamp(state.get("StartedAt")),
        image_id=info.get("Image"),
        exit_code=None if state.get("Running") else state.get("ExitCode"),
        owner=(info["Config"].get("Labels") or {}).get(LABEL_CLUSTER),
        recipe=(info["Config"].get("Labels") or {}).get(LABEL_RECIPE),
    )


async def container_states(nodes: list[NodeConnection], name: str) -> list[ContainerState]:
    return list(await asyncio.gather(*(container_state(n, name) for n in nodes)))


async def read_log_tail(node: NodeConnection, name: str, lines: int, secrets: Secrets) -> list[str]:
    """The last `lines` lines of our container's log, cleaned and redacted; [] if it is gone."""
    try:
        raw = await node.docker.log_tail(name, lines)
    except ContainerMissing:
        return []
    return [secrets.redact(clean_line(line)) for line in raw.splitlines()][-lines:]


async def remove_container(
    node: NodeConnection,
    name: str,
    *,
    owner: str | None,
    timeout: float,
    container_id: str | None = None,
) -> tuple[bool, str]:
    """Stop and remove `name` on `node`; with `owner`, only if spark-bot started it for that
    cluster (a container someone started by hand under the same name is left alone); with
    `container_id`, only if it is still that container (a launch that took over since started
    its own under the name: it is that launch's, not ours). Stopped and removed by its Id, so a
    container that takes the name meanwhile is never touched."""
    async with asyncio.timeout(timeout):
        info = await node.docker.find_container(name)
        if info is None:
            return False, f"no container {name} on {node.name}"
        found = info["Id"]
        if container_id is not None and found != container_id:
            return False, (
                f"{name} on {node.name} is another container now ({found[:12]}, not the "
                f"{container_id[:12]} this launch started): left alone (another launch's)"
            )
        labels = info["Config"].get("Labels") or {}
        if owner is not None and labels.get(LABEL_CLUSTER) != owner:
            return False, (
                f"{name} on {node.name} was not started by spark-bot for cluster {owner}: left "
                f"alone (remove it by hand with `docker rm -f {name}` if it may go)"
            )
        status = info["State"]["Status"]
        try:
            if info["State"].get("Running"):
                # SIGTERM, then SIGKILL after the grace: half the time allowed, the delete needs
                # the rest
                await node.docker.stop(found, grace_s=max(1, int(min(timeout / 2, 30))))
            await node.docker.remove(found)
        except (ContainerMissing, DockerRefused) as error:
            if isinstance(error, DockerRefused) and not _removed_by_another(error):
                raise
            # Someone else's removal (a launcher's own `docker rm` on its way out) won the race:
            # gone all the same once it ends (asked again until then, within the timeout); a
            # container by that name with another Id is another's, already.
            while True:
                now = await node.docker.find_container(name)
                if now is None or now["Id"] != found:
                    break
                await asyncio.sleep(REMOVAL_POLL_S)
            return True, (
                f"{name} ({found[:12]}, was {status}) on {node.name} was removed meanwhile "
                "by another (its own launcher, or a `docker rm`)"
            )
    return True, f"removed {name} ({found[:12]}, was {status}) from {node.name}"


# Docker's words when a removal of the container is already under way (409).
REMOVAL_IN_PROGRESS = "is already in progress"
REMOVAL_POLL_S = 0.2


def _removed_by_another(error: DockerRefused) -> bool:
    return error.status == 409 and REMOVAL_IN_PROGRESS in error.message
