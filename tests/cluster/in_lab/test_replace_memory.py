"""`up --replace` of a cluster that serves, its nodes' memory held as a serving vLLM holds a
Spark's: preflight judges each node on the memory it gets back once the replaced container is
gone (its launch's reading), and the launch goes on once that memory is back.

The lab's emulated engine takes none of its node's memory, so the test holds it: each node's
/proc/meminfo is set as a serving engine leaves it while the old cluster runs, and given back by
a watcher of the node's Docker events when the old container is destroyed."""

from __future__ import annotations

import asyncio
import json
import time

import aiodocker
import pytest

from cluster.events import CheckpointPassed, Progress, Ready, parse_event
from cluster.operations.preflight import REPLACING
from cluster.serving.containers import LABEL_CLUSTER
from lab import api as lab_api
from testkit.lab_cluster import LAB_CONFIG
from tests.cluster.in_lab.test_cli import spark_bot

pytestmark = [pytest.mark.lab, pytest.mark.timeout(600)]
SERVING_FREE_GIB = 11.8  # 14.2 GiB available: the weights and KV cache of a serving vLLM held


def lab_nodes() -> list[tuple[int, str, str]]:
    """(lab index, name, Docker socket) of each node."""
    from bot.config import load_config

    cluster = load_config(LAB_CONFIG).cluster
    return [(i, n.name, str(n.docker_socket)) for i, n in enumerate(cluster.nodes)]


async def give_back_when_destroyed(index: int, socket: str, since: int) -> None:
    """The node's memory idle again once a container of the lab's cluster is destroyed on it
    (`since`: Docker replays the events from then, so a destroy before the stream opened is
    seen too)."""
    async with aiodocker.Docker(url=f"unix://{socket}") as docker:
        events = docker.events.subscribe(
            since=str(since),
            filters=json.dumps(
                {"type": ["container"], "event": ["destroy"], "label": [f"{LABEL_CLUSTER}=lab"]}
            ),
        )
        event = await events.get()  # the client's close stops the stream
        assert event is not None, "the event stream ended without the destroy"
        lab_api.set_node_memory(index)


async def test_replacing_a_serving_cluster_credits_the_memory_it_holds(idle_after):
    code, out, _ = await spark_bot("up", "--json")
    assert code == 0, out
    since = int(time.time())
    nodes = lab_nodes()
    for index, _, _ in nodes:
        lab_api.set_node_memory(index, MemFree=SERVING_FREE_GIB)
    watchers = [
        asyncio.create_task(give_back_when_destroyed(index, socket, since))
        for index, _, socket in nodes
    ]
    try:
        code, out, _ = await spark_bot("up", "--replace", "--json")
        assert code == 0, out
        await asyncio.wait_for(asyncio.gather(*watchers), 30)
    finally:
        for watcher in watchers:
            watcher.cancel()
        await asyncio.gather(*watchers, return_exceptions=True)

    events = [parse_event(line) for line in out.splitlines()]
    assert isinstance(events[-1], Ready), events[-1]
    passed = {e.checkpoint: e for e in events if isinstance(e, CheckpointPassed)}
    for _, name, _ in nodes:
        assert (
            f"{name}: 14.2 GiB available now, 119.4 GiB once the replaced vllm_lab is gone "
            "(its launch's reading)"
        ) in passed["memory"].evidence, passed["memory"].evidence
    assert passed["no_stale_container"].evidence.startswith(
        "replaced: spark-lab-0 (running), spark-lab-1 (running)"
    ), passed["no_stale_container"].evidence
    [removing] = [e for e in events if isinstance(e, Progress) and e.phase == REPLACING]
    assert events.index(removing) > events.index(passed["fit"]), "removed after every check"
