"""Controller tests run against the lab of emulated Sparks (real sshd, real dockerd)."""

import pytest

from lab import api as lab_api
from testkit.lab_cluster import collect, controller_for


@pytest.fixture
async def clean(lab):
    """Each test starts and ends with no container of ours on any node."""
    controller = controller_for(lab)
    await collect(controller.down())
    yield lab
    await collect(controller.down())


@pytest.fixture
def idle_after(clean):
    """The lab's nodes idle again after the test, whatever it set in their /proc/meminfo."""
    yield clean
    for node in (0, 1):
        lab_api.set_node_memory(node)
