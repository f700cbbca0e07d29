"""What the last `up` made (node count, isolation, variant, canonical image ID)."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass

from . import topology as T


@dataclass
class LabState:
    nodes: int = 0
    isolated_workers: bool = False
    variant_node: int | None = None
    canonical_image: str | None = None
    engine: str = "emulated"  # or "real": the real-engine image is on every node too
    real_image: str | None = None


def load() -> LabState:
    try:
        return LabState(**json.loads(T.STATE_FILE.read_text()))
    except (FileNotFoundError, ValueError, TypeError):
        return LabState()


def save(st: LabState) -> None:
    T.STATE_ROOT.mkdir(parents=True, exist_ok=True)
    tmp = T.STATE_FILE.with_suffix(".tmp")
    tmp.write_text(json.dumps(asdict(st), indent=2) + "\n")
    tmp.replace(T.STATE_FILE)


def clear() -> None:
    T.STATE_FILE.unlink(missing_ok=True)
