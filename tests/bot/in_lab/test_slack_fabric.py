"""The fabric through Slack (Bolt's real client on the stand-in) on the lab (issue 25 item 4):
`/spark fabric-test`, read level, posts a figure for every pair of nodes against the link's
nominal speed and, the next time, the comparison with the last run (the bot's store); `/spark
up` fails in preflight with the cause and the fix when the fabric's MTU differs between the
nodes, a node lacks a subnet of NVIDIA's two-subnet layout, or the worker is cabled to the
other port."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

import pytest

from lab import api as lab_api
from testkit.lab_cluster import FAST, cluster_for
from testkit.slack_bot import (
    ALICE,
    CH,
    attachment_text,
    block_text,
    down,
    header,
    settings,
    slack_bot,
)

pytestmark = [pytest.mark.lab, pytest.mark.timeout(240)]


@pytest.fixture
async def cluster(lab):
    config = cluster_for(lab, timeouts=FAST)
    await down(config)
    yield config
    await down(config)


async def test_fabric_test_posts_every_pairs_figure_for_an_operator(slack, cluster, tmp_path):
    async with slack_bot(slack, cluster, settings(tmp_path)):
        results = []
        for _ in range(2):
            await slack.send_slash_command(ALICE, CH, "fabric-test seconds=1")  # operate level
            result = await slack.wait_for(
                lambda c: (
                    c.method == "chat.postMessage"
                    and header(c) == "🔌 Fabric bandwidth"
                    and c not in results
                ),
                90,
            )
            results.append(result)
            parent = result.params["thread_ts"]
            await slack.wait_until(
                lambda parent=parent: (
                    "Fabric: 1 of 1 pair(s) measured" in attachment_text(slack.message(CH, parent))
                ),
                30,
            )
    first, second = (block_text(r) for r in results)
    figure = re.search(
        r"spark-lab-0 ↔ spark-lab-1: ([\d.]+) Gb/s with perftest's ib_write_bw", first
    )
    assert figure and float(figure[1]) > 0, first
    assert "% of the link's nominal 200 Gb/s" in first
    assert "198.18.1.0/24: rocep1s0f1 → rocep1s0f1" in first  # the lane, in the code block
    assert "vs previous" not in first
    assert "vs previous: spark-lab-0 ↔ spark-lab-1 (ib_write_bw): " in second


@dataclass(frozen=True)
class FabricFault:
    name: str
    breaks: Callable[[], None]
    restore: Callable[[], None]
    says: str
    fix: str


def _restore_layout() -> None:
    lab_api.set_cable_port(1, 1)
    for node in (0, 1):
        lab_api.set_second_subnet(node, False)


FAULTS = [
    FabricFault(
        "mtu_mismatch",
        lambda: lab_api.set_fabric_mtu(1, 1500),  # left at the default on the worker
        lambda: lab_api.set_fabric_mtu(1, 9000),
        "the fabric's MTU differs between the nodes",
        "`sudo ip link set dev enp1s0f1np1 mtu 9000` on spark-lab-1",
    ),
    FabricFault(
        "subnet_missing",
        lambda: lab_api.set_second_subnet(
            0, True
        ),  # the head has the second subnet, not the worker
        _restore_layout,
        "spark-lab-1 has no address on the fabric subnet 198.18.2.0/24",
        "configure the other subnet on spark-lab-1",
    ),
    FabricFault(
        "other_port",
        lambda: lab_api.set_cable_port(1, 0),
        _restore_layout,
        "the cables are on different ports",
        "plug the cable into the same port on both nodes",
    ),
]


@pytest.mark.parametrize("fault", FAULTS, ids=lambda fault: fault.name)
async def test_a_fabric_fault_fails_up_in_slack_with_its_cause_and_fix(
    fault: FabricFault, slack, cluster, tmp_path
):
    fault.breaks()
    try:
        async with slack_bot(slack, cluster, settings(tmp_path)):
            await slack.send_slash_command(ALICE, CH, "up")
            failure = await slack.wait_for(
                lambda c: c.method == "chat.postMessage" and header(c).startswith("✘"), 90
            )
    finally:
        fault.restore()
    assert header(failure) == "✘ RoCE and fabric interfaces failed"
    text = block_text(failure)
    assert fault.says in text and "*Fix:*" in text and fault.fix in text
    assert failure.params["reply_broadcast"] is True
