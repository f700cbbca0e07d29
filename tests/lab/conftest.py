"""The lab fixture: bring up 2 emulated Sparks once per session (fail, never skip)."""
from __future__ import annotations

import pytest

from lab.api import LabError, lab_up


def _up(**kw):
    try:
        return lab_up(**kw)
    except LabError as e:
        pytest.fail(f"the lab could not come up: {e}", pytrace=False)


@pytest.fixture(scope="session")
def lab():
    return _up(nodes=2)


@pytest.fixture
def lab2(lab):
    """A 2-node, non-isolated lab (restores it if an earlier test reconfigured it)."""
    return _up(nodes=2)


@pytest.fixture
def relab():
    """For tests that reconfigure the lab: yields lab_up, restores 2 nodes afterwards."""
    yield _up
    _up(nodes=2)
