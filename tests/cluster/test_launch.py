"""`up`, `verify`, `status`, `logs`, `down` on the lab: the happy paths."""

from __future__ import annotations

import pytest

from cluster.config import APIConfig
from cluster.events import CheckpointPassed, Failed, LogTail, Ready, Removed, StatusReport
from cluster.progress.checkpoints import launch_plan, verify_plan
from testkit.lab_cluster import cluster_for, collect, controller_for

pytestmark = pytest.mark.lab


def checkpoint_ids(events):
    return [e.checkpoint for e in events if isinstance(e, CheckpointPassed)]


def assert_ready(events, config):
    failures = [e for e in events if isinstance(e, Failed)]
    assert not failures, failures[0].model_dump_json(indent=1)
    assert checkpoint_ids(events) == [c.id for c in launch_plan(config)]
    ready = events[-1]
    assert isinstance(ready, Ready) and ready.model == config.serve.api_model_name
    assert ready.sample.completion_tokens > 1 and ready.sample.decode_tps > 0


async def test_ray_launch_reports_every_checkpoint_with_evidence_then_verify_status_logs_down(
    clean,
):
    controller = controller_for(clean)
    events = await collect(controller.up())
    assert_ready(events, controller.config)
    by_id = {e.checkpoint: e for e in events if isinstance(e, CheckpointPassed)}
    assert "Docker image consistency check passed" in by_id["image"].evidence
    assert "Detected IB_IF: rocep1s0f1" in by_id["interfaces"].evidence
    assert (
        "2 active node(s)" in by_id["ray_cluster"].evidence
        and "/2.0 GPU" in by_id["ray_cluster"].evidence
    )
    assert by_id["weights"].evidence.count("Loading weights took") == 2, "one line per rank"
    assert "GPU KV cache size" in by_id["kv_cache"].evidence
    assert "Application startup complete." in by_id["api_server"].evidence
    assert any("Application startup complete." in line for line in by_id["api_server"].log_tail)
    assert all("\x1b[" not in line for e in by_id.values() for line in e.log_tail)
    assert by_id["health"].evidence == "GET /health -> 200"
    assert all(e.elapsed_s >= 0 for e in by_id.values())

    verified = await collect(controller.verify())
    assert not [e for e in verified if isinstance(e, Failed)]
    assert checkpoint_ids(verified) == [c.id for c in verify_plan(controller.config)]

    [status] = await collect(controller.status())
    assert isinstance(status, StatusReport) and status.api_healthy is True
    assert [c.running for c in status.containers] == [True, True]

    [tail] = await collect(controller.logs("spark-lab-1", lines=5))
    assert isinstance(tail, LogTail) and 0 < len(tail.lines) <= 5

    removed = await collect(controller.down())
    assert [e.removed for e in removed if isinstance(e, Removed)] == [True, True]
    again = await collect(controller.down())
    assert [e.removed for e in again] == [False, False], "down is idempotent"
    [status] = await collect(controller.status())
    assert not any(c.present for c in status.containers)


async def test_mp_backend_launch_with_the_api_reached_directly(clean):
    direct = APIConfig(access="direct", host=clean.nodes[0].mgmt_ip)
    controller = controller_for(clean, serve={"backend": "mp"}, api=direct)
    events = await collect(controller.up())
    assert_ready(events, controller.config)
    assert "ray_cluster" not in checkpoint_ids(events)
    [status] = await collect(controller.status())
    assert status.api_healthy is True


async def test_three_nodes_with_ray(relab):
    lab = relab(nodes=3)
    controller = controller_for(lab, serve={"tensor_parallel_size": 1, "pipeline_parallel_size": 3})
    await collect(controller.down())
    try:
        events = await collect(controller.up())
        assert_ready(events, controller.config)
        ray = next(
            e for e in events if isinstance(e, CheckpointPassed) and e.checkpoint == "ray_cluster"
        )
        assert "3 active node(s)" in ray.evidence
    finally:
        await collect(controller.down())


async def test_worker_reached_only_through_the_head(relab):
    lab = relab(nodes=2, isolated_workers=True)
    config = cluster_for(lab)
    assert config.nodes[1].ssh.jump == config.nodes[0].name
    controller = controller_for(lab)
    await collect(controller.down())
    try:
        assert_ready(await collect(controller.up()), controller.config)
    finally:
        await collect(controller.down())


async def test_nccl_over_sockets_passes_with_a_warning_from_the_signature_table(clean):
    controller = controller_for(clean, env={"SPARK_EMU_RDMA": "0"})
    events = await collect(controller.up())
    assert isinstance(events[-1], Ready), events[-1]
    nccl = next(e for e in events if isinstance(e, CheckpointPassed) and e.checkpoint == "nccl")
    assert nccl.warning and "NCCL uses TCP sockets instead of RDMA" in nccl.warning
    assert "--privileged" in nccl.warning


async def test_a_launch_closed_after_another_took_it_over_leaves_that_launchs_containers(clean):
    """`up --take-over --replace` while an earlier launch is still open: the earlier launch's
    cleanup (its cancel, its close) removes the containers it started, by the Ids it recorded,
    never the new launch's under the same name."""
    old = controller_for(clean).up()
    async for event in old:
        assert not isinstance(event, Failed), event.model_dump_json(indent=1)
        if isinstance(event, CheckpointPassed) and event.checkpoint == "containers":
            break  # its containers run; it waits there, open, while another takes over
    try:
        new = await collect(controller_for(clean).up(replace=True, take_over=True))
        assert isinstance(new[-1], Ready), new[-1].model_dump_json(indent=1)
    finally:
        await old.aclose()  # the old launch's cleanup runs now
    [status] = await collect(controller_for(clean).status())
    assert [c.running for c in status.containers] == [True, True], status.containers
    assert status.api_healthy is True, "the new launch serves on"
