"""The Docker Engine API's HTTP shape over `demo.engine.Engine`, served by aiohttp on a unix
socket: the calls spark-bot's controller makes through aiodocker, answered with the status
codes, headers and bodies Docker Engine 20.10 (API 1.41) gives (see tests/demo for the check
against a real engine). Every path also answers under a `/v1.NN` prefix, as aiodocker asks.

Framing, as Docker's: logs and non-TTY exec output are multiplexed, one frame per write with an
8-byte header [stream (1 stdout, 2 stderr), 0, 0, 0, size as big-endian uint32]; an attached
exec start that asks `Upgrade: tcp` gets `101 UPGRADED` and the frames on the hijacked
connection, which is closed when the process ends; `/events` is a JSON stream, one object per
line.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from aiohttp import web

from demo.engine import Engine, EngineError

API_VERSION = "1.41"
ENGINE_VERSION = "20.10.24-spark-bot-demo"
_HEADERS = {
    "Api-Version": API_VERSION,
    "Docker-Experimental": "false",
    "Ostype": "linux",
    "Server": f"Docker/{ENGINE_VERSION} (linux)",
}
ENGINE: web.AppKey[Engine] = web.AppKey("engine", Engine)


def frame(stream: int, data: bytes) -> bytes:
    return struct.pack(">BxxxL", stream, len(data)) + data


def _json(data: Any, status: int = 200) -> web.Response:
    return web.Response(
        status=status,
        body=json.dumps(data).encode() + b"\n",
        headers={"Content-Type": "application/json"},
    )


def _flag(request: web.Request, name: str, default: bool = False) -> bool:
    value = request.query.get(name)
    return default if value is None else value.lower() in {"1", "true", "yes"}


async def _body(request: web.Request) -> dict[str, Any]:
    raw = await request.read()
    if not raw:
        return {}
    try:
        body = json.loads(raw)
    except ValueError:
        raise EngineError(400, "invalid JSON in the request body") from None
    return body if isinstance(body, dict) else {}


@web.middleware
async def _docker_errors(
    request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
):
    try:
        response = await handler(request)
    except EngineError as error:
        response = _json({"message": error.message}, error.status)
    except web.HTTPNotFound:
        response = _json({"message": "page not found"}, 404)
    if not response.prepared:
        response.headers.update({k: v for k, v in _HEADERS.items() if k not in response.headers})
    return response


@contextmanager
def _client_may_leave() -> Iterator[None]:
    """A streaming answer ends quietly when its client hangs up (a follower cancelled)."""
    try:
        yield
    except ConnectionResetError:
        pass


def _engine(request: web.Request) -> Engine:
    return request.app[ENGINE]


async def ping(request: web.Request) -> web.Response:
    return web.Response(
        text="OK",
        headers={"Cache-Control": "no-cache, no-store, must-revalidate", "Pragma": "no-cache"},
    )


async def version(request: web.Request) -> web.Response:
    return _json(
        {
            "Platform": {"Name": "spark-bot demo (emulated Docker Engine)"},
            "Components": [
                {
                    "Name": "Engine",
                    "Version": ENGINE_VERSION,
                    "Details": {"ApiVersion": API_VERSION, "MinAPIVersion": "1.12", "Os": "linux"},
                }
            ],
            "Version": ENGINE_VERSION,
            "ApiVersion": API_VERSION,
            "MinAPIVersion": "1.12",
            "GitCommit": "emulated",
            "GoVersion": "none",
            "Os": "linux",
            "Arch": "amd64",
            "KernelVersion": "emulated",
            "BuildTime": "",
        }
    )


async def image_inspect(request: web.Request) -> web.Response:
    image = _engine(request).inspect_image(request.match_info["name"])
    config = {
        "Env": list(image.env),
        "Cmd": ["sleep", "infinity"],
        "Labels": image.labels,
        "Tty": False,
        "User": "",
        "WorkingDir": "",
        "Entrypoint": None,
    }
    return _json(
        {
            "Id": image.id,
            "RepoTags": [image.tag],
            "RepoDigests": [],
            "Parent": "",
            "Comment": "",
            "Created": image.created,
            "DockerVersion": ENGINE_VERSION,
            "Author": "",
            "Config": config,
            "Architecture": "amd64",
            "Os": "linux",
            "Size": 0,
            "VirtualSize": 0,
            "GraphDriver": {"Data": None, "Name": "emulated"},
            "RootFS": {"Type": "layers", "Layers": []},
            "Metadata": {"LastTagTime": image.created},
        }
    )


async def container_create(request: web.Request) -> web.Response:
    container = _engine(request).create(await _body(request), request.query.get("name"))
    return _json({"Id": container.id, "Warnings": []}, 201)


async def container_start(request: web.Request) -> web.Response:
    engine = _engine(request)
    started = await engine.start(engine.container(request.match_info["id"]))
    return web.Response(status=204 if started else 304)


async def container_inspect(request: web.Request) -> web.Response:
    return _json(_engine(request).container(request.match_info["id"]).inspect())


async def container_logs(request: web.Request) -> web.StreamResponse:
    container = _engine(request).container(request.match_info["id"])
    streams = {n for n, name in ((1, "stdout"), (2, "stderr")) if _flag(request, name)}
    if not streams:
        raise EngineError(400, "Bad parameters: you must choose at least one stream")
    tail_text = request.query.get("tail", "all")
    tail = (
        None
        if tail_text == "all" or not tail_text.lstrip("-").isdigit() or int(tail_text) < 0
        else int(tail_text)
    )
    stamped = _flag(request, "timestamps")

    def log_frame(stream: int, data: bytes, stamp: str) -> bytes:
        return frame(stream, f"{stamp} ".encode() + data if stamped else data)

    backlog, position = container.log.tail(tail, streams)
    response = web.StreamResponse(headers=_HEADERS)
    await response.prepare(request)
    with _client_may_leave():
        for record in backlog:
            await response.write(log_frame(*record))
        if _flag(request, "follow") and container.running:
            async for record in container.log.follow(position, streams):
                await response.write(log_frame(*record))
        await response.write_eof()
    return response


async def container_stop(request: web.Request) -> web.Response:
    engine = _engine(request)
    container = engine.container(request.match_info["id"])
    stopped = await engine.stop(container, float(request.query.get("t", "10")))
    return web.Response(status=204 if stopped else 304)


async def container_kill(request: web.Request) -> web.Response:
    engine = _engine(request)
    await engine.kill(
        engine.container(request.match_info["id"]), request.query.get("signal", "SIGKILL")
    )
    return web.Response(status=204)


async def container_delete(request: web.Request) -> web.Response:
    engine = _engine(request)
    await engine.remove(engine.container(request.match_info["id"]), _flag(request, "force"))
    return web.Response(status=204)


async def exec_create(request: web.Request) -> web.Response:
    engine = _engine(request)
    instance = engine.create_exec(engine.container(request.match_info["id"]), await _body(request))
    return _json({"Id": instance.id}, 201)


async def exec_inspect(request: web.Request) -> web.Response:
    return _json(_engine(request).exec_instance(request.match_info["id"]).inspect())


async def exec_start(request: web.Request) -> web.StreamResponse:
    engine = _engine(request)
    instance = engine.exec_instance(request.match_info["id"])
    body = await _body(request)
    output = await engine.start_exec(instance, attached=not body.get("Detach"))
    if body.get("Detach"):
        return web.Response(status=200)
    upgrade = request.headers.get("Upgrade", "").lower() == "tcp"
    headers = {"Content-Type": "application/vnd.docker.raw-stream", **_HEADERS}
    if upgrade:
        headers.update({"Connection": "Upgrade", "Upgrade": "tcp"})
    response = web.StreamResponse(
        status=101 if upgrade else 200, reason="UPGRADED" if upgrade else "OK", headers=headers
    )
    response.force_close()  # the hijacked connection carries this stream only, then closes
    await response.prepare(request)
    with _client_may_leave():
        async for stream, data in output:
            await response.write(_exec_chunk(instance.tty, stream, data))
        await response.write_eof()
    async for _ in output:
        pass  # the client hung up: drain the pipes so the command runs to its end, as under Docker
    return response


def _exec_chunk(tty: bool, stream: int, data: bytes) -> bytes:
    return data if tty else frame(stream, data)


async def events(request: web.Request) -> web.StreamResponse:
    engine = _engine(request)
    try:
        filters = json.loads(request.query.get("filters") or "{}")
    except ValueError:
        raise EngineError(400, "invalid filter") from None
    # Docker accepts both {"event": ["die"]} and the older {"event": {"die": true}}.
    filters = {key: list(value) for key, value in filters.items()}
    queue = engine.subscribe(filters)
    response = web.StreamResponse(headers={"Content-Type": "application/json", **_HEADERS})
    try:
        await response.prepare(request)
        with _client_may_leave():
            while (event := await queue.get()) is not None:
                await response.write(json.dumps(event).encode() + b"\n")
            await response.write_eof()
    finally:
        engine.unsubscribe(queue)
    return response


def make_app(engine: Engine) -> web.Application:
    app = web.Application(middlewares=[_docker_errors])
    app[ENGINE] = engine
    routes = [
        ("GET", "/_ping", ping),
        ("GET", "/version", version),
        ("GET", "/images/{name:.+}/json", image_inspect),
        ("POST", "/containers/create", container_create),
        ("POST", "/containers/{id}/start", container_start),
        ("GET", "/containers/{id}/json", container_inspect),
        ("GET", "/containers/{id}/logs", container_logs),
        ("POST", "/containers/{id}/stop", container_stop),
        ("POST", "/containers/{id}/kill", container_kill),
        ("DELETE", "/containers/{id}", container_delete),
        ("POST", "/containers/{id}/exec", exec_create),
        ("POST", "/exec/{id}/start", exec_start),
        ("GET", "/exec/{id}/json", exec_inspect),
        ("GET", "/events", events),
    ]
    for prefix in ("", r"/v{version:1\.[0-9]+}"):
        for method, path, handler in routes:
            if method == "GET":
                app.router.add_get(prefix + path, handler)  # HEAD too, as Docker's /_ping
            else:
                app.router.add_route(method, prefix + path, handler)
    return app


class EngineServer:
    """An `Engine` served on a unix socket; `aclose` kills its containers and unlinks the socket."""

    def __init__(self, engine: Engine, socket_path: Path):
        self.engine = engine
        self.socket_path = socket_path
        self._runner = web.AppRunner(
            make_app(engine), access_log=None, handle_signals=False, shutdown_timeout=1.0
        )

    async def start(self) -> None:
        await self._runner.setup()
        await web.UnixSite(self._runner, str(self.socket_path)).start()

    async def aclose(self) -> None:
        await self.engine.aclose()
        await self._runner.cleanup()
        self.socket_path.unlink(missing_ok=True)
