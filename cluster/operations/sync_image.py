"""`sync-image`: the head's image streamed into every node whose image is missing or differs.

The head's engine saves the image (`GET /images/{name}/get`, i.e. `docker save`) and each
such node's engine loads it (`POST /images/load`), chunk by chunk, over the connections
spark-bot already has to both: the bot relays the stream and keeps at most a chunk or two of
it in memory, on no disk. Each engine is read only as fast as the other takes (backpressure).
Copies to several nodes run at once, each its own stream. The image IDs are compared
afterwards. A cancel (or a failure) mid-stream aborts the upload: `docker load` tags nothing
from a tarball it could not read to its end.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator
from contextlib import aclosing
from dataclasses import dataclass, field
from typing import Any

from cluster.config import ClusterConfig
from cluster.diagnosis.failures import IMAGE_NOT_ON_HEAD, IMAGE_STILL_DIFFERS
from cluster.errors import NodeError
from cluster.events import Event, Progress, Transfer
from cluster.nodes import ClusterConnection, NodeConnection
from cluster.operations.preflight import reachable
from cluster.operations.transfer import TransferMeter, describe, duration, size
from cluster.progress.checkpoints import SYNC_IMAGE
from cluster.progress.reporter import Reporter
from cluster.progress.steps import Step, run_steps

CHUNK_BYTES = 256 * 1024  # what the bot holds of the stream at a time (plus aiohttp's buffers)
_BY_ID = {checkpoint.id: checkpoint for checkpoint in SYNC_IMAGE}


@dataclass
class ImageSync:
    config: ClusterConfig
    connection: ClusterConnection
    reporter: Reporter
    report_every_s: float = 1.0
    chunk_bytes: int = CHUNK_BYTES
    head_image: dict[str, Any] = field(default_factory=dict)
    copied: list[str] = field(default_factory=list)

    async def run(self) -> AsyncGenerator[Event, None]:
        steps = [
            Step(_BY_ID["ssh"], self._reachable),
            Step(_BY_ID["image_source"], self._source),
            Step(_BY_ID["image_copied"], self._copy),
            Step(_BY_ID["image_synced"], self._same),
        ]
        async with aclosing(run_steps(steps, self.reporter)) as events:
            async for event in events:
                yield event

    @property
    def image(self) -> str:
        return self.config.container.image

    async def _reachable(self) -> AsyncGenerator[Event, None]:
        yield reachable(self.connection, self.reporter)

    async def _source(self) -> AsyncGenerator[Event, None]:
        head = self.connection.head
        info = await head.docker.inspect_image(self.image)
        if info is None:
            yield self.reporter.known(
                _BY_ID["image_source"],
                IMAGE_NOT_ON_HEAD,
                {"image": self.image, "head": head.name},
                node=head.name,
            )
            return
        self.head_image = info
        yield self.reporter.passed(
            _BY_ID["image_source"],
            f"{head.name}: {self.image} = {info['Id'][:19]} ({size(info.get('Size') or 0)})",
            node=head.name,
        )

    async def _copy(self) -> AsyncGenerator[Event, None]:
        wanted = self.head_image["Id"]
        others = self.connection.ordered()[1:]
        ids = await asyncio.gather(*(node.docker.image_id(self.image) for node in others))
        targets = [node for node, image_id in zip(others, ids, strict=True) if image_id != wanted]
        if not targets:
            yield self.reporter.passed(
                _BY_ID["image_copied"], f"every node already has {wanted[:19]}: nothing copied"
            )
            return
        meters = {
            node.name: TransferMeter(self.head_image.get("Size"), every_s=self.report_every_s)
            for node in targets
        }
        due: set[str] = set()
        told = asyncio.Event()
        copies = {
            asyncio.create_task(
                self._copy_to(node, meters[node.name], due, told), name=f"sync-image to {node.name}"
            ): node
            for node in targets
        }
        loaded: dict[str, list[str]] = {}
        try:
            pending = set(copies)
            while pending:
                waiting = asyncio.create_task(told.wait())
                done, _ = await asyncio.wait(
                    [*pending, waiting], return_when=asyncio.FIRST_COMPLETED
                )
                waiting.cancel()
                told.clear()
                reporting, finished = sorted(due), [task for task in pending if task in done]
                due.clear()
                for name in reporting:
                    yield self._progress(name, meters[name].figures())
                for task in finished:
                    pending.discard(task)
                    name = copies[task].name
                    loaded[name] = task.result()  # a node's error ends the step
                    yield self._progress(name, meters[name].final(), "loaded")
        finally:
            for task in copies:
                task.cancel()
            await asyncio.gather(*copies, return_exceptions=True)
        self.copied = [node.name for node in targets]
        lines = []
        for node in targets:
            meter = meters[node.name]
            took = max(meter.clock() - meter.started, 1e-6)
            said = "; ".join(loaded[node.name]) or "the engine said nothing"
            lines.append(
                f"{node.name}: {size(meter.done)} in {duration(took)} "
                f"({size(meter.done / took)}/s): {said}"
            )
        yield self.reporter.passed(_BY_ID["image_copied"], "\n".join(lines))

    def _progress(self, node: str, figures: Transfer, then: str = "") -> Progress:
        return Progress(
            elapsed_s=self.reporter.elapsed(),
            phase="sync-image",
            node=node,
            message=f"{self.image} to {node}: {describe(figures)}" + (f", {then}" if then else ""),
            transfer=figures,
        )

    async def _copy_to(
        self, node: NodeConnection, meter: TransferMeter, due: set[str], told: asyncio.Event
    ) -> list[str]:
        # The head is read by a task of ours, handing on one chunk at a time: however the upload
        # ends (aiohttp's writer cancelled mid-write leaves what it iterates suspended), that task
        # is cancelled and the head's stream closed here, not at garbage collection.
        chunks: asyncio.Queue[bytes | NodeError | None] = asyncio.Queue(maxsize=1)
        reading = asyncio.create_task(self._read_head(chunks, meter, node.name, due, told))

        async def tarball() -> AsyncGenerator[bytes]:
            while (chunk := await chunks.get()) is not None:
                if isinstance(chunk, NodeError):
                    raise chunk  # the head's error: the upload is aborted, the error kept
                yield chunk

        try:
            return await node.docker.load_image(tarball(), stall_s=self.config.timeouts.image_stall)
        finally:
            reading.cancel()
            await asyncio.gather(reading, return_exceptions=True)

    async def _read_head(
        self,
        chunks: asyncio.Queue[bytes | NodeError | None],
        meter: TransferMeter,
        node: str,
        due: set[str],
        told: asyncio.Event,
    ) -> None:
        saved = self.connection.head.docker.save_image(
            self.image, chunk_bytes=self.chunk_bytes, stall_s=self.config.timeouts.image_stall
        )
        try:
            async with aclosing(saved):
                async for chunk in saved:
                    await chunks.put(chunk)  # waits while the node has not taken the last one
                    if meter.add(len(chunk)):
                        due.add(node)
                        told.set()
        except NodeError as error:
            await chunks.put(error)
            return
        await chunks.put(None)

    async def _same(self) -> AsyncGenerator[Event, None]:
        nodes = self.connection.ordered()
        ids = dict(
            zip(
                [n.name for n in nodes],
                await asyncio.gather(*(n.docker.image_id(self.image) for n in nodes)),
                strict=True,
            )
        )
        listing = "; ".join(
            f"{name}: {(image_id or 'none')[:19]}" for name, image_id in ids.items()
        )
        if len(set(ids.values())) > 1:
            differs = next(
                name for name, image_id in ids.items() if image_id != self.head_image["Id"]
            )
            yield self.reporter.known(
                _BY_ID["image_synced"],
                IMAGE_STILL_DIFFERS,
                {"image": self.image, "listing": listing},
                node=differs,
                evidence=listing,
            )
            return
        yield self.reporter.passed(
            _BY_ID["image_synced"],
            f"Docker image consistency check passed: {self.image} = "
            f"{self.head_image['Id'][:19]} on every node",
        )
