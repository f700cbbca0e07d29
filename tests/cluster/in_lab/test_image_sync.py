"""`sync-image` on the lab (real sshd and dockerd per node): a worker with another image ID fails
preflight, naming it and offering the fix; `spark-bot sync-image` streams the head's image into
it (progress seen, IDs equal) and preflight then passes; a cancel mid-stream tags nothing."""

from __future__ import annotations

import asyncio
from contextlib import aclosing

import pytest

from cluster.events import CheckpointPassed, Failed, Progress, parse_event
from lab import api as lab_api
from lab import dockerd, image
from lab import topology as T
from testkit.lab_cluster import collect, controller_for
from tests.cluster.in_lab.test_cli import CONFIG, spark_bot

pytestmark = [pytest.mark.lab, pytest.mark.timeout(300)]
MiB = 1024 * 1024


async def test_a_worker_with_another_image_fails_preflight_and_sync_image_fixes_it(relab):
    lab = relab(nodes=2, variant_node=1)
    try:
        assert image.image_id(T.Node(1)) != lab.image_id
        code, out, _ = await spark_bot("preflight")
        assert code == 1, out
        assert "✘ Same image on every node FAILED" in out
        assert "Docker image mismatch between nodes for spark-lab/vllm-emu:latest" in out
        assert f"spark-lab-0: {lab.image_id[:19]}" in out and "spark-lab-1: sha256:" in out
        assert f"run:      spark-bot sync-image --config {CONFIG}" in out

        code, out, err = await spark_bot("sync-image", "--json")
        assert code == 0, out + err
        events = [parse_event(line) for line in out.splitlines()]
        progress = [e for e in events if isinstance(e, Progress)]
        assert progress and all(e.node == "spark-lab-1" for e in progress)
        last = progress[-1].transfer
        assert last is not None and last.bytes_done > 50 * MiB and last.rate_bps
        assert progress[-1].message.endswith(", loaded")
        assert [e.checkpoint for e in events if isinstance(e, CheckpointPassed)] == [
            "ssh",
            "image_source",
            "image_copied",
            "image_synced",
        ]
        assert image.image_id(T.Node(1)) == image.image_id(T.Node(0)) == lab.image_id

        _, out, _ = await spark_bot("preflight")  # its later checks are not this test's
        assert "✔ Same image on every node\n" in out, out
        assert f"spark-lab/vllm-emu:latest = {lab.image_id[:19]} on every node" in out
    finally:
        lab_api.restore_image()


async def test_a_cancel_mid_stream_leaves_no_image_tagged_on_the_worker(clean):
    lab = clean
    """Docker loads a tarball only once it has read it to its end (moby image/tarexport/load.go
    untars the whole stream into a temporary folder first): a cut stream tags nothing."""
    worker = T.Node(1)
    dockerd.cli(worker, "rmi", T.IMAGE_TAG)
    try:
        assert image.inspect(worker, lab.image_id) is None
        controller = controller_for(lab)
        async with aclosing(controller.sync_image(report_every_s=0)) as events:
            async for event in events:
                assert not isinstance(event, Failed), event
                if isinstance(event, Progress) and event.transfer.bytes_done > 16 * MiB:
                    break  # what a Cancel does: the job's operation is closed mid-stream
        # the engine has given up the cut stream once its temporary folder is gone (no event
        # says so: a load that fails has no event, and its answer went with the connection)
        imports = worker.data_root / "tmp"
        async with asyncio.timeout(30):
            while any(imports.glob("docker-import-*")):  # noqa: ASYNC110
                await asyncio.sleep(0.1)
        assert image.inspect(worker, T.IMAGE_TAG) is None
        assert image.inspect(worker, lab.image_id) is None
        # and the next sync, from scratch, works
        events = await collect(controller.sync_image())
        assert not [e for e in events if isinstance(e, Failed)], events
        assert image.image_id(worker) == lab.image_id
    finally:
        lab_api.restore_image()
