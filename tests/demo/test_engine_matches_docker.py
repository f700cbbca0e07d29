"""The emulated engine answers the controller's Docker API calls as the real Docker engine of
the lab does: the same scenario against both gives the same transcript."""

from __future__ import annotations

import os

import pytest

from demo.cluster import embedded_cluster
from demo.machine import DEMO_IMAGE
from tests.demo.engine_scenario import run_scenario


async def test_scenario_runs_on_the_emulated_engine():
    async with embedded_cluster(nodes=1) as cluster:
        transcript = await run_scenario(
            cluster.config.nodes[0].docker_socket, DEMO_IMAGE, "demo_check"
        )
    steps = dict(transcript.entries)
    assert steps["start"] == 204 and steps["start again"] == 304
    assert steps["exec start attached (hijacked)"]["status"] == "HTTP/1.1 101 UPGRADED"
    assert steps["exec start attached (hijacked)"]["frames"] == [[1, "o\n"], [2, "e\n"]]
    assert steps["exec output in the container log"] == [[1, "via-exec\n"], [2, "via-exec-err\n"]]
    assert steps["delete running, force"] == 204, (
        "a cancelled launch force-removes running containers"
    )


@pytest.mark.lab
async def test_emulated_engine_answers_like_the_lab_docker_engine(lab):
    assert lab.image_tag == DEMO_IMAGE
    name = f"spark_demo_check_{os.getpid()}"
    real = await run_scenario(lab.nodes[0].docker_socket, lab.image_tag, name)
    async with embedded_cluster(nodes=1) as cluster:
        emulated = await run_scenario(cluster.config.nodes[0].docker_socket, DEMO_IMAGE, name)
    assert [step for step, _ in emulated.entries] == [step for step, _ in real.entries]
    for (step, want), (_, got) in zip(real.entries, emulated.entries, strict=True):
        assert got == want, f"{step}: the real engine answers {want!r}, the emulated one {got!r}"
