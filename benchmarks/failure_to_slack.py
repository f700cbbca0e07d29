"""How soon the operator is told of a failure: from the fault to the failure reply in the job's
thread, through the real bot on the Slack stand-in and the real controller.

Faults, each on a fresh `/spark up` (after Ready the job watches the cluster):
  worker-killed   the worker's container killed (Docker's kill) while serving: from the kill
  error-line      the emulator's late engine death (`late_engine_death`: the NCCL watchdog line,
                  then EngineDeadError) while serving: from Docker's timestamp of the line
  health-dies     /health dying: the head's `vllm serve` killed, its container left running
                  (Ray; lab only): from the kill; its window is the watch's probe
                  (interval x 3 misses)
  stall           NCCL init that never returns (`nccl_hang`) during the launch: from Docker's
                  timestamp of the last line before the silence; its window is `timeouts.stall`
  serving-hang    the emulator's `serving_hang` (generation stops while /health stays 200) while
                  idle: from the moment it struck (Docker's timestamp of "Application startup
                  complete." + SPARK_EMU_FAULT_AFTER_S); its window is the canary's
                  (watch.canary_interval + watch.canary_timeout); lab only
  serving-hang-traffic  the same hang while clients stream long completions (benchmarks/
                  traffic.py): the token-stall rule must find it, not the canary (it is not
                  sent while requests run; set to find the hang sooner if it were): from the
                  last token any client received; its window is watch.token_stall +
                  watch.metrics_interval
Goal: p95 under 1 s for deaths and error lines; window + under 1 s for the others.

    .venv/bin/python benchmarks/failure_to_slack.py [--runs 5] [--faults stall,...] [--quick]
        [--where lab|embedded]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from unittest import mock

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.harness import (
    WHERE,
    EventLog,
    SlackSide,
    api_address,
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
from benchmarks.traffic import Traffic
from cluster.config import ClusterConfig
from cluster.diagnosis.postmortem import probe
from cluster.events import Progress
from testkit.slack_bot import block_text
from testkit.slack_standin import Call

GOAL_S = 1.0
STALL_S = 3.0
HEALTH_INTERVAL_S = 1.0
HEALTH_MISSES = 3  # cluster/operations/watch.py's health_failures
# the serving watch's canary: at most every CANARY_S, and it must answer within CANARY_S
CANARY_S = 2.0
HANG_AFTER_S = 12.0  # after the API starts: `up`'s own sample completion (up to ~7 s) is done
# With traffic, at the lab's pace (TTFT 0.2 s, 100 tok/s) on the lab and the embedded cluster
# alike: `up`'s sample completion ends about 2 s after the API starts, so the STREAMS run
# several seconds before the hang.
TRAFFIC_HANG_AFTER_S = 8.0
STREAMS = 4
# Requests running while generated tokens stand still for TOKEN_STALL_S, read every METRICS_S.
# The canary is set to find the hang sooner if it ran (due 1.5 s after the last advance, given
# up 1.5 s later): a reply from the token-stall rule shows it was not sent.
TOKEN_STALL_S = 4.0
METRICS_S = 0.5
TRAFFIC_CANARY_S = 1.5


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
    traffic: bool = False  # clients stream completions from the watch's start to the reply


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


async def when_set(config: ClusterConfig, after_s: float) -> float:
    """The emulator stops generating SPARK_EMU_FAULT_AFTER_S after it prints the line."""
    stamp = await first_stamp(config.head, config.container.name, "Application startup complete")
    if stamp is None:
        raise SystemExit("the API server's startup line is not in the head's log")
    return stamp.timestamp() + after_s


async def hang_struck(config: ClusterConfig, _: float) -> float:
    return await when_set(config, HANG_AFTER_S)


FAULTS = [
    Fault("worker-killed", {}, 0.0, kill_worker),
    Fault(
        "error-line",
        # after Ready, in the watch: 1 s after the API started fell in `up`'s sample completion,
        # which then failed first ("Sample completion failed", after a probe)
        {"SPARK_EMU_FAULT": "late_engine_death", "SPARK_EMU_FAULT_AFTER_S": str(HANG_AFTER_S)},
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
    Fault(
        "serving-hang-traffic",
        {
            "SPARK_EMU_FAULT": "serving_hang",
            "SPARK_EMU_FAULT_AFTER_S": str(TRAFFIC_HANG_AFTER_S),
            "SPARK_EMU_PROFILE": "lab",
        },
        TOKEN_STALL_S + METRICS_S,
        None,
        watch={
            "canary_interval": TRAFFIC_CANARY_S,
            "canary_timeout": TRAFFIC_CANARY_S,
            "metrics_interval": METRICS_S,
            "token_stall": TOKEN_STALL_S,
        },
        traffic=True,
    ),
]


@dataclass(frozen=True)
class UnderTraffic:
    """What the clients saw of a hang under traffic, checked before its latency counts."""

    struck: float  # the last token any client received
    tokens: int
    streams_stuck: int
    scheduled_offset_s: float  # struck minus the fault's own moment (startup line + its delay)
    canaries: int  # canary completions the head's server received while the traffic ran


async def under_traffic(
    config: ClusterConfig, traffic: Traffic, stuck: int, failure: Call
) -> UnderTraffic:
    """The hang struck while every stream ran and the token-stall rule, not the canary, told."""
    if traffic.first_token is None or traffic.last_token is None:
        raise SystemExit(f"the clients got no token before the failure: {traffic.errors[:3]}")
    scheduled = await when_set(config, TRAFFIC_HANG_AFTER_S)
    if traffic.first_token > scheduled - 1.0:
        raise SystemExit(
            f"the traffic began {traffic.first_token - scheduled:+.1f} s from the hang: it must run "
            f"a while before it (raise TRAFFIC_HANG_AFTER_S)"
        )
    offset = traffic.last_token - scheduled
    if abs(offset) > 1.0:
        raise SystemExit(
            f"the clients' last token came {offset:+.2f} s from the moment the hang was set for: "
            "the streams stopped for another reason"
        )
    if stuck != STREAMS:
        raise SystemExit(f"{stuck} of {STREAMS} streams were open when the reply came")
    text = block_text(failure)
    if "tokens stalled" not in text or "found by the token-stall rule" not in text:
        raise SystemExit(f"the failure reply is not the token-stall rule's: {text[:600]}")
    canaries = [
        line
        for when, line in await stamped_lines(config.head, config.container.name)
        if "POST /v1/chat/completions" in line and when.timestamp() > traffic.first_token
    ]
    if canaries:
        raise SystemExit(f"{len(canaries)} canary completion(s) were sent while requests ran")
    return UnderTraffic(traffic.last_token, traffic.tokens, stuck, offset, len(canaries))


@contextmanager
def probes_timed() -> Iterator[list[tuple[float, float]]]:
    """When the post-mortem probe of the nodes (run by the launch and the watch before a symptom
    is reported) began and ended: the part of a figure that is neither the detection nor Slack."""
    spans: list[tuple[float, float]] = []

    async def timed(*args: Any, **kwargs: Any) -> Any:
        began = time.time()
        try:
            return await probe(*args, **kwargs)
        finally:
            spans.append((began, time.time()))

    # patched where it is called: the launch's and the watch's own names for it
    with (
        mock.patch("cluster.operations.launch.probe", timed),
        mock.patch("cluster.operations.watch.probe", timed),
    ):
        yield spans


@dataclass(frozen=True)
class Measured:
    latency: float  # the fault to the failure reply at Slack
    # of that, where a post-mortem probe ran: to the probe's start (the detection), the probe,
    # and from its end to the reply (the report, the bot, Slack)
    parts: tuple[float, float, float] | None
    traffic: UnderTraffic | None


async def one(side: SlackSide, config: ClusterConfig, fault: Fault, store: Path) -> Measured:
    log = EventLog()
    bot = bot_settings(store, watch_health_interval=HEALTH_INTERVAL_S)
    seen = None
    with probes_timed() as probes:
        async with bot_on(side, config, bot, log):
            _, parent_ts = await side.up()
            fault_at = None
            if fault.inject is not None or fault.traffic:
                await log.wait_for(lambda e: isinstance(e, Progress) and e.phase == "watch", 120)
            if fault.inject is not None:
                fault_at = await fault.inject(config)
            if fault.traffic:
                model = config.serve.api_model_name
                with Traffic(api_address(config), model, streams=STREAMS) as traffic:
                    failure = await side.reply(parent_ts, lambda h: h.startswith("✘"), 120)
                    stuck = traffic.in_flight
                seen = await under_traffic(config, traffic, stuck, failure)
                fault_at = seen.struck
            else:
                failure = await side.reply(parent_ts, lambda h: h.startswith("✘"), 120)
            if fault.moment is not None:
                fault_at = await fault.moment(config, failure.wall_time)
    assert fault_at is not None
    told = failure.wall_time
    parts = None
    if probes:
        began, ended = probes[-1]
        parts = (began - fault_at, ended - began, told - ended)
    return Measured(told - fault_at, parts, seen)


async def run(where: str, runs: int, faults: list[Fault], json_out: Path | None) -> int:
    rows, ok = [], True
    with SlackSide() as side, tempfile.TemporaryDirectory() as tmp:
        for fault in faults:
            if fault.lab_only and where != "lab":
                rows.append([fault.name, 0, "-", "-", "-", "-", "lab only"])
                continue
            timeouts = {"stall": STALL_S} if fault.name == "stall" else None
            measured = []
            async with cluster_on(
                where, 2, env=fault.env, timeouts=timeouts, watch=fault.watch
            ) as config:
                for n in range(runs):
                    measured.append(await one(side, config, fault, Path(tmp) / f"{fault.name}{n}"))
                    await down(config)
            latencies = [m.latency for m in measured]
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
                    **parts_figures(measured),
                    **traffic_figures([m.traffic for m in measured if m.traffic is not None]),
                    "load_average": os.getloadavg(),
                },
            )
    print(
        table(["fault", "n", "p50 ms", "p95 ms", "max ms", "goal ms (window + 1 s)", "met"], rows)
    )
    print(
        f"windows: health-dies = probe every {HEALTH_INTERVAL_S:g} s x {HEALTH_MISSES} misses; "
        f"stall = timeouts.stall {STALL_S:g} s; serving-hang = canary every {CANARY_S:g} s "
        f"+ its timeout {CANARY_S:g} s; serving-hang-traffic = token_stall {TOKEN_STALL_S:g} s "
        f"+ /metrics every {METRICS_S:g} s ({STREAMS} streams; the canary, every "
        f"{TRAFFIC_CANARY_S:g} s + {TRAFFIC_CANARY_S:g} s, is not sent while they run)"
    )
    return 0 if ok else 1


def parts_figures(measured: list[Measured]) -> dict[str, object]:
    parts = [m.parts for m in measured if m.parts is not None]
    if not parts:
        return {}
    return {
        f"{name}_ms": [ms(p[i]) for p in parts]
        for i, name in enumerate(("to_probe", "probe", "probe_to_reply"))
    }


def traffic_figures(seen: list[UnderTraffic]) -> dict[str, object]:
    if not seen:
        return {}
    return {
        "streams": STREAMS,
        "tokens": [s.tokens for s in seen],
        "canaries": sum(s.canaries for s in seen),
        "last_token_vs_scheduled_ms": [ms(s.scheduled_offset_s) for s in seen],
    }


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
