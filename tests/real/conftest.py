"""The real engine in the lab: real vLLM 0.32 (CPU) and real Ray 2.60 on the netns nodes.

Each module holds the lab for its whole run and brings it up with `engine="real"` (the venv,
the model and the image are built once and cached). Tests fail, never skip, when it cannot.
"""

from __future__ import annotations

import pytest

from lab.api import exclusive_use
from testkit.lab_cluster import collect
from testkit.real_cluster import real_controller
from tests.conftest import bring_up_lab


@pytest.fixture(scope="module")
def real_lab():
    with exclusive_use():
        info = bring_up_lab(nodes=2, engine="real")
        yield info


@pytest.fixture
async def real_clean(real_lab):
    """No container of ours before and after the test."""
    quick = real_controller(
        timeouts={"down": 6}
    )  # a failed start may not heed SIGTERM: no long grace
    await collect(quick.down())
    yield real_lab
    await collect(quick.down())
