"""Running a command inside one of our containers and reading what it printed."""

from __future__ import annotations

import aiodocker.containers


async def exec_output(container: aiodocker.containers.DockerContainer, argv: list[str]) -> str:
    execution = await container.exec(argv)
    chunks = []
    async with execution.start(detach=False) as stream:
        while (message := await stream.read_out()) is not None:
            chunks.append(message.data.decode(errors="replace"))
    return "".join(chunks)
