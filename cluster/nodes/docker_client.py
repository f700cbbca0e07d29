"""Opening a node's Docker engine client and proving it answers."""

from __future__ import annotations

import asyncio

import aiodocker
import aiohttp

from cluster.config import NodeConfig
from cluster.errors import DockerUnavailable


async def open_docker(config: NodeConfig, url: str, *, timeout: float) -> aiodocker.Docker:
    docker = aiodocker.Docker(url=url)
    try:
        async with asyncio.timeout(timeout):
            await docker.version()
    except (aiodocker.DockerError, aiohttp.ClientError, OSError, TimeoutError) as exc:
        await docker.close()
        raise DockerUnavailable(
            config.name,
            f"the Docker engine at {config.docker_socket} does not answer ({exc or type(exc).__name__})",
            "Is dockerd running on the node (`systemctl status docker`), and may this user "
            "use its socket (member of the docker group)?",
        ) from exc
    return docker
