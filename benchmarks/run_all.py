"""Run every operator-facing benchmark, one after the other, each in its own process, and print
their tables (docs/performance.md explains each). Needs the lab (root) unless `--where
embedded`, where the lab-only parts (the shell baseline, /health dying, the log flood) are
skipped.

    .venv/bin/python benchmarks/run_all.py [--quick] [--where lab|embedded] [--json FILE]
        [--only checkpoint_to_slack,failure_to_slack,...]

Each benchmark takes the lab for one scenario at a time, so other users of the lab get their
turn in between. A full run takes about 40 minutes (10 of them watching an idle cluster);
`--quick` about 3; `bench_accuracy_real` (the bench on the lab's real engine against vLLM's
own client and the engine's /metrics; lab only) adds about 5, 3 with `--quick`. Exit status: 0
when every benchmark met its goals, else 1.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent

# name -> (arguments of a full run, of a quick run); `--where` and `--json` are added
BENCHMARKS: dict[str, tuple[list[str], list[str]]] = {
    "checkpoint_to_slack": ([], ["--quick"]),
    "failure_to_slack": ([], ["--quick"]),
    "old_way": ([], ["--quick"]),
    "peers": ([], ["--quick"]),
    "overhead": ([], ["--quick"]),
    "command_load": ([], ["--seconds", "5", "--status", "100"]),
    "watch_cost": ([], ["--quick"]),
    "log_pipeline": ([], ["--quick"]),
    "bench_accuracy_real": (["--where", "lab-real"], ["--where", "lab-real", "--runs", "3"]),
}
SCRIPT = {"bench_accuracy_real": "bench_accuracy"}  # a benchmark's script, when not its name
LAB_ONLY = {"old_way", "peers", "bench_accuracy_real"}
NO_LAB = {"command_load", "log_pipeline"}  # no cluster, or the handler doubles': runs anywhere
WHERE_GIVEN = {"bench_accuracy_real"}  # its own --where: the lab's real engine


def command(name: str, quick: bool, where: str, json_out: Path | None) -> list[str]:
    full, short = BENCHMARKS[name]
    argv = [sys.executable, str(HERE / f"{SCRIPT.get(name, name)}.py"), *(short if quick else full)]
    if name not in NO_LAB | LAB_ONLY | WHERE_GIVEN:
        argv += ["--where", where]
    if json_out is not None and name != "command_load":
        argv += ["--json", str(json_out)]
    return argv


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="each benchmark's short run")
    parser.add_argument("--where", choices=("lab", "embedded"), default="lab")
    parser.add_argument("--json", type=Path, default=None, help="append every figure here")
    parser.add_argument("--only", default=",".join(BENCHMARKS), help="comma-separated names")
    args = parser.parse_args(argv)
    names = args.only.split(",")
    unknown = [name for name in names if name not in BENCHMARKS]
    if unknown:
        parser.error(f"unknown benchmark {unknown[0]!r}; known: {', '.join(BENCHMARKS)}")
    outcome = {}
    for name in names:
        if name in LAB_ONLY and args.where != "lab":
            outcome[name] = "skipped (lab only)"
            continue
        print(f"\n=== {name} ===", flush=True)
        started = time.monotonic()
        code = subprocess.call(command(name, args.quick, args.where, args.json))
        took = time.monotonic() - started
        outcome[name] = f"{'goals met' if code == 0 else f'exit {code}'} in {took:.0f} s"
    print("\n=== summary ===")
    for name, result in outcome.items():
        print(f"{name:<22} {result}")
    failed = any(not r.startswith(("goals met", "skipped")) for r in outcome.values())
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
