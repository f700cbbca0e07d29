"""One scenario of the Docker API calls spark-bot's controller makes, run against any engine,
written down as a transcript: for each call the status code, the content type of JSON and
hijacked answers, and the answer's shape (JSON keys, error messages with ids and names
normalised, multiplexed frames). Two engines that give the same transcript answer the
controller alike."""

from __future__ import annotations

import asyncio
import json
import re
import struct
from typing import Any

import aiodocker
import aiohttp

from cluster.nodes.docker_engine import DockerEngine
from cluster.serving.containers import into_container_log

API = "/v1.41"
_HEX_ID = re.compile(r"\b[0-9a-f]{64}\b")
_STAMP = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{9}Z ")
# Keeps running until SIGTERM, then exits 0 whichever process receives it (PID 1 in Docker,
# the process group here).
COMMAND = ["sh", "-c", "trap 'exit 0' TERM; echo out; echo err >&2; sleep 60 & wait"]


def frames(data: bytes) -> list[tuple[int, bytes]]:
    found = []
    while data:
        stream, size = struct.unpack(">BxxxL", data[:8])
        found.append((stream, data[8 : 8 + size]))
        data = data[8 + size :]
    return found


class Transcript:
    def __init__(self, name: str):
        self.name = name
        self.entries: list[tuple[str, Any]] = []

    def add(self, step: str, value: Any) -> None:
        self.entries.append((step, self._normal(value)))

    def _normal(self, value: Any) -> Any:
        text = json.dumps(
            value, sort_keys=True, default=lambda x: x.decode() if isinstance(x, bytes) else repr(x)
        )
        return json.loads(_HEX_ID.sub("<id>", text).replace(self.name, "<name>"))


async def _call(
    session: aiohttp.ClientSession,
    method: str,
    path: str,
    *,
    body: Any = None,
    headers: dict[str, str] | None = None,
) -> tuple[int, str, bytes]:
    data = json.dumps(body).encode() if body is not None else None
    async with session.request(
        method,
        f"http://docker{path}",
        data=data,
        headers={"Content-Type": "application/json", **(headers or {})},
    ) as response:
        return response.status, response.headers.get("Content-Type", ""), await response.read()


def _error(status: int, content_type: str, raw: bytes) -> dict[str, Any]:
    return {
        "status": status,
        "content_type": content_type,
        "message": json.loads(raw).get("message"),
    }


async def _follow_until(
    session: aiohttp.ClientSession, name: str, wanted: set[bytes]
) -> list[tuple[int, bytes]]:
    """Follow the container log until every wanted line came (no sleeping: the stream says when)."""
    seen: list[tuple[int, bytes]] = []
    async with session.get(
        f"http://docker{API}/containers/{name}/logs",
        params={"stdout": "1", "stderr": "1", "follow": "1", "tail": "all"},
    ) as response:
        buffer = b""
        while not wanted <= {line for _, line in seen}:
            buffer += await response.content.readany()
            while len(buffer) >= 8 and len(buffer) >= 8 + struct.unpack(">BxxxL", buffer[:8])[1]:
                size = struct.unpack(">BxxxL", buffer[:8])[1]
                seen.append((buffer[0], buffer[8 : 8 + size]))
                buffer = buffer[8 + size :]
    return seen


async def run_scenario(socket_path: str, image: str, name: str) -> Transcript:
    t = Transcript(name)
    connector = aiohttp.UnixConnector(socket_path)
    async with (
        aiohttp.ClientSession(connector=connector) as session,
        aiodocker.Docker(url=f"unix://{socket_path}") as docker,
    ):
        try:
            await _scenario(t, session, docker, image, name, socket_path)
        finally:
            await _call(session, "DELETE", f"{API}/containers/{name}?force=1")
    return t


async def _hijacked(socket_path: str, path: str, body: Any) -> tuple[str, dict[str, str], bytes]:
    """POST with `Upgrade: tcp` on a bare connection, then read the raw stream to its end."""
    reader, writer = await asyncio.open_unix_connection(socket_path)
    data = json.dumps(body).encode()
    writer.write(
        f"POST {path} HTTP/1.1\r\nHost: docker\r\nContent-Type: application/json\r\n"
        f"Connection: Upgrade\r\nUpgrade: tcp\r\nContent-Length: {len(data)}\r\n\r\n".encode()
        + data
    )
    try:
        answer = await reader.read()
    finally:
        writer.close()
    head, _, stream = answer.partition(b"\r\n\r\n")
    status, *lines = head.decode().split("\r\n")
    fields = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines)}
    return status, {k: fields.get(k) for k in ("content-type", "connection", "upgrade")}, stream


async def _scenario(
    t: Transcript,
    session: aiohttp.ClientSession,
    docker: aiodocker.Docker,
    image: str,
    name: str,
    socket_path: str,
) -> None:
    status, _, raw = await _call(session, "GET", "/_ping")
    t.add("ping", [status, raw.decode()])
    version = await docker.version()
    t.add(
        "version",
        {
            "ApiVersion": version["ApiVersion"],
            "has": sorted({"Version", "Os", "Arch"} & set(version)),
        },
    )

    info = await docker.images.inspect(image)
    t.add(
        "image inspect",
        {
            "id": info["Id"].startswith("sha256:"),
            "tag": image in info["RepoTags"],
            "Config.Env": isinstance(info["Config"]["Env"], list),
        },
    )
    t.add(
        "image inspect unknown",
        _error(*await _call(session, "GET", f"{API}/images/nope:latest/json")),
    )

    body = {
        "Image": image,
        "Cmd": COMMAND,
        "Env": ["DEMO_CHECK=1"],
        "Labels": {"spark-bot.check": "1"},
        "HostConfig": {"NetworkMode": "host", "Privileged": False, "CapAdd": [], "Ulimits": []},
    }
    status, content_type, raw = await _call(
        session, "POST", f"{API}/containers/create?name={name}", body=body
    )
    t.add(
        "create", {"status": status, "content_type": content_type, "keys": sorted(json.loads(raw))}
    )
    t.add(
        "create same name",
        _error(*await _call(session, "POST", f"{API}/containers/create?name={name}", body=body)),
    )
    t.add(
        "create unknown image",
        _error(
            *await _call(
                session,
                "POST",
                f"{API}/containers/create?name={name}_x",
                body={**body, "Image": "nope:latest"},
            )
        ),
    )

    container = docker.containers.container(name)
    created = await container.show()
    t.add(
        "inspect created",
        {
            "keys": sorted(created),
            "State": sorted(created["State"]),
            "status": created["State"]["Status"],
            "Config.Tty": created["Config"]["Tty"],
            "env first": created["Config"]["Env"][0],
            "Cmd": created["Config"]["Cmd"],
            "Name": created["Name"],
            "Image": created["Image"] == (await docker.images.inspect(image))["Id"],
            "label": created["Config"]["Labels"].get("spark-bot.check"),
            "StartedAt": created["State"]["StartedAt"],
        },
    )

    filters = json.dumps({"container": [name], "event": ["start", "die"]})
    async with session.get(f"http://docker{API}/events", params={"filters": filters}) as events:
        t.add(
            "events", {"status": events.status, "content_type": events.headers.get("Content-Type")}
        )
        status, _, _ = await _call(session, "POST", f"{API}/containers/{name}/start")
        t.add("start", status)
        status, _, _ = await _call(session, "POST", f"{API}/containers/{name}/start")
        t.add("start again", status)
        running = await container.show()
        t.add(
            "inspect running",
            {
                "status": running["State"]["Status"],
                "Running": running["State"]["Running"],
                "Pid": running["State"]["Pid"] > 0,
                "StartedAt": running["State"]["StartedAt"][-1],
            },
        )

        seen = await _follow_until(session, name, {b"out\n", b"err\n"})
        t.add("logs follow", sorted(seen))
        status, _, raw = await _call(
            session, "GET", f"{API}/containers/{name}/logs?stdout=1&stderr=0&tail=all"
        )
        t.add("logs stdout only", [status, frames(raw)])
        status, _, raw = await _call(
            session, "GET", f"{API}/containers/{name}/logs?stdout=1&stderr=1&tail=2&timestamps=1"
        )
        t.add(
            "logs tail 2 with timestamps",
            [
                status,
                sorted(
                    (stream, bool(_STAMP.match(line.decode())), _STAMP.sub("", line.decode()))
                    for stream, line in frames(raw)
                ),
            ],
        )
        t.add(
            "logs through aiodocker",
            sorted("".join(await container.log(stdout=True, stderr=True, tail="all")).splitlines()),
        )

        exec_body = {
            "AttachStdin": False,
            "AttachStdout": True,
            "AttachStderr": True,
            "Tty": False,
            "Cmd": ["sh", "-c", "echo o; echo e >&2; exit 3"],
            "Env": None,
            "Privileged": False,
            "User": "",
            "WorkingDir": "",
            "detachKeys": "",
        }
        status, content_type, raw = await _call(
            session, "POST", f"{API}/containers/{name}/exec", body=exec_body
        )
        exec_id = json.loads(raw)["Id"]
        t.add(
            "exec create",
            {"status": status, "content_type": content_type, "keys": sorted(json.loads(raw))},
        )
        exec_info = await docker.containers.exec(exec_id).inspect()
        t.add(
            "exec inspect before",
            {
                "keys": sorted(exec_info),
                "Running": exec_info["Running"],
                "ExitCode": exec_info["ExitCode"],
                "ProcessConfig": exec_info["ProcessConfig"],
            },
        )
        status, headers, raw = await _hijacked(
            socket_path, f"{API}/exec/{exec_id}/start", {"Detach": False, "Tty": False}
        )
        t.add(
            "exec start attached (hijacked)",
            {"status": status, "headers": headers, "frames": sorted(frames(raw))},
        )
        engine = DockerEngine("node", docker, call_timeout=30)
        t.add(
            "exec_output (controller)", await engine.exec_output(name, ["echo", "hi"], timeout=30)
        )
        followed = engine.follow_log(name, backlog=2, timestamps=False)
        text = ""
        while text.count("\n") < 2:  # pieces as the engine sent them: lines may share one
            text += await anext(followed)
        t.add("follow_log backlog (controller)", sorted(text.splitlines(keepends=True)))
        await followed.aclose()

        # The controller's way of putting `vllm serve` output in the container log.
        execution = await container.exec(
            into_container_log(["sh", "-c", "echo via-exec; echo via-exec-err >&2"])
        )
        answer = await execution.start(detach=True)
        t.add("exec start detached", answer)
        seen = await _follow_until(session, name, {b"via-exec\n", b"via-exec-err\n"})
        t.add("exec output in the container log", sorted(x for x in seen if b"via-exec" in x[1]))
        t.add(
            "exec unknown container",
            _error(*await _call(session, "POST", f"{API}/containers/nope/exec", body=exec_body)),
        )
        t.add("exec inspect unknown", _error(*await _call(session, "GET", f"{API}/exec/nope/json")))

        t.add(
            "delete running, no force",
            _error(*await _call(session, "DELETE", f"{API}/containers/{name}")),
        )
        await container.stop(t=10)
        status, _, _ = await _call(session, "POST", f"{API}/containers/{name}/stop?t=1")
        t.add("stop again", status)
        actions = []
        while len(actions) < 2:
            event = json.loads(await events.content.readline())
            attributes = event["Actor"]["Attributes"]
            actions.append(
                {
                    "Action": event["Action"],
                    "Type": event["Type"],
                    "name": attributes["name"],
                    "exitCode": attributes.get("exitCode"),
                    "label": attributes.get("spark-bot.check"),
                    "keys": sorted(event),
                }
            )
        t.add("events seen", actions)

    # Docker records an exec's end asynchronously after its stream closed (its ExitCode even
    # varies, 3 or 126, when the container stops first): only "not running" is certain by now.
    exec_info = await docker.containers.exec(exec_id).inspect()
    t.add("exec inspect after stop", {"Running": exec_info["Running"], "ran": exec_info["Pid"] > 0})
    stopped = await container.show()
    t.add(
        "inspect stopped",
        {
            "status": stopped["State"]["Status"],
            "Running": stopped["State"]["Running"],
            "ExitCode": stopped["State"]["ExitCode"],
            "Pid": stopped["State"]["Pid"],
            "finished": not stopped["State"]["FinishedAt"].startswith("0001"),
        },
    )
    t.add("logs after stop (follow ends)", sorted(await asyncio.wait_for(_collect(container), 10)))
    t.add(
        "exec on stopped",
        _error(*await _call(session, "POST", f"{API}/containers/{name}/exec", body=exec_body)),
    )
    t.add("kill stopped", _error(*await _call(session, "POST", f"{API}/containers/{name}/kill")))
    status, _, _ = await _call(session, "DELETE", f"{API}/containers/{name}?force=1")
    t.add("delete", status)
    t.add(
        "delete again", _error(*await _call(session, "DELETE", f"{API}/containers/{name}?force=1"))
    )
    t.add("inspect deleted", _error(*await _call(session, "GET", f"{API}/containers/{name}/json")))
    try:
        await container.show()
    except aiodocker.DockerError as error:
        t.add("aiodocker error", [error.status, error.message])

    # What a cancelled launch does: force-remove a container that is still running.
    running = await docker.containers.create(body, name=f"{name}_running")
    await running.start()
    status, _, _ = await _call(session, "DELETE", f"{API}/containers/{name}_running?force=1")
    t.add("delete running, force", status)
    t.add(
        "inspect force-deleted",
        _error(*await _call(session, "GET", f"{API}/containers/{name}_running/json")),
    )


async def _collect(container) -> list[str]:
    chunks = [
        chunk async for chunk in container.log(stdout=True, stderr=True, follow=True, tail="all")
    ]
    return "".join(chunks).splitlines()
