"""One node's Docker engine, as the controller uses it: every request bounded, every error ours.

A thin facade over aiodocker: each call runs under `timeouts.docker` (a hung engine becomes a
NodeTimedOut naming the node, not a wait without end) and inside the error seam. Streams (a
followed log, the event stream) have no overall bound; the phases that read them do. An image's
tarball (`save_image`, `load_image`: many GB) has no overall bound either, only a stall bound:
no byte moved for that long fails it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncGenerator, AsyncIterable, Awaitable
from contextlib import aclosing
from datetime import datetime
from typing import Any, TypeVar

import aiodocker
import aiohttp

from cluster.config import NodeConfig
from cluster.errors import ContainerMissing, ImageMissing, NodeError
from cluster.nodes.docker_stream import log_texts
from cluster.nodes.seam import docker_errors, opening_engine

R = TypeVar("R")

_UNBOUNDED = aiohttp.ClientTimeout(total=None, sock_read=None)
PAST_EVENTS_BYTES = 1 << 20  # 256 events of ~1 KB, with room


class DockerEngine:
    def __init__(self, node: str, client: aiodocker.Docker, call_timeout: float):
        self.node = node
        self.call_timeout = call_timeout
        self._client = client

    @classmethod
    async def open(
        cls, config: NodeConfig, url: str, *, connect_timeout: float, call_timeout: float
    ) -> DockerEngine:
        """A client for the engine at `url`, proven to answer `/version`."""
        client = aiodocker.Docker(url=url)
        try:
            with opening_engine(config):
                async with asyncio.timeout(connect_timeout):
                    await client.version()
        except BaseException:
            await client.close()
            raise
        return cls(config.name, client, call_timeout)

    async def close(self) -> None:
        await self._client.close()

    async def _bounded(
        self,
        doing: str,
        call: Awaitable[R],
        *,
        container: str | None = None,
        image: str | None = None,
        extra_s: float = 0.0,
    ) -> R:
        timeout = self.call_timeout + extra_s
        with docker_errors(self.node, doing, timeout=timeout, container=container, image=image):
            async with asyncio.timeout(timeout):
                return await call

    async def version(self) -> dict[str, Any]:
        return await self._bounded("answering /version", self._client.version())

    async def inspect_container(self, name: str) -> dict[str, Any]:
        """`docker inspect` of a container; ContainerMissing if there is none by that name."""
        return await self._bounded(
            f"inspecting container {name}", self._container(name).show(), container=name
        )

    async def find_container(self, name: str) -> dict[str, Any] | None:
        try:
            return await self.inspect_container(name)
        except ContainerMissing:
            return None

    async def inspect_image(self, reference: str) -> dict[str, Any] | None:
        """`docker image inspect` of `reference`, None when the node does not have it."""
        try:
            info: dict[str, Any] = await self._bounded(
                f"inspecting image {reference}",
                self._client.images.inspect(reference),
                image=reference,
            )
        except ImageMissing:
            return None
        return info

    async def image_id(self, reference: str) -> str | None:
        """The ID of the image `reference` on this node, None when the node does not have it."""
        info = await self.inspect_image(reference)
        return None if info is None else str(info["Id"])

    async def past_events(
        self, *, within_s: float, filters: dict[str, list[str]]
    ) -> list[dict[str, Any]]:
        """The engine's events of the last `within_s` seconds (by the engine's own clock) that
        match `filters`, oldest first: what it still keeps of them (moby keeps its last 256)."""

        async def read() -> list[dict[str, Any] | None]:
            info = await self._client.system.info()
            now = datetime.fromisoformat(str(info["SystemTime"]).replace("Z", "+00:00"))
            until = now.timestamp()
            params = {
                "since": f"{until - within_s:.3f}",
                "until": f"{until:.3f}",
                "filters": json.dumps(filters),
            }
            response = await self._client._do_query("events", method="GET", params=params)
            data = b""
            try:
                while len(data) < PAST_EVENTS_BYTES:
                    chunk = await response.content.read(PAST_EVENTS_BYTES - len(data))
                    if not chunk:
                        break
                    data += chunk
            finally:
                response.close()
            return [_json_or_none(line) for line in data.decode(errors="replace").splitlines()]

        return [e for e in await self._bounded("listing its recent events", read()) if e]

    async def save_image(
        self, reference: str, *, chunk_bytes: int, stall_s: float
    ) -> AsyncGenerator[bytes]:
        """`docker save reference`: the tarball in chunks of at most `chunk_bytes`, read only as
        fast as they are taken (the engine waits meanwhile: nothing piles up here). NodeTimedOut
        when the engine sends nothing for `stall_s` while a chunk is wanted."""
        doing = f"sending image {reference}"
        with docker_errors(self.node, doing, timeout=stall_s, image=reference, stalled=True):
            # Requested here rather than through aiodocker's `export_image`, whose response is
            # never released when the reader stops early; this one is closed on every way out.
            async with asyncio.timeout(stall_s):
                response = await self._client._do_query(
                    f"images/{reference}/get", method="GET", timeout=_UNBOUNDED
                )
            try:
                while True:
                    async with asyncio.timeout(stall_s):
                        chunk = await response.content.read(chunk_bytes)
                    if not chunk:
                        return
                    yield chunk
            finally:
                response.close()

    async def load_image(self, tarball: AsyncIterable[bytes], *, stall_s: float) -> list[str]:
        """`docker load` of the chunks of `tarball`, sent as they come; the engine's messages
        ("Loaded image: …"). NodeTimedOut when this engine takes nothing for `stall_s` (the time
        spent waiting for the tarball's own source does not count), DockerRefused when it
        rejects the tarball; an error of the tarball's source leaves as that source's error."""
        loop = asyncio.get_running_loop()
        source_error: NodeError | None = None
        messages: list[str] = []

        async def body(deadline: asyncio.Timeout) -> AsyncGenerator[bytes]:
            nonlocal source_error
            try:
                async for chunk in tarball:
                    deadline.reschedule(loop.time() + stall_s)
                    yield chunk
                    deadline.reschedule(None)  # written: waiting for the source is not ours
            except NodeError as error:
                source_error = error
                raise  # aborts the upload: the engine never sees a tarball that looks whole
            deadline.reschedule(loop.time() + stall_s)

        try:
            with docker_errors(self.node, "loading an image", timeout=stall_s, stalled=True):
                async with asyncio.timeout(None) as deadline:
                    # not aiodocker's `import_image`: its response is never released on an error
                    response = await self._client._do_query(
                        "images/load",
                        method="POST",
                        data=body(deadline),
                        headers={"Content-Type": "application/x-tar"},
                        timeout=_UNBOUNDED,
                        chunked=True,
                    )
                    try:
                        # read here, not with aiodocker's json stream: it takes a broken
                        # connection for the end of the answer
                        while line := await response.content.readline():
                            deadline.reschedule(loop.time() + stall_s)
                            item = json.loads(line)
                            if item.get("error") or item.get("errorDetail"):
                                detail = item.get("errorDetail") or {}
                                reason = detail.get("message") or item.get("error")
                                raise aiodocker.DockerError(500, str(reason))
                            if item.get("stream"):
                                messages.append(str(item["stream"]).strip())
                    finally:
                        response.close()
        except NodeError:
            if source_error is not None:
                raise source_error from None
            raise
        return messages

    async def create_and_start(self, body: dict[str, Any], name: str) -> str:
        async def create_and_start() -> str:
            container = await self._client.containers.create(body, name=name)
            await container.start()
            return container.id

        return await self._bounded(f"creating and starting container {name}", create_and_start())

    async def run_to_end(
        self, body: dict[str, Any], name: str, *, timeout: float
    ) -> tuple[int, str]:
        """A throw-away container: created, run until it exits, its exit status and output
        (stdout and stderr) read, then removed on every way out (a leftover of a crashed
        caller by that name first); NodeTimedOut when it runs longer than `timeout`."""
        with contextlib.suppress(ContainerMissing):
            await self.remove(name)

        async def run() -> tuple[int, str]:
            container = await self._client.containers.create(body, name=name)
            await container.start()
            status = await container.wait()
            chunks = await container.log(stdout=True, stderr=True)
            return int(status.get("StatusCode", -1)), "".join(chunks)

        try:
            return await self._bounded(
                f"running a throw-away container {name}",
                run(),
                container=name,
                extra_s=max(0.0, timeout - self.call_timeout),
            )
        finally:
            with contextlib.suppress(ContainerMissing):
                await self.remove(name)

    async def stop(self, name: str, *, grace_s: int) -> None:
        """SIGTERM, then SIGKILL after `grace_s` seconds."""
        await self._bounded(
            f"stopping container {name}",
            self._container(name).stop(t=grace_s),
            container=name,
            extra_s=grace_s,
        )

    async def remove(self, name: str) -> None:
        await self._bounded(
            f"removing container {name}", self._container(name).delete(force=True), container=name
        )

    async def log_tail(self, name: str, lines: int) -> str:
        chunks = await self._bounded(
            f"reading container {name}'s log",
            self._container(name).log(stdout=True, stderr=True, tail=str(lines)),
            container=name,
        )
        return "".join(chunks)

    async def exec_output(self, name: str, argv: list[str], *, timeout: float) -> str:
        """What `argv`, run inside container `name`, printed; NodeTimedOut after `timeout`."""

        async def run() -> str:
            execution = await self._container(name).exec(argv)
            chunks = []
            async with execution.start(detach=False) as stream:
                while (message := await stream.read_out()) is not None:
                    chunks.append(message.data.decode(errors="replace"))
            return "".join(chunks)

        return await self._bounded(
            f"running `{argv[0]}` in container {name}",
            run(),
            container=name,
            extra_s=max(0.0, timeout - self.call_timeout),
        )

    async def exec_detached(self, name: str, argv: list[str]) -> None:
        async def start() -> None:
            execution = await self._container(name).exec(argv)
            await execution.start(detach=True)

        await self._bounded(f"starting `{argv[0]}` in container {name}", start(), container=name)

    async def follow_log(
        self, name: str, *, backlog: int | str, timestamps: bool, since: datetime | None = None
    ) -> AsyncGenerator[str, None]:
        """The container's log as it is written, from `backlog` lines back (none older than
        `since`), until it stops."""
        info = await self.inspect_container(name)
        doing = f"following container {name}'s log"
        with docker_errors(self.node, doing, timeout=None, container=name):
            # Requested here rather than through aiodocker's `log(follow=True)`, whose response
            # is never released when the follower stops early (Python then warns of an
            # unclosed connection); this one is closed on every way out.
            response = await self._client._do_query(
                f"containers/{name}/logs",
                method="GET",
                timeout=_UNBOUNDED,
                params={
                    "stdout": True,
                    "stderr": True,
                    "follow": True,
                    "tail": str(backlog),
                    "timestamps": timestamps,
                    **({"since": f"{since.timestamp():.6f}"} if since is not None else {}),
                },
            )
            try:
                stream = log_texts(response, tty=bool(info["Config"].get("Tty")))
                async with aclosing(stream):
                    async for chunk in stream:
                        yield chunk
            finally:
                response.close()

    async def events(
        self, container: str, actions: list[str]
    ) -> AsyncGenerator[dict[str, Any], None]:
        """The engine's events for `container` (only `actions`), until the stream ends."""
        filters = json.dumps({"container": [container], "event": actions})
        with docker_errors(self.node, "following the engine's events", timeout=None):
            subscriber = self._client.events.subscribe(filters=filters)
            try:
                while (event := await subscriber.get()) is not None:
                    yield event
            finally:
                await self._client.events.stop()

    def _container(self, name: str) -> aiodocker.containers.DockerContainer:
        return self._client.containers.container(name)


def _json_or_none(line: str) -> dict[str, Any] | None:
    """One event of the engine's stream; None for a blank line or the one a bounded read cut."""
    try:
        value = json.loads(line)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None
