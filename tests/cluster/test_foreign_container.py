"""A container spark-bot did not start is never removed without consent: `up --replace` removes
only a leftover of ours; one without our label under the same name stops preflight, named, with
the command to remove it by hand, unless the nodes it sits on were named in a confirmed question.
On the demo's embedded cluster (emulated Docker engines, no root)."""

from __future__ import annotations

import aiodocker
import pytest

from cluster.config import Secrets
from cluster.controller import Controller
from cluster.events import CheckpointPassed, Failed
from demo.cluster import embedded_cluster
from demo.machine import DEMO_IMAGE
from testkit.lab_cluster import collect

pytestmark = pytest.mark.timeout(60)


async def test_replace_leaves_a_container_spark_bot_did_not_start_unless_consented():
    async with embedded_cluster(nodes=2) as cluster:
        config = cluster.config
        worker = config.nodes[1]
        name = config.container.name
        async with aiodocker.Docker(url=f"unix://{worker.docker_socket}") as docker:
            await docker.containers.create(
                {"Image": DEMO_IMAGE, "Cmd": ["true"], "Labels": {"owner": "someone"}}, name=name
            )
            controller = Controller(config, Secrets({}))

            refused = await collect(controller.preflight(replace=True))
            [failed] = [e for e in refused if isinstance(e, Failed)]
            assert (failed.checkpoint, failed.node) == ("no_stale_container", worker.name)
            assert (
                f"{name} on {worker.name} was not started by spark-bot (created" in failed.summary
            )
            assert f"`docker rm -f {name}`" in failed.fix
            assert (await docker.containers.get(name))["Config"]["Labels"]["owner"] == "someone", (
                "left alone"
            )

            consented = await collect(
                controller.preflight(replace=True, replace_foreign=[worker.name])
            )
            [passed] = [
                e
                for e in consented
                if isinstance(e, CheckpointPassed) and e.checkpoint == "no_stale_container"
            ]
            assert f"replaced: {worker.name} (created, not started by spark-bot)" in passed.evidence
            with pytest.raises(aiodocker.DockerError) as gone:
                await docker.containers.get(name)
            assert gone.value.status == 404
