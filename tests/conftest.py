"""Shared fixtures: the lab of emulated Sparks, brought up once per session (fail, never skip)."""

from __future__ import annotations

import pytest

from lab.api import LabError, lab_up


def bring_up_lab(**options):
    try:
        return lab_up(**options)
    except LabError as error:
        pytest.fail(f"the lab could not come up: {error}", pytrace=False)


@pytest.fixture(scope="session")
def lab_session():
    return bring_up_lab(nodes=2)


@pytest.fixture
def lab(lab_session):
    """A 2-node lab with workers on the management network (restored if a test changed it)."""
    return bring_up_lab(nodes=2)


@pytest.fixture
def relab():
    """For tests that reconfigure the lab: yields the bring-up function, restores 2 nodes after."""
    yield bring_up_lab
    bring_up_lab(nodes=2)
