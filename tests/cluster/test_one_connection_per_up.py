"""`up` asks about leftovers inside the launch: one SSH connection (here: one engine connection)
per node and one look for the leftover container per node, where a chat's question before the
launch (the status it read) connected to every node and looked again. On the demo's embedded
cluster (emulated Docker engines, no root)."""

from __future__ import annotations

from collections import Counter
from typing import Any

import aiodocker
import pytest

import cluster.nodes.connect as connect
from cluster.config import NodeConfig, Secrets
from cluster.controller import Controller
from cluster.events import CheckpointPassed, Failed, Ready
from cluster.nodes.docker_engine import DockerEngine
from cluster.operations.preflight import Leftover
from cluster.serving.containers import LABEL_CLUSTER
from demo.cluster import embedded_cluster
from demo.machine import DEMO_IMAGE
from testkit.lab_cluster import collect

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def counted(monkeypatch: pytest.MonkeyPatch) -> tuple[Counter[str], Counter[str]]:
    """(connections by node, looks for a container by its name)."""
    connections: Counter[str] = Counter()
    looks: Counter[str] = Counter()
    connect_one, find_container = connect._connect_one, DockerEngine.find_container

    async def counting_connect(node: NodeConfig, *args: Any, **kwargs: Any) -> Any:
        connections[node.name] += 1
        return await connect_one(node, *args, **kwargs)

    async def counting_find(self: DockerEngine, name: str) -> dict[str, Any] | None:
        looks[name] += 1
        return await find_container(self, name)

    monkeypatch.setattr(connect, "_connect_one", counting_connect)
    monkeypatch.setattr(DockerEngine, "find_container", counting_find)
    return connections, looks


async def test_a_leftover_is_asked_about_and_replaced_over_the_launchs_one_connection(counted):
    connections, looks = counted
    async with embedded_cluster(nodes=2) as cluster:
        config = cluster.config
        worker = config.nodes[1]
        name = config.container.name
        async with aiodocker.Docker(url=f"unix://{worker.docker_socket}") as docker:
            await docker.containers.create(
                {"Image": DEMO_IMAGE, "Cmd": ["true"], "Labels": {LABEL_CLUSTER: config.name}},
                name=name,
            )
        asked: list[tuple[Leftover, ...]] = []

        async def confirm(leftovers: tuple[Leftover, ...]) -> bool:
            asked.append(leftovers)
            return True

        controller = Controller(config, Secrets({}))
        events = await collect(controller.up(sample_max_tokens=8, confirm_replace=confirm))
        assert not [e for e in events if isinstance(e, Failed)], events[-1]
        assert isinstance(events[-1], Ready)
        assert asked == [(Leftover(worker.name, "created", ours=True),)]
        [replaced] = [
            e
            for e in events
            if isinstance(e, CheckpointPassed) and e.checkpoint == "no_stale_container"
        ]
        assert f"replaced: {worker.name} (created)" in replaced.evidence
        assert connections == {node.name: 1 for node in config.nodes}
        assert looks[name] == len(config.nodes)
        await collect(controller.down())


async def test_a_declined_question_fails_as_without_consent_and_leaves_the_container(counted):
    async with embedded_cluster(nodes=2) as cluster:
        config = cluster.config
        worker = config.nodes[1]
        name = config.container.name
        async with aiodocker.Docker(url=f"unix://{worker.docker_socket}") as docker:
            await docker.containers.create(
                {"Image": DEMO_IMAGE, "Cmd": ["true"], "Labels": {"owner": "someone"}}, name=name
            )

            async def decline(leftovers: tuple[Leftover, ...]) -> bool:
                assert leftovers == (
                    Leftover(worker.name, "created, not started by spark-bot", ours=False),
                )
                return False

            controller = Controller(config, Secrets({}))
            events = await collect(controller.up(sample_max_tokens=8, confirm_replace=decline))
            failed = events[-1]
            assert isinstance(failed, Failed)
            assert (failed.checkpoint, failed.node) == ("no_stale_container", worker.name)
            assert (await docker.containers.get(name))["Config"]["Labels"]["owner"] == "someone"
