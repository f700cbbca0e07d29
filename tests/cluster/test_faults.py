"""Every emulator fault and the infrastructure faults give the right `Failed`, within bounds."""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
from pathlib import Path

import pytest

from cluster.config import Secrets
from cluster.controller import Controller
from cluster.events import CheckpointPassed, Failed, Progress, Ready
from cluster.serving.containers import LABEL_CLUSTER
from lab import api as lab_api
from testkit.lab_cluster import FAST, cluster_for, collect, controller_for

pytestmark = pytest.mark.lab


def only_failure(events) -> Failed:
    failures = [e for e in events if isinstance(e, Failed)]
    assert len(failures) == 1, events
    assert events[-1] is failures[0], "a failure ends the operation"
    return failures[0]


@pytest.mark.parametrize(
    ("fault", "checkpoint", "signatures", "evidence"),
    [
        ("nccl_hang", "weights", {"nccl_init_hang"}, "NCCL"),
        (
            "nccl_error",
            "weights",
            {"nccl_unhandled_system_error"},
            "NCCL error: unhandled system error",
        ),
        ("low_memory", "nccl", {"free_memory_below_utilization"}, "Free memory on device cuda:0"),
        ("worker_died_loading", "weights", {"ray_worker_crashed"}, "ip=198.18.1.11"),
        ("gloo_iface", "nccl", {"gloo_connect_failed"}, "Gloo connectFullMesh failed"),
        ("oom", "kv_cache", {"cuda_oom"}, "CUDA out of memory"),
        (
            "no_kernel_image",
            "kv_cache",
            {"cuda_no_kernel_image", "torch_arch_not_supported"},
            "with CUDA capability sm_121 is not compatible",
        ),
        ("ray_version_mismatch", "containers", {"ray_version_mismatch"}, "Version mismatch"),
        ("ray_worker_never_joins", "ray_cluster", {"ray_incomplete"}, "1 active node(s)"),
    ],
)
async def test_launch_fault_is_diagnosed(clean, fault, checkpoint, signatures, evidence):
    controller = controller_for(clean, env={"SPARK_EMU_FAULT": fault}, timeouts=FAST)
    failure = only_failure(await collect(controller.up()))
    assert failure.checkpoint == checkpoint, failure
    assert failure.signature in signatures, failure
    assert evidence in failure.evidence + "\n".join(failure.context), failure
    assert failure.cause and failure.fix
    assert failure.elapsed_s < 45


async def test_a_failed_launch_says_which_containers_it_left_and_down_removes_them(clean):
    controller = controller_for(clean, env={"SPARK_EMU_FAULT": "nccl_error"}, timeouts=FAST)
    failure = only_failure(await collect(controller.up()))
    name = controller.config.container.name
    nodes = ", ".join(node.name for node in controller.config.nodes)
    assert f"Left for `logs` and `diag`: `{name}` on {nodes}; `down` removes it." in failure.fix
    [status] = await collect(controller.status())
    assert [c.present for c in status.containers] == [True, True], "left as it says"
    await collect(controller.down())
    [status] = await collect(controller.status())
    assert not any(c.present for c in status.containers)


async def test_slow_start_still_reaches_ready(clean):
    controller = controller_for(clean, env={"SPARK_EMU_FAULT": "slow_start"})
    events = await collect(controller.up())
    assert isinstance(events[-1], Ready), events[-1]


async def test_watch_reports_the_late_engine_death(clean):
    controller = controller_for(
        clean, env={"SPARK_EMU_FAULT": "late_engine_death", "SPARK_EMU_FAULT_AFTER_S": "3"}
    )
    assert isinstance((await collect(controller.up()))[-1], Ready)
    watched = await asyncio.wait_for(collect(controller.watch(health_interval=60)), timeout=60)
    failure = only_failure(watched)
    assert failure.signature == "nccl_watchdog_timeout", failure
    assert "Watchdog caught collective operation timeout" in failure.evidence
    assert failure.node == "spark-lab-0"


async def test_verify_on_a_broken_cluster_names_the_dead_worker(clean):
    controller = controller_for(clean)
    assert isinstance((await collect(controller.up()))[-1], Ready)
    await lab_docker_kill(clean, 1, controller.config.container.name)
    failure = only_failure(await collect(controller.verify()))
    assert failure.checkpoint == "containers" and failure.node == "spark-lab-1"


async def lab_docker_kill(lab, index: int, name: str) -> None:
    node = lab.nodes[index]
    proc = await asyncio.create_subprocess_exec(
        "docker", "-H", node.docker_host, "kill", name, stdout=asyncio.subprocess.DEVNULL
    )
    assert await proc.wait() == 0


async def test_cancel_in_the_middle_of_up_leaves_no_container(clean):
    controller = controller_for(clean, env={"SPARK_EMU_FAULT": "slow_start"})
    serving = asyncio.Event()

    async def launch():
        async for event in controller.up():
            if isinstance(event, Progress) and "vllm serve started" in event.message:
                serving.set()

    task = asyncio.create_task(launch())
    await asyncio.wait_for(serving.wait(), timeout=60)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    [status] = await collect(controller.status())
    assert not any(c.present for c in status.containers), status


async def test_worker_sshd_stopped(clean):
    lab_api.stop_sshd(1)
    try:
        failure = only_failure(await collect(controller_for(clean).up()))
    finally:
        lab_api.start_sshd(1)
    assert (failure.checkpoint, failure.node) == ("ssh", "spark-lab-1")
    assert "cannot reach sshd" in failure.summary


async def test_worker_docker_engine_stopped(clean):
    lab_api.stop_dockerd(1)
    try:
        failure = only_failure(await collect(controller_for(clean).up()))
    finally:
        lab_api.start_dockerd(1)
    assert (failure.checkpoint, failure.node) == ("docker", "spark-lab-1")
    assert "does not answer" in failure.summary


async def test_image_missing(clean):
    config = cluster_for(clean)
    config = config.model_copy(
        update={"container": config.container.model_copy(update={"image": "spark-lab/absent:1"})}
    )
    failure = only_failure(await collect(Controller(config, Secrets({})).up()))
    assert failure.checkpoint == "image" and "docker pull spark-lab/absent:1" in failure.fix


async def test_image_different_on_the_worker(relab):
    lab = relab(nodes=2, variant_node=1)
    try:
        failure = only_failure(await collect(controller_for(lab).up()))
    finally:
        lab_api.restore_image()
    assert failure.checkpoint == "image"
    assert "spark-lab-0" in failure.evidence and "spark-lab-1" in failure.evidence


async def test_host_key_that_does_not_match_is_refused(clean, tmp_path):
    # The worker's entry carries the head's key: what a reinstalled or impostor node looks like.
    text = Path(clean.known_hosts_path).read_text()
    entries = [line.split(None, 1) for line in text.splitlines(keepends=True) if line.strip()]
    head_key = next(key for hosts, key in entries if clean.nodes[0].mgmt_ip in hosts.split(","))
    forged = [
        f"{hosts} {head_key if clean.nodes[1].mgmt_ip in hosts.split(',') else key}"
        for hosts, key in entries
    ]
    known_hosts = tmp_path / "known_hosts"
    known_hosts.write_text("".join(forged))
    config = cluster_for(clean)
    nodes = [
        n.model_copy(update={"ssh": n.ssh.model_copy(update={"known_hosts": known_hosts})})
        for n in config.nodes
    ]
    failure = only_failure(
        await collect(Controller(config.model_copy(update={"nodes": nodes}), Secrets({})).up())
    )
    assert (failure.checkpoint, failure.node) == ("ssh", "spark-lab-1")
    assert "host key" in failure.summary and "ssh-keygen" in failure.fix


async def test_api_port_taken(clean):
    head = clean.nodes[0]
    listen = (
        "import socket, sys; s = socket.socket(); "
        f"s.bind(({head.mgmt_ip!r}, 8000)); s.listen(); print('listening', flush=True); sys.stdin.read()"
    )
    squatter = subprocess.Popen(
        ["ip", "netns", "exec", head.netns, "python3", "-c", listen],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert squatter.stdout.readline().strip() == "listening"
        failure = only_failure(await collect(controller_for(clean).up()))
    finally:
        squatter.kill()
        squatter.communicate()  # waits, and closes our ends of its pipes
    assert failure.checkpoint == "api_port" and ":8000" in failure.evidence


async def test_stale_container_is_refused_then_replaced(clean):
    controller = controller_for(clean)
    # a leftover of ours (labelled): one spark-bot did not start is never replaced without consent
    # (tests/cluster/test_foreign_container.py)
    proc = await asyncio.create_subprocess_exec(
        "docker",
        "-H",
        clean.nodes[1].docker_host,
        "create",
        "--name",
        controller.config.container.name,
        "--label",
        f"{LABEL_CLUSTER}={controller.config.name}",
        controller.config.container.image,
        "sleep",
        "infinity",
        stdout=asyncio.subprocess.DEVNULL,
    )
    assert await proc.wait() == 0
    failure = only_failure(await collect(controller.up()))
    assert failure.checkpoint == "no_stale_container" and "spark-lab-1" in failure.evidence
    events = await collect(controller.preflight(replace=True))
    replaced = next(
        e
        for e in events
        if isinstance(e, CheckpointPassed) and e.checkpoint == "no_stale_container"
    )
    assert "replaced: spark-lab-1" in replaced.evidence


async def test_cancel_while_the_consumer_is_busy_between_events_leaves_no_container(clean):
    """A cancel that lands while the caller handles an event (e.g. posts it to chat) closes the
    launch through `aclosing`, and the cleanup still reaches every node."""
    controller = controller_for(clean, env={"SPARK_EMU_FAULT": "slow_start"})
    busy = asyncio.Event()

    async def launch():
        async with contextlib.aclosing(controller.up()) as events:
            async for event in events:
                if isinstance(event, CheckpointPassed) and event.checkpoint == "ray_cluster":
                    busy.set()
                    await asyncio.Event().wait()  # handling the event takes forever

    task = asyncio.create_task(launch())
    await asyncio.wait_for(busy.wait(), timeout=60)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    [status] = await collect(controller.status())
    assert not any(c.present for c in status.containers), status


async def test_an_unknown_host_and_a_missing_known_hosts_file_say_how_to_record_the_key(
    clean, tmp_path
):
    config = cluster_for(clean)
    empty = tmp_path / "known_hosts"
    empty.write_text("")
    for known_hosts, expected in [(empty, "is not in"), (tmp_path / "absent", "does not exist")]:
        nodes = [
            n.model_copy(update={"ssh": n.ssh.model_copy(update={"known_hosts": known_hosts})})
            for n in config.nodes
        ]
        failure = only_failure(
            await collect(Controller(config.model_copy(update={"nodes": nodes}), Secrets({})).up())
        )
        assert failure.checkpoint == "ssh" and expected in failure.summary, failure
        assert "Record" in failure.fix
