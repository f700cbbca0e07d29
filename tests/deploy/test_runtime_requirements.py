"""scripts/runtime_requirements.py: the lock's entries the run time needs, with their hashes."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location(
    "runtime_requirements", REPO / "scripts" / "runtime_requirements.py"
)
assert _spec and _spec.loader
runtime_requirements = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(runtime_requirements)

LOCK = (REPO / "requirements.lock").read_text()
PYPROJECT = (REPO / "pyproject.toml").read_text()


def _names(entries: list[str]) -> set[str]:
    return {runtime_requirements.normalized(entry.split("==")[0]) for entry in entries}


def test_the_run_time_set_has_every_dependency_and_no_dev_tool():
    entries = runtime_requirements.runtime(LOCK, PYPROJECT)
    names = _names(entries)
    assert {"slack-bolt", "aiohttp", "pydantic", "pyyaml"} <= names
    assert {"aiosignal", "pydantic-core", "numpy"} <= names, "what they need, through `# via`"
    assert not {"pytest", "hypothesis", "pip-audit", "openai", "build"} & names
    for entry in entries:
        assert re.match(r"^[\w.-]+==\S+ \\\n(\s+--hash=sha256:[0-9a-f]{64}( \\)?\n?)+$", entry), (
            entry
        )


def test_a_dependency_missing_from_the_lock_is_refused():
    pyproject = PYPROJECT.replace('"PyYAML>=6.0",', '"PyYAML>=6.0", "not-locked>=1",')
    with pytest.raises(SystemExit, match="not in the lock: not-locked; regenerate it"):
        runtime_requirements.runtime(LOCK, pyproject)
