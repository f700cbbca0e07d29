"""deploy/spark-bot.service: systemd accepts it, and its hardening scores "OK" or better."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

UNIT = Path(__file__).resolve().parents[2] / "deploy" / "spark-bot.service"
SYSTEMD_ANALYZE = shutil.which("systemd-analyze")
pytestmark = pytest.mark.skipif(SYSTEMD_ANALYZE is None, reason="systemd-analyze not installed")


@pytest.fixture
def unit(tmp_path: Path) -> Path:
    """The unit, its ExecStart this environment's spark-bot (verify checks that it exists)."""
    installed = Path(sys.executable).with_name("spark-bot")
    text = UNIT.read_text().replace("/opt/spark-bot/bin/spark-bot", str(installed))
    copy = tmp_path / UNIT.name
    copy.write_text(text)
    return copy


def test_systemd_verifies_the_unit(unit):
    verified = subprocess.run(
        [SYSTEMD_ANALYZE, "verify", str(unit)], capture_output=True, text=True, timeout=60
    )
    assert verified.returncode == 0 and not verified.stderr.strip(), verified.stderr


def test_the_unit_is_hardened(unit):
    text = unit.read_text()
    for setting in (
        "NoNewPrivileges=yes",
        "ProtectSystem=strict",
        "ProtectHome=yes",
        "DynamicUser=yes",
        "StateDirectory=spark-bot",
        "LoadCredential=id_ed25519:",
        "LoadCredential=known_hosts:",
        "CapabilityBoundingSet=\n",
    ):
        assert setting in text, setting
    scored = subprocess.run(
        [SYSTEMD_ANALYZE, "security", "--offline=yes", "--threshold=20", str(unit)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    exposure = re.search(r"Overall exposure level for \S+: ([\d.]+) (\w+)", scored.stdout)
    assert exposure, scored.stdout + scored.stderr
    assert float(exposure[1]) <= 2.0 and exposure[2] == "OK", exposure[0]
