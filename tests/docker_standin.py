"""A stand-in Docker engine on a unix socket that misbehaves on purpose (answers /version, then
fails or hangs), for the controller's error seam and the bot's error paths."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path

from aiohttp import web

VERSION = {"ApiVersion": "1.43", "Version": "24.0.0", "MinAPIVersion": "1.12"}
Behaviour = Callable[[web.Request], Awaitable[web.StreamResponse]]


async def failing(request: web.Request) -> web.Response:
    return web.json_response(
        {"message": "write /var/lib/docker: no space left on device"}, status=500
    )


def hanging(reached: asyncio.Event) -> Behaviour:
    """Every call but /version waits for ever; `reached` is set when one arrives."""

    async def hang(request: web.Request) -> web.Response:
        reached.set()
        await asyncio.Event().wait()
        raise AssertionError("unreachable")

    return hang


@asynccontextmanager
async def docker_standin(
    socket: Path, behaviour: Behaviour, *, hang_version: bool = False
) -> AsyncIterator[Path]:
    """`behaviour` answers every call but /version (and /version too with `hang_version`)."""

    async def handle(request: web.Request) -> web.StreamResponse:
        if not hang_version and request.path.rstrip("/").endswith(("/version", "/_ping")):
            return web.json_response(VERSION)
        return await behaviour(request)

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handle)
    runner = web.AppRunner(app, shutdown_timeout=0.1)
    await runner.setup()
    await web.UnixSite(runner, str(socket)).start()
    try:
        yield socket
    finally:
        await runner.cleanup()
        socket.unlink(missing_ok=True)
