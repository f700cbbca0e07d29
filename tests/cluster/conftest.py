"""Controller tests run against the lab of emulated Sparks (real sshd, real dockerd)."""

import pytest

from testkit.lab_cluster import collect, controller_for


@pytest.fixture
async def clean(lab):
    """Each test starts and ends with no container of ours on any node."""
    controller = controller_for(lab)
    await collect(controller.down())
    yield lab
    await collect(controller.down())
