"""Shared fixtures: the lab of emulated Sparks (fail, never skip).

A lab test holds an exclusive lock on the lab for its whole run, so two test sessions on one
machine (two engineers, or an engineer and a helper) take turns instead of reconfiguring the
lab under each other.
"""

from __future__ import annotations

import fcntl
import os
from contextlib import contextmanager
from pathlib import Path

import pytest

from lab.api import LabError, lab_up

TEST_LOCK = Path("/run/spark-lab-tests.lock")
_held = 0


@contextmanager
def exclusive_lab():
    global _held
    if _held:
        _held += 1
        try:
            yield
        finally:
            _held -= 1
        return
    fd = os.open(TEST_LOCK, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        _held = 1
        try:
            yield
        finally:
            _held = 0
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def bring_up_lab(**options):
    try:
        return lab_up(**options)
    except LabError as error:
        pytest.fail(f"the lab could not come up: {error}", pytrace=False)


@pytest.fixture
def lab():
    """A 2-node lab with workers on the management network (restored if a test changed it)."""
    with exclusive_lab():
        yield bring_up_lab(nodes=2)


@pytest.fixture
def relab():
    """For tests that reconfigure the lab: yields the bring-up function, restores 2 nodes after."""
    with exclusive_lab():
        yield bring_up_lab
        bring_up_lab(nodes=2)
