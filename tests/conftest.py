"""Shared fixtures: the lab of emulated Sparks (fail, never skip).

A lab test holds the lab exclusively for its whole run (`lab.api.exclusive_use`), so two test
sessions on one machine take turns instead of reconfiguring the lab under each other.
"""

from __future__ import annotations

import pytest

from lab.api import LabError, exclusive_use, lab_up
from tests.slack_standin import SlackStandIn


def bring_up_lab(**options):
    try:
        return lab_up(**options)
    except LabError as error:
        pytest.fail(f"the lab could not come up: {error}", pytrace=False)


@pytest.fixture
def lab():
    """A 2-node lab with workers on the management network (restored if a test changed it)."""
    with exclusive_use():
        yield bring_up_lab(nodes=2)


@pytest.fixture
def relab():
    """For tests that reconfigure the lab: yields the bring-up function, restores 2 nodes after."""
    with exclusive_use():
        yield bring_up_lab
        bring_up_lab(nodes=2)


@pytest.fixture
async def slack():
    """A fresh Slack stand-in (Web API + Socket Mode) on loopback."""
    async with SlackStandIn() as stand_in:
        yield stand_in
