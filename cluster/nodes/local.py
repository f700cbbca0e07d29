"""The `local` driver: the bot runs on the node itself and talks to its Docker socket directly."""

from __future__ import annotations

import asyncio
import codecs
import os
import time
from collections.abc import AsyncGenerator, Callable, Sequence

from cluster.config import NodeConfig
from cluster.nodes.base import (
    READ_LIMIT,
    STREAM_CHUNK,
    CommandResult,
    FileBytes,
    NodeConnection,
    handed_on,
)
from cluster.nodes.docker_engine import DockerEngine
from cluster.nodes.seam import command_errors, file_errors


class LocalNode(NodeConnection):
    @classmethod
    async def connect(cls, config: NodeConfig, *, timeout: float, call_timeout: float) -> LocalNode:
        started = time.monotonic()
        docker = await DockerEngine.open(
            config,
            f"unix://{config.docker_socket}",
            connect_timeout=timeout,
            call_timeout=call_timeout,
        )
        return cls(config, docker, time.monotonic() - started)

    async def run(
        self,
        argv: Sequence[str],
        *,
        timeout: float,
        hang_up: bool = False,
        output: Callable[[str], None] | None = None,
    ) -> CommandResult:  # a local command never outlives a cancel: it is killed
        env = {**os.environ, **self.config.local_env} if self.config.local_env else None
        with command_errors(self.name, argv, timeout):
            try:
                process = await asyncio.create_subprocess_exec(
                    *argv, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=env
                )
            except FileNotFoundError:
                return CommandResult(127, "", f"{argv[0]}: command not found")  # as a shell says it
            assert process.stdout is not None and process.stderr is not None
            try:
                async with asyncio.timeout(timeout):
                    stdout, stderr = await asyncio.gather(
                        _tail(process.stdout, output), _tail(process.stderr, None)
                    )
                    await process.wait()
            except BaseException:  # a timeout or a cancel: the command must not outlive us
                process.kill()
                await process.wait()
                raise
        return CommandResult(process.returncode or 0, stdout, stderr)

    async def stream(self, argv: Sequence[str], *, timeout: float) -> AsyncGenerator[str, None]:
        env = {**os.environ, **self.config.local_env} if self.config.local_env else None
        with command_errors(self.name, argv, timeout):
            async with asyncio.timeout(timeout):
                process = await asyncio.create_subprocess_exec(
                    *argv,
                    stdout=asyncio.subprocess.PIPE,
                    stderr=asyncio.subprocess.DEVNULL,
                    env=env,
                )
        assert process.stdout is not None
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        try:
            while chunk := await process.stdout.read(STREAM_CHUNK):
                yield decoder.decode(chunk)
            await process.wait()
        finally:
            if process.returncode is None:  # the reader stopped first: so does the command
                process.kill()
                await process.wait()

    async def read_file(self, path: str, *, timeout: float, limit: int = READ_LIMIT) -> str:
        with file_errors(self.name, path, timeout):
            async with asyncio.timeout(timeout):
                data = await asyncio.to_thread(_read, path, limit)
        return data.decode(errors="replace")

    async def read_bytes(self, path: str, *, timeout: float, offset: int, length: int) -> FileBytes:
        with file_errors(self.name, path, timeout):
            async with asyncio.timeout(timeout):
                return await asyncio.to_thread(_read_range, path, offset, length)

    async def api_base_url(self, port: int) -> str:
        return f"http://127.0.0.1:{port}"

    async def aclose(self) -> None:
        await self.docker.close()


async def _tail(stream: asyncio.StreamReader, output: Callable[[str], None] | None) -> str:
    """What `stream` says; without `output`, all of it; with it, handed on as it comes, and its
    last OUTPUT_TAIL characters."""
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    if output is None:
        return decoder.decode(await stream.read(), final=True)

    async def texts() -> AsyncGenerator[str, None]:
        while chunk := await stream.read(STREAM_CHUNK):
            yield decoder.decode(chunk)
        if rest := decoder.decode(b"", final=True):
            yield rest

    return await handed_on(texts(), output)


def _read(path: str, limit: int) -> bytes:
    with open(path, "rb") as file:
        return file.read(limit)


def _read_range(path: str, offset: int, length: int) -> FileBytes:
    with open(path, "rb") as file:
        file.seek(offset)
        return FileBytes(file.read(length), os.fstat(file.fileno()).st_size)
