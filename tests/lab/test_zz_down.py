"""`down` leaves nothing behind; `up` after it works again (runs last)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from lab import api, proc
from lab import topology as T

pytestmark = pytest.mark.lab


def _links() -> list[str]:
    out = subprocess.run(["ip", "-j", "link", "show"], capture_output=True, check=True).stdout
    return [l["ifname"] for l in json.loads(out)]


def test_down_leaves_nothing_then_up_again(lab):
    api.lab_down()
    try:
        assert not [n for n in api.netns.list_netns() if n.startswith("sblab")]
        links = _links()
        assert T.MGMT_BRIDGE not in links and T.FABRIC_BRIDGE not in links
        assert not [l for l in links if l[:3] in ("sbm", "sbf")]
        assert not proc.pids_with_cmdline(str(T.RUN_ROOT))  # no dockerd/sshd/shims
        assert not proc.pids_with_cmdline(str(T.STATE_ROOT) + "/node")
        assert not T.RUN_ROOT.exists()
        mounts = Path("/proc/self/mountinfo").read_text()
        assert str(T.RUN_ROOT) not in mounts  # the nodes' mount namespaces are let go
        assert not api.netns.forwarding_ok()
        rules = subprocess.run(["iptables", "-S"], capture_output=True, text=True).stdout
        assert "spark-lab" not in rules
        assert api.status()["ok"] is False
    finally:
        info = api.lab_up(nodes=2)
    assert api.status()["ok"]
    assert info.image_id
