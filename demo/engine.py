"""The state behind the emulated Docker engine: one image, containers as process groups, execs,
container logs and the event stream. The HTTP shape lives in `demo/docker_api.py`.

A "container" is its Cmd run as a local process group with the container's Env (image Env
under the create Env, as Docker merges them). What a kernel gives a real container is
emulated deliberately:

- PID 1: the container's main process. When it exits, every other process of the container is
  killed, as the kernel does when a PID namespace's init dies.
- cgroup: every process of a container carries `SPARK_DEMO_CONTAINER=<id>` in its environment;
  after the process group is killed, a sweep of /proc kills whatever escaped the group (a
  daemon that called setsid), so nothing outlives its container.
- /proc/1: in a container, /proc/1 is the container's init; here it is the main process's
  PID. Exec arguments that mention `/proc/1/` are rewritten to `/proc/<main pid>/`, so
  the controller's `sh -c 'exec vllm serve ... >/proc/1/fd/1 2>/proc/1/fd/2'` writes into the
  container's stdout and stderr pipes, hence into its log, as it does under Docker.
- /tmp: each container gets its own state directory (`SPARK_EMU_STATE_DIR`, the emulator's
  /tmp/ray), since containers do not share /tmp.
"""

from __future__ import annotations

import asyncio
import os
import re
import secrets
import shutil
import signal
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any

CONTAINER_MARKER = "SPARK_DEMO_CONTAINER"
NEVER = "0001-01-01T00:00:00Z"
_PROC_1 = re.compile(r"/proc/1/")
# After PID 1 died and the group was killed, how long the log pipes may take to drain.
_DRAIN_S = 5.0
_LOG_PIECE = 16 * 1024  # Docker splits a longer log line into pieces of this size


class EngineError(Exception):
    """An API error, with the status code and message the real engine answers."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status
        self.message = message


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _new_id() -> str:
    return secrets.token_hex(32)


@dataclass(frozen=True)
class Image:
    tag: str
    id: str
    env: tuple[str, ...]
    labels: dict[str, str]
    created: str


def _timestamp_ns() -> str:
    """RFC 3339 with nanoseconds, as Docker stamps log lines (`timestamps=1`)."""
    now = time.time_ns()
    seconds = datetime.fromtimestamp(now // 1_000_000_000, UTC).strftime("%Y-%m-%dT%H:%M:%S")
    return f"{seconds}.{now % 1_000_000_000:09d}Z"


LogRecord = tuple[int, bytes, str]  # stream (1 stdout, 2 stderr), the line, when it was read


class LogBook:
    """A container's output, one record per line as Docker's log driver stores it."""

    def __init__(self) -> None:
        self.records: list[LogRecord] = []
        self.closed = False
        self._changed = asyncio.Condition()

    async def append(self, stream: int, data: bytes) -> None:
        async with self._changed:
            self.records.append((stream, data, _timestamp_ns()))
            self._changed.notify_all()

    async def close(self) -> None:
        async with self._changed:
            self.closed = True
            self._changed.notify_all()

    def tail(self, tail: int | None, streams: set[int]) -> tuple[list[LogRecord], int]:
        """The last `tail` lines (None: all), then only those of `streams`, as Docker's log
        driver counts the tail over both streams before filtering."""
        chosen = self.records if tail is None else self.records[-tail:] if tail else []
        return [r for r in chosen if r[0] in streams], len(self.records)

    def _news_after(self, index: int) -> bool:
        return len(self.records) > index or self.closed

    async def follow(self, start: int, streams: set[int]) -> AsyncIterator[LogRecord]:
        """Records from index `start` as they come, until the container's output ends."""
        index = start
        while True:
            async with self._changed:
                await self._changed.wait_for(partial(self._news_after, index))
                fresh = self.records[index:]
                index = len(self.records)
                closed = self.closed
            for record in fresh:
                if record[0] in streams:
                    yield record
            if closed and index == len(self.records):
                return


@dataclass
class ExecInstance:
    id: str
    container: Container
    cmd: list[str]
    env: list[str]
    attach_stdout: bool
    attach_stderr: bool
    tty: bool
    privileged: bool
    running: bool = False
    exit_code: int | None = None
    pid: int = 0
    started: bool = False

    def inspect(self) -> dict[str, Any]:
        return {
            "ID": self.id,
            "Running": self.running,
            "ExitCode": self.exit_code,
            "ProcessConfig": {
                "tty": self.tty,
                "entrypoint": self.cmd[0] if self.cmd else "",
                "arguments": self.cmd[1:],
                "privileged": self.privileged,
            },
            "OpenStdin": False,
            "OpenStderr": self.attach_stderr,
            "OpenStdout": self.attach_stdout,
            "CanRemove": False,
            "ContainerID": self.container.id,
            "DetachKeys": "",
            "Pid": self.pid,
        }


@dataclass
class Container:
    id: str
    name: str
    body: dict[str, Any]
    image: Image
    directory: Path
    created: str = field(default_factory=_now)
    status: str = "created"
    exit_code: int = 0
    error: str = ""
    started_at: str = NEVER
    finished_at: str = NEVER
    process: asyncio.subprocess.Process | None = None
    log: LogBook = field(default_factory=LogBook)
    exec_ids: list[str] = field(default_factory=list)
    exited: asyncio.Event = field(default_factory=asyncio.Event)
    tasks: list[asyncio.Task[None]] = field(default_factory=list)

    @property
    def running(self) -> bool:
        return self.status == "running"

    @property
    def env(self) -> list[str]:
        """Config.Env: the create Env, then the image's variables the create Env does not set."""
        own = list(self.body.get("Env") or [])
        names = {item.split("=", 1)[0] for item in own}
        return own + [item for item in self.image.env if item.split("=", 1)[0] not in names]

    @property
    def labels(self) -> dict[str, str]:
        return {**self.image.labels, **(self.body.get("Labels") or {})}

    def inspect(self) -> dict[str, Any]:
        cmd = list(self.body.get("Cmd") or [])
        pid = self.process.pid if self.running and self.process else 0
        return {
            "Id": self.id,
            "Created": self.created,
            "Path": cmd[0] if cmd else "",
            "Args": cmd[1:],
            "State": {
                "Status": self.status,
                "Running": self.running,
                "Paused": False,
                "Restarting": False,
                "OOMKilled": False,
                "Dead": False,
                "Pid": pid,
                "ExitCode": self.exit_code,
                "Error": self.error,
                "StartedAt": self.started_at,
                "FinishedAt": self.finished_at,
            },
            "Image": self.image.id,
            "ResolvConfPath": "",
            "HostnamePath": "",
            "HostsPath": "",
            "LogPath": "",
            "Name": "/" + self.name,
            "RestartCount": 0,
            "Driver": "emulated",
            "Platform": "linux",
            "MountLabel": "",
            "ProcessLabel": "",
            "AppArmorProfile": "",
            "ExecIDs": list(self.exec_ids) or None,
            "HostConfig": dict(self.body.get("HostConfig") or {}),
            "GraphDriver": {"Data": None, "Name": "emulated"},
            "Mounts": [],
            "Config": {
                "Hostname": os.uname().nodename,
                "Domainname": "",
                "User": "",
                "AttachStdin": False,
                "AttachStdout": False,
                "AttachStderr": False,
                "Tty": False,
                "OpenStdin": False,
                "StdinOnce": False,
                "Env": self.env,
                "Cmd": cmd,
                "Image": self.body.get("Image", ""),
                "Volumes": None,
                "WorkingDir": "",
                "Entrypoint": None,
                "OnBuild": None,
                "Labels": self.labels,
            },
            "NetworkSettings": {"Networks": {"host": {}}},
        }


class Engine:
    """One node's engine state. `runtime_env` is the emulated machine (what a container sees of
    the host, e.g. where /sys/class/net is): added to every process, never shown in Config.Env."""

    def __init__(self, root: Path, image: Image, runtime_env: dict[str, str]):
        self.root = root
        self.image = image
        self.runtime_env = runtime_env
        self.containers: dict[str, Container] = {}
        self.execs: dict[str, ExecInstance] = {}
        self._subscribers: list[
            tuple[asyncio.Queue[dict[str, Any] | None], dict[str, list[str]]]
        ] = []

    # -- lookups ----------------------------------------------------------------------------

    def inspect_image(self, name: str) -> Image:
        if name in (self.image.tag, self.image.id) or self.image.id.startswith("sha256:" + name):
            return self.image
        raise EngineError(404, f"no such image: {name}: No such image: {name}")

    def container(self, ref: str) -> Container:
        ref = ref.removeprefix("/")
        for container in self.containers.values():
            if ref in (container.name, container.id):
                return container
        matches = [c for c in self.containers.values() if c.id.startswith(ref)] if ref else []
        if len(matches) == 1:
            return matches[0]
        raise EngineError(404, f"No such container: {ref}")

    def exec_instance(self, exec_id: str) -> ExecInstance:
        try:
            return self.execs[exec_id]
        except KeyError:
            raise EngineError(404, f"No such exec instance: {exec_id}") from None

    # -- containers -------------------------------------------------------------------------

    def create(self, body: dict[str, Any], name: str | None) -> Container:
        image_name = body.get("Image", "")
        if image_name not in (self.image.tag, self.image.id):
            raise EngineError(404, f"No such image: {image_name}")
        container_id = _new_id()
        name = name or f"emulated_{container_id[:8]}"
        for other in self.containers.values():
            if other.name == name:
                raise EngineError(
                    409,
                    f'Conflict. The container name "/{name}" is already in use by container '
                    f'"{other.id}". You have to remove (or rename) that container to be able to '
                    "reuse that name.",
                )
        directory = self.root / "containers" / container_id[:12]
        (directory / "tmp").mkdir(parents=True)
        container = Container(container_id, name, body, self.image, directory)
        self.containers[container_id] = container
        self._emit(container, "create")
        return container

    def _process_env(self, container: Container, extra: Sequence[str] = ()) -> dict[str, str]:
        env = dict(self.runtime_env)
        for item in [*container.env, *extra]:
            key, _, value = item.partition("=")
            env[key] = value
        env["HOME"] = str(container.directory)
        env["SPARK_EMU_STATE_DIR"] = str(container.directory / "tmp" / "ray")
        env[CONTAINER_MARKER] = container.id
        return env

    def _argv(self, container: Container, argv: list[str]) -> list[str]:
        assert container.process is not None
        return [_PROC_1.sub(f"/proc/{container.process.pid}/", arg) for arg in argv]

    async def start(self, container: Container) -> bool:
        """Start the container's Cmd; False when it already runs (Docker's 304)."""
        if container.running:
            return False
        if container.status != "created":
            raise EngineError(
                409,
                f"container {container.id} has already run; the emulated engine does not restart containers",
            )
        cmd = list(container.body.get("Cmd") or [])
        env = self._process_env(container)
        if not cmd or shutil.which(cmd[0], path=env.get("PATH")) is None:
            what = cmd[0] if cmd else "(no command)"
            container.status, container.exit_code = "created", 127
            container.error = f'exec: "{what}": executable file not found in $PATH'
            raise EngineError(
                400,
                "failed to create shim: OCI runtime create failed: container_linux.go:380: "
                f"starting container process caused: {container.error}: unknown",
            )
        process = await asyncio.create_subprocess_exec(
            *cmd,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=env,
            cwd=container.directory,
            process_group=0,
            limit=_LOG_PIECE,
        )
        container.process = process
        container.status, container.started_at = "running", _now()
        pumps = [
            asyncio.create_task(self._pump(container, process.stdout, 1)),
            asyncio.create_task(self._pump(container, process.stderr, 2)),
        ]
        container.tasks = [*pumps, asyncio.create_task(self._reap(container, pumps))]
        self._emit(container, "start")
        return True

    async def _pump(
        self, container: Container, reader: asyncio.StreamReader | None, stream: int
    ) -> None:
        assert reader is not None
        while True:
            try:
                line = await reader.readuntil(b"\n")
            except asyncio.IncompleteReadError as end:
                if end.partial:
                    await container.log.append(stream, end.partial)
                return
            except asyncio.LimitOverrunError:
                # As Docker's log drivers do, a longer line is logged in pieces (no newline
                # between them), so an endless line neither stalls nor fills the engine.
                line = await reader.read(_LOG_PIECE)
            await container.log.append(stream, line)

    async def _reap(self, container: Container, pumps: list[asyncio.Task[None]]) -> None:
        assert container.process is not None
        code = await container.process.wait()
        # PID 1 is gone: the kernel kills the rest of the container.
        kill_container_processes(container.process.pid, container.id, signal.SIGKILL)
        try:
            async with asyncio.timeout(_DRAIN_S):
                await asyncio.gather(*pumps)
        except TimeoutError:
            for pump in pumps:
                pump.cancel()
        container.exit_code = code if code >= 0 else 128 - code
        container.status, container.finished_at = "exited", _now()
        await container.log.close()
        container.exited.set()
        self._emit(container, "die", exitCode=str(container.exit_code))

    async def kill(self, container: Container, signal_name: str = "SIGKILL") -> None:
        if not container.running:
            raise EngineError(
                409,
                f"Cannot kill container: {container.name}: Container {container.id} is not running",
            )
        number = _signal_number(signal_name)
        self._emit(container, "kill", signal=str(number))
        assert container.process is not None
        kill_container_processes(container.process.pid, container.id, number)

    async def stop(self, container: Container, timeout: float = 10) -> bool:
        """SIGTERM, then SIGKILL after `timeout` s; False when it was not running (304)."""
        if not container.running:
            return False
        assert container.process is not None
        self._emit(container, "kill", signal=str(int(signal.SIGTERM)))
        kill_container_processes(container.process.pid, container.id, signal.SIGTERM)
        try:
            async with asyncio.timeout(timeout):
                await container.exited.wait()
        except TimeoutError:
            self._emit(container, "kill", signal=str(int(signal.SIGKILL)))
            kill_container_processes(container.process.pid, container.id, signal.SIGKILL)
            await container.exited.wait()
        self._emit(container, "stop")
        return True

    async def remove(self, container: Container, force: bool) -> None:
        if container.running:
            if not force:
                raise EngineError(
                    409,
                    f"You cannot remove a running container {container.id}. Stop the container "
                    "before attempting removal or force remove",
                )
            await self.kill(container)
            await container.exited.wait()
        await asyncio.gather(*container.tasks, return_exceptions=True)
        self.containers.pop(container.id, None)
        for exec_id in container.exec_ids:
            self.execs.pop(exec_id, None)
        shutil.rmtree(container.directory, ignore_errors=True)
        self._emit(container, "destroy")

    # -- execs ------------------------------------------------------------------------------

    def create_exec(self, container: Container, body: dict[str, Any]) -> ExecInstance:
        if not container.running:
            raise EngineError(409, f"Container {container.id} is not running")
        cmd = body.get("Cmd") or []
        if isinstance(cmd, str):
            cmd = [cmd]
        instance = ExecInstance(
            id=_new_id(),
            container=container,
            cmd=list(cmd),
            env=list(body.get("Env") or []),
            attach_stdout=bool(body.get("AttachStdout")),
            attach_stderr=bool(body.get("AttachStderr")),
            tty=bool(body.get("Tty")),
            privileged=bool(body.get("Privileged")),
        )
        self.execs[instance.id] = instance
        container.exec_ids.append(instance.id)
        return instance

    async def start_exec(
        self, instance: ExecInstance, *, attached: bool
    ) -> AsyncIterator[tuple[int, bytes]]:
        """Start the exec (errors are raised here, before any answer is sent); when attached,
        the returned iterator yields its (stream, chunk) output until it exits."""
        if instance.started:
            raise EngineError(409, f"Error: Exec command {instance.id} has already run")
        container = instance.container
        if not container.running or container.process is None:
            raise EngineError(409, f"Container {container.id} is not running")
        instance.started = True
        pipe = asyncio.subprocess.PIPE if attached else asyncio.subprocess.DEVNULL
        argv = self._argv(container, instance.cmd)
        try:
            process = await asyncio.create_subprocess_exec(
                *argv,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=pipe if instance.attach_stdout else asyncio.subprocess.DEVNULL,
                stderr=pipe if instance.attach_stderr else asyncio.subprocess.DEVNULL,
                env=self._process_env(container, instance.env),
                cwd=container.directory,
                process_group=container.process.pid,
            )
        except OSError as error:
            instance.exit_code = 127 if isinstance(error, FileNotFoundError) else 126
            message = (
                "OCI runtime exec failed: exec failed: container_linux.go:380: starting container "
                f'process caused: exec: "{argv[0] if argv else ""}": executable file not found in $PATH: unknown\r\n'
            ).encode()
            return _single((1, message))
        instance.running, instance.pid = True, process.pid
        # Its end is recorded whether or not a client still reads its output.
        container.tasks.append(
            asyncio.get_running_loop().create_task(self._finish_exec(instance, process))
        )
        return self._exec_output(process) if attached else _single()

    async def _exec_output(
        self, process: asyncio.subprocess.Process
    ) -> AsyncIterator[tuple[int, bytes]]:
        queue: asyncio.Queue[tuple[int, bytes] | None] = asyncio.Queue()

        async def read(reader: asyncio.StreamReader | None, stream: int) -> None:
            if reader is not None:
                while chunk := await reader.read(65536):
                    queue.put_nowait((stream, chunk))
            queue.put_nowait(None)

        readers = [
            asyncio.create_task(read(process.stdout, 1)),
            asyncio.create_task(read(process.stderr, 2)),
        ]
        try:
            ended = 0
            while ended < len(readers):
                item = await queue.get()
                if item is None:
                    ended += 1
                else:
                    yield item
        finally:
            for reader in readers:
                reader.cancel()

    async def _finish_exec(
        self, instance: ExecInstance, process: asyncio.subprocess.Process
    ) -> None:
        code = await process.wait()
        instance.running, instance.exit_code = False, code if code >= 0 else 128 - code

    # -- events -----------------------------------------------------------------------------

    def subscribe(self, filters: dict[str, list[str]]) -> asyncio.Queue[dict[str, Any] | None]:
        queue: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue()
        self._subscribers.append((queue, filters))
        return queue

    def unsubscribe(self, queue: asyncio.Queue[dict[str, Any] | None]) -> None:
        self._subscribers = [(q, f) for q, f in self._subscribers if q is not queue]

    def _emit(self, container: Container, action: str, **attributes: str) -> None:
        now = datetime.now(UTC)
        event = {
            "status": action,
            "id": container.id,
            "from": container.body.get("Image", ""),
            "Type": "container",
            "Action": action,
            "Actor": {
                "ID": container.id,
                "Attributes": {
                    **container.labels,
                    **attributes,
                    "image": container.body.get("Image", ""),
                    "name": container.name,
                },
            },
            "scope": "local",
            "time": int(now.timestamp()),
            "timeNano": int(now.timestamp() * 1e9),
        }
        for queue, filters in self._subscribers:
            if _matches(event, container, filters):
                queue.put_nowait(event)

    # -- shutdown ---------------------------------------------------------------------------

    async def aclose(self) -> None:
        """Kill every container, end every event stream."""
        for container in list(self.containers.values()):
            if container.running and container.process is not None:
                kill_container_processes(container.process.pid, container.id, signal.SIGKILL)
        await asyncio.gather(*(c.exited.wait() for c in self.containers.values() if c.running))
        await asyncio.gather(
            *(t for c in self.containers.values() for t in c.tasks), return_exceptions=True
        )
        for container in self.containers.values():
            await container.log.close()
        for queue, _ in self._subscribers:
            queue.put_nowait(None)


async def _single(*items: tuple[int, bytes]) -> AsyncIterator[tuple[int, bytes]]:
    for item in items:
        yield item


def _matches(event: dict[str, Any], container: Container, filters: dict[str, list[str]]) -> bool:
    for key, wanted in filters.items():
        if key == "container":
            if not any(
                w in (container.name, container.id) or container.id.startswith(w) for w in wanted
            ):
                return False
        elif key == "event":
            if event["Action"] not in wanted:
                return False
        elif key == "type":
            if "container" not in wanted:
                return False
        elif key == "label":
            labels = container.labels
            for item in wanted:
                name, _, value = item.partition("=")
                if name not in labels or (value and labels[name] != value):
                    return False
    return True


def _signal_number(name: str) -> int:
    name = name.upper()
    if name.isdigit():
        return int(name)
    try:
        return int(signal.Signals[name if name.startswith("SIG") else "SIG" + name])
    except KeyError:
        raise EngineError(400, f"Invalid signal: {name}") from None


def kill_container_processes(group: int, container_id: str, number: int) -> None:
    """Signal a container's process group, then every process that escaped it (by marker)."""
    try:
        os.killpg(group, number)
    except (ProcessLookupError, PermissionError):
        pass
    for pid in processes_marked(container_id):
        try:
            os.kill(pid, number)
        except (ProcessLookupError, PermissionError):
            pass


def processes_marked(value: str, marker: str = CONTAINER_MARKER) -> list[int]:
    """PIDs of this user's processes whose environment holds marker=value (Linux /proc)."""
    needle = f"{marker}={value}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes()
        except OSError:
            continue
        if needle in environ.split(b"\0"):
            found.append(int(entry.name))
    return found
