"""How fast `up` reports a checkpoint after its log line appears (the goal: within a second).

Runs `up` on the lab several times and, for every log-proven checkpoint, compares the moment
the event reached us with Docker's timestamp of the evidence line (for a provisional line, of
the later line that proves it). Needs the lab (root):
    .venv/bin/python benchmarks/checkpoint_latency.py [--runs N] [--engine real [--config F]]
Prints a table and exits non-zero when any latency exceeds one second.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
from collections import defaultdict
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bot.config import load_config
from cluster.config import Secrets
from cluster.controller import Controller
from cluster.events import CheckpointPassed, Failed, Ready
from lab.api import exclusive_use, lab_up

GOAL_S = 1.0


async def one_launch(controller: Controller, latencies: dict[str, list[float]]) -> float:
    async for _ in controller.down():
        pass
    total = None
    async for event in controller.up():
        now = datetime.now(UTC)
        if isinstance(event, CheckpointPassed) and event.logged_at is not None:
            latencies[event.checkpoint].append((now - event.logged_at).total_seconds())
        elif isinstance(event, Failed):
            print(f"launch failed: {event.summary}", file=sys.stderr)
        elif isinstance(event, Ready):
            total = event.elapsed_s
    async for _ in controller.down():
        pass
    if total is None:
        raise SystemExit(1)
    return total


CONFIGS = Path(__file__).resolve().parents[1] / "configs"


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--engine", choices=("emulated", "real"), default="emulated")
    parser.add_argument(
        "--config",
        type=Path,
        default=None,
        help="default: configs/lab.yaml, or configs/lab-real.yaml with --engine real",
    )
    args = parser.parse_args()
    config = args.config or CONFIGS / ("lab-real.yaml" if args.engine == "real" else "lab.yaml")
    with exclusive_use():
        lab_up(nodes=2, engine=args.engine)
        return await measure(args.runs, config)


async def measure(runs: int, path: Path) -> int:
    config = load_config(path).cluster
    controller = Controller(config, Secrets({}))
    latencies: dict[str, list[float]] = defaultdict(list)
    totals = [await one_launch(controller, latencies) for _ in range(runs)]
    print(f"{'checkpoint':<12} {'n':>3} {'p50 ms':>8} {'max ms':>8}")
    worst = 0.0
    for checkpoint, values in latencies.items():
        worst = max(worst, max(values))
        print(
            f"{checkpoint:<12} {len(values):>3} {statistics.median(values) * 1000:>8.1f} {max(values) * 1000:>8.1f}"
        )
    print(
        f"launch to Ready on the lab: median {statistics.median(totals):.2f} s over {len(totals)} runs"
    )
    print(f"worst detection latency {worst * 1000:.1f} ms (goal < {GOAL_S * 1000:.0f} ms)")
    return 0 if worst < GOAL_S else 1


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
