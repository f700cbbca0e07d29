"""The config fingerprint, and the history of measurements: one interface, the last report of a
setup and a place to record the new one, with two backends (a JSON-lines file here for the CLI;
the bot's SQLite store in handlers/bench_history.py). Any report with a `setup_key` is kept
there: bench's (compared with its predecessor in `run_bench`) and fabric-test's
(cluster/operations/fabric_test.py), each read back as its own model.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from pathlib import Path
from typing import Generic, Protocol, TypeVar

from pydantic import BaseModel, ValidationError

from cluster.bench.models import BenchReport, Comparison, Fingerprint
from cluster.config import ClusterConfig


def _digest(data: object) -> str:
    text = json.dumps(data, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def make_fingerprint(
    model: str, serve: dict[str, object], *, image_id: str | None = None, image: str | None = None
) -> Fingerprint:
    """A stable hash of what decides performance: image (ID when known, else tag), model, serve."""
    hashed = {"image": image_id or image, "model": model, "serve": serve}
    return Fingerprint(
        image_id=image_id, image=image, model=model, serve=serve, hash=_digest(hashed)
    )


def setup_key(fingerprint: Fingerprint, prompt: str, max_tokens: int) -> str:
    return _digest({"fingerprint": fingerprint.hash, "prompt": prompt, "max_tokens": max_tokens})


R = TypeVar("R", bound=BaseModel)


class History(Protocol[R]):
    async def previous(self, key: str) -> R | None:
        """The last report of this setup, None when there is none or it cannot be read."""

    async def record(self, report: R) -> None: ...


BenchHistory = History[BenchReport]


class JsonLinesHistory(Generic[R]):
    """The CLI's history: one report per line, read and appended in a thread (not on the loop);
    `model` is the kind of report it holds (a line of another kind is not read as one)."""

    def __init__(self, path: Path, model: type[R]):
        self.path = Path(path)
        self.model = model

    async def previous(self, key: str) -> R | None:
        return await asyncio.to_thread(self._previous, key)

    async def record(self, report: R) -> None:
        await asyncio.to_thread(self._append, report)

    def reports(self) -> list[R]:
        try:
            lines = self.path.read_text().splitlines()
        except FileNotFoundError:
            return []
        out = []
        for line in lines:
            if not line.strip():
                continue
            try:
                out.append(self.model.model_validate_json(line))
            except ValidationError:
                continue  # a line from an older format, or a torn write: not comparable
        return out

    def _previous(self, key: str) -> R | None:
        matching = [r for r in self.reports() if getattr(r, "setup_key", None) == key]
        return matching[-1] if matching else None

    def _append(self, report: R) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("a") as handle:
            handle.write(report.model_dump_json() + "\n")


def compare(current: BenchReport, previous: BenchReport | None) -> list[Comparison]:
    """Same-setup figures side by side: single stream, then each sweep level both ran."""
    if previous is None:
        return []
    pairs: list[tuple[str, str, float | None, float | None]] = []
    if current.single and previous.single:
        a, b = current.single, previous.single
        pairs += [
            ("decode tok/s (1 stream)", "tok/s", a.decode_tok_s, b.decode_tok_s),
            ("TTFT (1 stream)", "s", a.ttft_s, b.ttft_s),
        ]
    earlier = {level.concurrency: level for level in previous.sweep}
    for level in current.sweep:
        old = earlier.get(level.concurrency)
        if old is not None:
            pairs += [
                (
                    f"output tok/s @{level.concurrency}",
                    "tok/s",
                    level.output_tok_s,
                    old.output_tok_s,
                ),
                (f"TTFT p50 @{level.concurrency}", "s", level.ttft_p50_s, old.ttft_p50_s),
            ]
    return [
        Comparison(
            metric=name,
            unit=unit,
            current=now,
            previous=then,
            change_pct=(now - then) / then * 100.0,
            previous_at=previous.at,
        )
        for name, unit, now, then in pairs
        if now is not None and then
    ]


_NOT_PERFORMANCE = {"port", "ray_port", "master_port", "min_free_memory_gib"}


def cluster_fingerprint(config: ClusterConfig, image_id: str | None) -> Fingerprint:
    """From the config: serve parameters (ports aside), node count and the container's plain env."""
    serve = config.serve.model_dump(mode="json", exclude=_NOT_PERFORMANCE)
    serve["nodes"] = len(config.nodes)
    serve["env"] = dict(sorted(config.container.env.items()))
    if config.recipe:
        serve["recipe"] = config.recipe
    return make_fingerprint(
        config.serve.api_model_name, serve, image_id=image_id, image=config.container.image
    )
