"""A stand-in Docker engine on a unix socket that misbehaves on purpose (answers /version, then
fails or hangs), for the controller's error seam and the bot's error paths."""

from __future__ import annotations

import asyncio
import json
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
        await asyncio.to_thread(socket.unlink, missing_ok=True)


class ImageEngine:
    """A stand-in engine's images, for `sync-image`: `GET /images/{name}/json` and `/get` (a
    tarball of `Size` bytes whose first line carries the image's ID) and `POST /images/load`
    (the image is tagged only when the whole tarball arrived, as Docker does). Faults: the
    save dies or stalls after N bytes; the load refuses after N bytes, or stops reading."""

    def __init__(self, images: dict[str, dict] | None = None):
        self.images: dict[str, dict] = dict(images or {})
        self.sent = 0  # bytes of tarball sent by saves
        self.received = 0  # bytes of tarball received by loads
        self.die_after: int | None = None
        self.stall_after: int | None = None
        self.refuse_after: int | None = None
        self.refusal = (
            "write /var/lib/docker/tmp/docker-import-1/layer.tar: no space left on device"
        )
        self.reading = asyncio.Event()  # cleared: a load stops reading its body
        self.reading.set()
        self.load_started = asyncio.Event()
        self.loads_ended: list[str] = []  # how each load ended: loaded, refused, cut short
        self.load_ended = asyncio.Event()

    async def __call__(self, request: web.Request) -> web.StreamResponse:
        path = request.path.split("/", 2)[-1] if request.path.startswith("/v1.") else request.path
        path = "/" + path.lstrip("/")
        if path.startswith("/images/") and path.endswith("/json") and request.method == "GET":
            return self._inspect(path.removeprefix("/images/").removesuffix("/json"))
        if path.startswith("/images/") and path.endswith("/get") and request.method == "GET":
            return await self._save(request, path.removeprefix("/images/").removesuffix("/get"))
        if path == "/images/load" and request.method == "POST":
            return await self._load(request)
        return web.json_response({"message": f"no such route {path}"}, status=404)

    def _ended(self, how: str) -> None:
        self.loads_ended.append(how)
        self.load_ended.set()

    def _inspect(self, name: str) -> web.Response:
        if name not in self.images:
            return web.json_response({"message": f"No such image: {name}"}, status=404)
        return web.json_response(self.images[name])

    async def _save(self, request: web.Request, name: str) -> web.StreamResponse:
        if name not in self.images:
            return web.json_response({"message": f"reference does not exist: {name}"}, status=404)
        image = self.images[name]
        header = f"{name} {image['Id']} {image['Size']}\n".encode()
        response = web.StreamResponse(headers={"Content-Type": "application/x-tar"})
        await response.prepare(request)
        chunk = 64 * 1024
        position = 0
        while position < image["Size"]:
            if self.die_after is not None and position >= self.die_after:
                assert request.transport is not None
                request.transport.close()  # the engine went away mid-stream
                return response
            if self.stall_after is not None and position >= self.stall_after:
                await asyncio.Event().wait()
            size = min(chunk, image["Size"] - position)
            data = (header + bytes(size))[:size] if position == 0 else bytes(size)
            await response.write(data)
            position += size
            self.sent += size
        await response.write_eof()
        return response

    async def _load(self, request: web.Request) -> web.StreamResponse:
        self.load_started.set()
        received = b""
        count = 0
        try:
            async for data in request.content.iter_any():
                if not received:
                    received = data[:200]
                count += len(data)
                self.received += len(data)
                if self.refuse_after is not None and count >= self.refuse_after:
                    self._ended("refused")
                    response = web.StreamResponse(headers={"Content-Type": "application/json"})
                    await response.prepare(request)
                    error = {"errorDetail": {"message": self.refusal}, "error": self.refusal}
                    await response.write(json.dumps(error).encode() + b"\n")
                    return response
                await self.reading.wait()
        except (ConnectionError, asyncio.CancelledError):
            self._ended("cut short")
            raise
        name, image_id, size = received.split(b"\n", 1)[0].decode().split()
        if count != int(size):
            self._ended("cut short")
            return web.json_response({"message": "unexpected EOF"}, status=500)
        self.images[name] = {"Id": image_id, "Size": count}
        self._ended("loaded")
        response = web.StreamResponse(headers={"Content-Type": "application/json"})
        await response.prepare(request)
        await response.write(json.dumps({"stream": f"Loaded image: {name}\n"}).encode() + b"\n")
        return response
