"""How many log lines a second the bot's own per-line work takes, on one core, with no I/O.

A watched container's line goes through: the monitor's cleaning (`clean_line`), the backlog's
question whether it must be kept when lines are shed (`must_see`), redaction when the reader
takes it (`Secrets.redact`) and the diagnosis (`LogDiagnoser.feed`: cleaning, prefixes, the
shutdown markers and the failure signatures). Each step is timed alone and all of them in turn,
on two kinds of line: the log flood's line (`watch_cost.py`'s) and a real vLLM log
(tests/data/logs, the lines of a healthy and of a failed start-up), so the figure is repeatable
and comparable between versions on the same machine (the lab's flood adds SSH, Docker and
asyncio on top, see docs/performance.md).

    .venv/bin/python benchmarks/log_pipeline.py [--lines 50000] [--quick]
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.harness import emit_json, table
from cluster.config import Secrets
from cluster.diagnosis.engine import LogDiagnoser
from cluster.logs.logtext import clean_line
from cluster.progress.checkpoint_follower import must_see
from testkit import planted_secrets as secrets
from testkit.doubles import CLUSTER

ROOT = Path(__file__).resolve().parents[1]
FLOOD_LINE = (
    "(APIServer pid=7) INFO 12-01 10:00:00 [loggers.py:123] Engine 000: "
    "Avg prompt throughput: 0.0 tokens/s, flood line {n}"
)
REAL_LOGS = ROOT / "tests" / "data" / "logs"


def rate(step: Callable[[str], object], lines: list[str]) -> float:
    """Lines a second `step` takes, over `lines` (best of three passes: the least disturbed
    by the machine's other work)."""
    best = float("inf")
    for _ in range(3):
        started = time.perf_counter()
        for line in lines:
            step(line)
        best = min(best, time.perf_counter() - started)
    return len(lines) / best


def steps(
    matters: Callable[[str], bool], known: Secrets, diagnoser: LogDiagnoser
) -> Callable[[str], None]:
    """Every step a line takes, in turn."""

    def whole(line: str) -> None:
        text = clean_line(line)
        matters(text)
        diagnoser.feed(known.redact(text))

    return whole


def corpus(kind: str, count: int) -> list[str]:
    if kind == "flood":
        return [FLOOD_LINE.format(n=n) for n in range(count)]
    real = [
        line
        for path in sorted(REAL_LOGS.iterdir())
        for line in path.read_text().splitlines()
        if line.strip()
    ]
    return (real * (count // len(real) + 1))[:count]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=50_000)
    parser.add_argument("--quick", action="store_true", help="2,000 lines")
    parser.add_argument("--json", type=Path, default=None, help="append the figures here")
    args = parser.parse_args(argv)
    count = 2_000 if args.quick else args.lines
    matters = must_see(CLUSTER)  # the lab's cluster config, as the handler doubles load it
    known = Secrets({"HF_TOKEN": secrets.HF_TOKEN, "SLACK_BOT_TOKEN": secrets.SLACK_BOT_TOKEN})
    rows = []
    for kind in ("flood", "real"):
        lines = corpus(kind, count)
        cleaned = [clean_line(line) for line in lines]
        whole = steps(matters, known, LogDiagnoser())

        figures = {
            "clean": rate(clean_line, lines),
            "must_see": rate(matters, cleaned),
            "redact": rate(known.redact, cleaned),
            "feed": rate(LogDiagnoser().feed, cleaned),
            "all": rate(whole, lines),
        }
        rows.append([kind, *(f"{figures[k]:,.0f}" for k in figures)])
        emit_json(args.json, "log_pipeline", {"lines": kind, "count": count, **figures})
    print(
        table(
            ["lines", "clean /s", "must_see /s", "redact /s", "diagnose /s", "all steps /s"],
            rows,
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
