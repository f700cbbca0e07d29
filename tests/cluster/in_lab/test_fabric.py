"""The fabric link on the lab's nodes (MTU 9000 and 200 Gb/s, as a Spark pair's ConnectX-7, until
a test changes one end): preflight reads each end's state, MTU and speed, refuses a mismatched
MTU and warns of a link trained slower, from the command line."""

from __future__ import annotations

import pytest

from lab import api as lab_api
from tests.cluster.in_lab.test_cli import spark_bot

pytestmark = [pytest.mark.lab, pytest.mark.timeout(240)]


@pytest.fixture
def fabric_restored(clean):
    yield clean
    lab_api.set_fabric_mtu(1, 9000)
    lab_api.set_fabric_speed(1, 200_000)


async def test_preflight_reads_both_ends_of_the_fabric(fabric_restored):
    code, out, _ = await spark_bot("preflight")
    assert code == 0, out
    assert "spark-lab-0 enp1s0f1np1: up, MTU 9000, 200 Gb/s" in out
    assert "spark-lab-1 enp1s0f1np1: up, MTU 9000, 200 Gb/s" in out

    lab_api.set_fabric_mtu(1, 1500)  # left at the default on one end
    code, out, _ = await spark_bot("preflight")
    assert code == 1, out
    assert "the fabric's MTU differs between the nodes" in out
    assert "spark-lab-1 enp1s0f1np1: up, MTU 1500" in out
    assert "`sudo ip link set dev enp1s0f1np1 mtu 9000` on spark-lab-1" in out

    lab_api.set_fabric_mtu(1, 9000)
    lab_api.set_fabric_speed(1, 100_000)  # the link trained at half its speed
    code, out, _ = await spark_bot("preflight")
    assert code == 0, out
    assert (
        "⚠ the fabric link enp1s0f1np1 on spark-lab-1 runs at 100 Gb/s, not its nominal 200" in out
    )
