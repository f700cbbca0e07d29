"""Running a command inside one of our containers and reading what it printed."""

from __future__ import annotations

import asyncio

import aiodocker.containers


async def exec_output(
    container: aiodocker.containers.DockerContainer, argv: list[str], *, timeout: float
) -> str:
    """What `argv` printed; TimeoutError when it has not finished within `timeout` seconds."""
    async with asyncio.timeout(timeout):
        execution = await container.exec(argv)
        chunks = []
        async with execution.start(detach=False) as stream:
            while (message := await stream.read_out()) is not None:
                chunks.append(message.data.decode(errors="replace"))
    return "".join(chunks)
