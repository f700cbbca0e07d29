"""How soon the operator is told of a failure: from the fault to the failure reply in the job's
thread, through the real bot on the Slack stand-in and the real controller.

Faults, each on a fresh `/spark up` (after Ready the job watches the cluster):
  worker-killed   the worker's container killed (Docker's kill) while serving: from the kill
  error-line      the emulator's late engine death (`late_engine_death`: the NCCL watchdog line,
                  then EngineDeadError): from Docker's timestamp of the watchdog line
  health-dies     /health dying: the head's `vllm serve` killed, its container left running
                  (Ray; lab only): from the kill; its window is the watch's probe
                  (interval x 3 misses)
  stall           NCCL init that never returns (`nccl_hang`) during the launch: from Docker's
                  timestamp of the last line before the silence; its window is `timeouts.stall`
  serving-hang    the emulator's `serving_hang` (generation stops while /health stays 200) while
                  idle: from the moment it struck (Docker's timestamp of "Application startup
                  complete." + SPARK_EMU_FAULT_AFTER_S); its window is the canary's
                  (watch.canary_interval + watch.canary_timeout); lab only
Goal: p95 under 1 s for deaths and error lines; window + under 1 s for the others.

    .venv/bin/python benchmarks/failure_to_slack.py [--runs 5] [--faults stall,...] [--quick]
        [--where lab|embedded]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.harness import (
    WHERE,
    EventLog,
    SlackSide,
    bot_on,
    bot_settings,
    cluster_on,
    down,
    emit_json,
    first_stamp,
    kill_container,
    ms,
    run_in,
    spread,
    stamped_lines,
    table,
)
from cluster.config import ClusterConfig
from cluster.events import Progress

GOAL_S = 1.0
STALL_S = 3.0
HEALTH_INTERVAL_S = 1.0
HEALTH_MISSES = 3  # cluster/watch.py's health_failures
# the serving watch's canary: at most every CANARY_S, and it must answer within CANARY_S
CANARY_S = 2.0
HANG_AFTER_S = 12.0  # after the API starts: `up`'s own sample completion (up to ~7 s) is done


@dataclass(frozen=True)
class Fault:
    name: str
    env: dict[str, str]
    window_s: float  # what the detection may take by design before the goal's second
    # after Ready (None: the fault strikes during the launch): inject, return the fault's moment
    inject: Callable[[ClusterConfig], Awaitable[float]] | None
    # when the fault happened, read after the failure reply (for log-stamped faults)
    moment: Callable[[ClusterConfig, float], Awaitable[float]] | None = None
    lab_only: bool = False
    watch: dict[str, float] | None = None  # the serving watch's settings for this fault


async def kill_worker(config: ClusterConfig) -> float:
    at = time.time()
    await kill_container(config.nodes[-1], config.container.name)
    return at


async def kill_serve(config: ClusterConfig) -> float:
    head, name = config.head, config.container.name
    pids = (await run_in(head, name, ["pgrep", "-f", "emulator vllm serve"])).split()
    if not pids:
        raise SystemExit("no `vllm serve` process in the head's container")
    at = time.time()
    await run_in(head, name, ["kill", "-9", *pids])
    return at


async def watchdog_line(config: ClusterConfig, _: float) -> float:
    stamp = await first_stamp(config.head, config.container.name, "Watchdog caught collective")
    if stamp is None:
        raise SystemExit("the watchdog line is not in the head's log")
    return stamp.timestamp()


async def last_line_before(config: ClusterConfig, told_at: float) -> float:
    """Docker's timestamp of the last line any node logged before the failure was told."""
    stamps = [
        when.timestamp()
        for node in config.nodes
        for when, _ in await stamped_lines(node, config.container.name)
        if when.timestamp() < told_at
    ]
    return max(stamps)


async def hang_struck(config: ClusterConfig, _: float) -> float:
    """The emulator stops generating SPARK_EMU_FAULT_AFTER_S after it prints the line."""
    stamp = await first_stamp(config.head, config.container.name, "Application startup complete")
    if stamp is None:
        raise SystemExit("the API server's startup line is not in the head's log")
    return stamp.timestamp() + HANG_AFTER_S


FAULTS = [
    Fault("worker-killed", {}, 0.0, kill_worker),
    Fault(
        "error-line",
        {"SPARK_EMU_FAULT": "late_engine_death", "SPARK_EMU_FAULT_AFTER_S": "1"},
        0.0,
        None,
        watchdog_line,
    ),
    Fault("health-dies", {}, HEALTH_INTERVAL_S * HEALTH_MISSES, kill_serve, lab_only=True),
    Fault("stall", {"SPARK_EMU_FAULT": "nccl_hang"}, STALL_S, None, last_line_before),
    Fault(
        "serving-hang",
        {"SPARK_EMU_FAULT": "serving_hang", "SPARK_EMU_FAULT_AFTER_S": str(HANG_AFTER_S)},
        2 * CANARY_S,
        None,
        hang_struck,
        # no traffic: the canary finds it (the token-stall rule needs requests running)
        watch={"canary_interval": CANARY_S, "canary_timeout": CANARY_S, "metrics_interval": 0.5},
        # the embedded cluster's engine stamps lines as it reads them: the moment is not exact
        lab_only=True,
    ),
]


async def one(side: SlackSide, config: ClusterConfig, fault: Fault, store: Path) -> float:
    log = EventLog()
    bot = bot_settings(store, watch_health_interval=HEALTH_INTERVAL_S)
    async with bot_on(side, config, bot, log):
        _, parent_ts = await side.up()
        fault_at = None
        if fault.inject is not None:
            await log.wait_for(lambda e: isinstance(e, Progress) and e.phase == "watch", 120)
            fault_at = await fault.inject(config)
        failure = await side.reply(parent_ts, lambda h: h.startswith("✘"), 120)
        if fault.moment is not None:
            fault_at = await fault.moment(config, failure.wall_time)
    assert fault_at is not None
    return failure.wall_time - fault_at


async def run(where: str, runs: int, faults: list[Fault], json_out: Path | None) -> int:
    rows, ok = [], True
    with SlackSide() as side, tempfile.TemporaryDirectory() as tmp:
        for fault in faults:
            if fault.lab_only and where != "lab":
                rows.append([fault.name, 0, "-", "-", "-", "-", "lab only"])
                continue
            timeouts = {"stall": STALL_S} if fault.name == "stall" else None
            latencies = []
            async with cluster_on(
                where, 2, env=fault.env, timeouts=timeouts, watch=fault.watch
            ) as config:
                for n in range(runs):
                    latencies.append(await one(side, config, fault, Path(tmp) / f"{fault.name}{n}"))
                    await down(config)
            figures = spread(latencies)
            goal = fault.window_s + GOAL_S
            met = figures["p95"] < goal
            ok &= met
            rows.append(
                [
                    fault.name,
                    len(latencies),
                    ms(figures["p50"]),
                    ms(figures["p95"]),
                    ms(figures["max"]),
                    ms(goal),
                    "yes" if met else "NO",
                ]
            )
            emit_json(
                json_out,
                "failure_to_slack",
                {
                    "fault": fault.name,
                    "window_s": fault.window_s,
                    **{k: v for k, v in figures.items()},
                },
            )
    print(
        table(["fault", "n", "p50 ms", "p95 ms", "max ms", "goal ms (window + 1 s)", "met"], rows)
    )
    print(
        f"windows: health-dies = probe every {HEALTH_INTERVAL_S:g} s x {HEALTH_MISSES} misses; "
        f"stall = timeouts.stall {STALL_S:g} s; serving-hang = canary every {CANARY_S:g} s "
        f"+ its timeout {CANARY_S:g} s"
    )
    return 0 if ok else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5, help="launches per fault (default 5)")
    parser.add_argument("--quick", action="store_true", help="one launch per fault")
    parser.add_argument(
        "--faults",
        default=",".join(f.name for f in FAULTS),
        help="comma-separated fault names (default all)",
    )
    parser.add_argument("--where", choices=WHERE, default="lab")
    parser.add_argument("--json", type=Path, default=None, help="append the figures here")
    args = parser.parse_args(argv)
    by_name = {f.name: f for f in FAULTS}
    names = args.faults.split(",")
    unknown = [name for name in names if name not in by_name]
    if unknown:
        parser.error(f"unknown fault {unknown[0]!r}; known: {', '.join(by_name)}")
    runs = 1 if args.quick else args.runs
    return asyncio.run(run(args.where, runs, [by_name[n] for n in names], args.json))


if __name__ == "__main__":
    sys.exit(main())
