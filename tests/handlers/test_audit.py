"""The dependency audit's verdict: a known vulnerability fails the run; what could not be
audited is named, never passed as audited."""

from __future__ import annotations

import importlib.util
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "audit_dependencies.py"
spec = importlib.util.spec_from_file_location("audit_dependencies", SCRIPT)
audit = importlib.util.module_from_spec(spec)
spec.loader.exec_module(audit)


def test_a_known_vulnerability_fails_and_names_the_fix():
    status, lines = audit.judge(
        {
            "dependencies": [
                {
                    "name": "aiohttp",
                    "version": "3.9.0",
                    "vulns": [{"id": "GHSA-xxxx", "fix_versions": ["3.9.2"]}],
                },
                {"name": "pyyaml", "version": "6.0.2", "vulns": []},
            ]
        }
    )
    assert status == 1 and "aiohttp 3.9.0: GHSA-xxxx (fixed in 3.9.2)" in lines
    assert lines[-1] == "2 of 2 locked packages audited, 1 with known vulnerabilities"


def test_packages_not_audited_are_named_and_nothing_audited_is_said_loudly():
    skipped = {"name": "aiodocker", "skip_reason": "Dependency not found on PyPI"}
    status, lines = audit.judge({"dependencies": [skipped]})
    assert status == 0 and lines[0].startswith("NOTHING AUDITED") and lines[-1].startswith("0 of 1")
    status, lines = audit.judge(
        {"dependencies": [skipped, {"name": "x", "version": "1", "vulns": []}]}
    )
    assert "not audited (1): aiodocker" in lines
