"""`sync-image` against stand-in engines (no lab): the stream, its progress, its errors (the
source dying or stalling, the target refusing or not reading), backpressure and a cancel."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, aclosing, asynccontextmanager
from pathlib import Path

import pytest

from cluster.config import ClusterConfig, Secrets, Timeouts
from cluster.controller import Controller
from cluster.events import CheckpointPassed, Event, Failed, Progress
from testkit.docker_standin import ImageEngine, docker_standin
from testkit.lab_cluster import collect
from testkit.local_cluster import local_cluster

pytestmark = pytest.mark.timeout(60)
IMAGE = "spark/vllm:test"
HEAD_ID = "sha256:" + "a" * 64
OTHER_ID = "sha256:" + "b" * 64
MiB = 1024 * 1024


def two_nodes(sockets: list[Path], *, image_stall: float = 10) -> ClusterConfig:
    return local_cluster(
        "pair",
        sockets,
        names=[f"spark-{i}" for i in range(len(sockets))],
        fabric_ips=["127.0.0.1"] * len(sockets),
        image=IMAGE,
        serve={"served_model_name": "model", "backend": "mp", "tensor_parallel_size": 2},
        timeouts=Timeouts(connect=5, docker=5, image_stall=image_stall),
    )


@asynccontextmanager
async def engines(
    tmp_path: Path, *images: dict[str, dict], image_stall: float = 10
) -> AsyncIterator[tuple[Controller, list[ImageEngine]]]:
    stand_ins = [ImageEngine(found) for found in images]
    async with AsyncExitStack() as stack:
        sockets = [
            await stack.enter_async_context(
                docker_standin(Path("/tmp") / f"spark-img{i}-{tmp_path.name[-16:]}.sock", engine)
            )
            for i, engine in enumerate(stand_ins)
        ]
        yield Controller(two_nodes(sockets, image_stall=image_stall), Secrets({})), stand_ins


def passed(events: list[Event]) -> dict[str, CheckpointPassed]:
    return {e.checkpoint: e for e in events if isinstance(e, CheckpointPassed)}


def only_failure(events: list[Event]) -> Failed:
    failures = [e for e in events if isinstance(e, Failed)]
    assert len(failures) == 1, events
    return failures[0]


async def test_the_heads_image_is_streamed_with_progress_and_the_ids_then_match(tmp_path):
    size = 3 * MiB
    async with engines(
        tmp_path,
        {IMAGE: {"Id": HEAD_ID, "Size": size}},
        {IMAGE: {"Id": OTHER_ID, "Size": size}},
    ) as (controller, (_, worker)):
        events = await collect(controller.sync_image(report_every_s=0))
    assert not [e for e in events if isinstance(e, Failed)]
    assert worker.images[IMAGE]["Id"] == HEAD_ID and worker.loads_ended == ["loaded"]
    progress = [e for e in events if isinstance(e, Progress)]
    done = [e.transfer.bytes_done for e in progress if e.transfer]
    assert len(done) >= 3 and done == sorted(done) and done[-1] == size
    assert all(e.node == "spark-1" and e.transfer.bytes_total == size for e in progress)
    assert "of ~3.0 MiB" in progress[-1].message
    checks = passed(events)
    assert list(checks) == ["ssh", "image_source", "image_copied", "image_synced"]
    assert "spark-1: 3.0 MiB in" in checks["image_copied"].evidence
    assert "Loaded image: spark/vllm:test" in checks["image_copied"].evidence
    assert HEAD_ID[:19] in checks["image_synced"].evidence


async def test_a_missing_image_is_copied_and_a_matching_one_is_not(tmp_path):
    async with engines(tmp_path, {IMAGE: {"Id": HEAD_ID, "Size": MiB}}, {}) as (
        controller,
        (_, worker),
    ):
        await collect(controller.sync_image())
        assert worker.images[IMAGE]["Id"] == HEAD_ID
        again = await collect(controller.sync_image())
    assert worker.loads_ended == ["loaded"]  # the second run copied nothing
    assert "nothing copied" in passed(again)["image_copied"].evidence


async def test_no_image_on_the_head_is_a_failure_that_says_so(tmp_path):
    async with engines(tmp_path, {}, {IMAGE: {"Id": OTHER_ID, "Size": MiB}}) as (controller, _):
        failure = only_failure(await collect(controller.sync_image()))
    assert (failure.checkpoint, failure.node, failure.signature) == (
        "image_source",
        "spark-0",
        "image_not_on_head",
    )
    assert "docker pull spark/vllm:test" in failure.fix and failure.remedy is None


async def test_the_source_engine_dying_mid_stream_names_the_head_and_tags_nothing(tmp_path):
    async with engines(
        tmp_path,
        {IMAGE: {"Id": HEAD_ID, "Size": 8 * MiB}},
        {IMAGE: {"Id": OTHER_ID, "Size": MiB}},
    ) as (controller, (head, worker)):
        head.die_after = 2 * MiB
        failure = only_failure(await collect(controller.sync_image()))
    assert (failure.checkpoint, failure.node) == ("image_copied", "spark-0")
    assert "lost the connection to the Docker engine while sending image" in failure.summary
    assert worker.images[IMAGE]["Id"] == OTHER_ID and worker.loads_ended == ["cut short"]


async def test_a_source_that_stops_sending_is_a_stall_naming_the_head(tmp_path):
    async with engines(
        tmp_path,
        {IMAGE: {"Id": HEAD_ID, "Size": 8 * MiB}},
        {IMAGE: {"Id": OTHER_ID, "Size": MiB}},
        image_stall=0.5,
    ) as (controller, (head, worker)):
        head.stall_after = MiB
        failure = only_failure(await collect(controller.sync_image()))
    assert (failure.checkpoint, failure.node) == ("image_copied", "spark-0")
    assert "moved no byte for 0.5 s while sending image spark/vllm:test" in failure.summary
    assert "timeouts.image_stall" in failure.fix
    assert worker.images[IMAGE]["Id"] == OTHER_ID


async def test_a_target_that_refuses_the_tarball_is_named_with_its_reason(tmp_path):
    async with engines(
        tmp_path,
        {IMAGE: {"Id": HEAD_ID, "Size": 8 * MiB}},
        {IMAGE: {"Id": OTHER_ID, "Size": MiB}},
    ) as (controller, (_, worker)):
        worker.refuse_after = MiB
        failure = only_failure(await collect(controller.sync_image()))
    assert (failure.checkpoint, failure.node) == ("image_copied", "spark-1")
    assert "refused loading an image" in failure.summary
    assert "no space left on device" in failure.summary
    assert worker.images[IMAGE]["Id"] == OTHER_ID


async def test_a_target_that_stops_reading_holds_the_source_back_then_is_a_stall(tmp_path):
    """Backpressure: while the target takes nothing, the head is read no further than the
    buffers between them (here a 64 MiB image, at most a few MiB sent); then the stall."""
    async with engines(
        tmp_path,
        {IMAGE: {"Id": HEAD_ID, "Size": 64 * MiB}},
        {IMAGE: {"Id": OTHER_ID, "Size": MiB}},
        image_stall=1,
    ) as (controller, (head, worker)):
        worker.reading.clear()
        failure = only_failure(await collect(controller.sync_image()))
    assert (failure.checkpoint, failure.node) == ("image_copied", "spark-1")
    assert "moved no byte for 1 s while loading an image" in failure.summary
    assert head.sent - worker.received < 8 * MiB, (head.sent, worker.received)
    assert worker.images[IMAGE]["Id"] == OTHER_ID


async def test_a_cancel_mid_stream_aborts_the_load_and_tags_nothing(tmp_path):
    async with engines(
        tmp_path,
        {IMAGE: {"Id": HEAD_ID, "Size": 64 * MiB}},
        {IMAGE: {"Id": OTHER_ID, "Size": MiB}},
    ) as (controller, (head, worker)):
        async with aclosing(controller.sync_image(report_every_s=0)) as events:
            async for event in events:
                if isinstance(event, Progress):
                    break  # the consumer goes away mid-stream: what a cancel does to the job
        await asyncio.wait_for(worker.load_ended.wait(), 10)
        assert worker.loads_ended == ["cut short"]
        assert worker.images[IMAGE]["Id"] == OTHER_ID
        assert head.sent < 64 * MiB


@pytest.mark.parametrize(
    ("head_has", "worker_has", "signature", "node", "remedy"),
    [
        (True, False, "image_missing", "spark-1", "sync-image"),
        (True, True, "image_differs", None, "sync-image"),
        (False, True, "image_not_on_head", "spark-0", None),
    ],
)
async def test_preflight_offers_sync_image_only_when_the_head_has_the_image(
    tmp_path, head_has, worker_has, signature, node, remedy
):
    async with engines(
        tmp_path,
        {IMAGE: {"Id": HEAD_ID, "Size": MiB}} if head_has else {},
        {IMAGE: {"Id": OTHER_ID, "Size": MiB}} if worker_has else {},
    ) as (controller, _):
        failure = only_failure(await collect(controller.preflight()))
    assert (failure.checkpoint, failure.signature, failure.node, failure.remedy) == (
        "image",
        signature,
        node,
        remedy,
    )
    if remedy:
        assert "sync-image" in failure.fix
