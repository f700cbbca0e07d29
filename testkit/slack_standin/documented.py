"""What Slack documents for each Web API method the stand-in serves (web_api_methods.json)."""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

EXTRACT = Path(__file__).with_name("web_api_methods.json")


@cache
def extract() -> dict[str, Any]:
    return json.loads(EXTRACT.read_text())


def documented_methods() -> list[str]:
    return sorted(extract()["methods"])


def documented_errors(method: str) -> set[str]:
    """Every error code Slack gives for `method`: its spec and docs lists and the extras with a
    cited source. Empty for a method the extract does not have."""
    entry = extract()["methods"].get(method)
    if entry is None:
        return set()
    return set(entry["spec_errors"] or ()) | set(entry["docs_errors"]) | set(entry["extra_errors"])


def required_arguments(method: str) -> set[str]:
    entry = extract()["methods"][method]
    return set(entry["spec_required"] or ()) | set(entry["docs_required"])
