"""What the bot costs while it waits: CPU and memory of the bot's process while it watches a
running cluster, and while the containers stream a log flood.

The real bot (Bolt, Socket Mode, the dispatcher, the store) launches with `/spark up` on the
Slack stand-in and then watches (its shipped settings: a health probe every 30 s). Measured in
the bot's process (the stand-in runs on a thread of it and is idle meanwhile):
  idle   for `--seconds` (default 600): CPU seconds (user + system) and the share of one core,
         peak RSS; goal under 1 % of one core
  flood  the head's container writes `--flood-rate` lines per second (default 100,000) for
         `--flood-seconds` (default 30) into its log (lab only): RSS before, peak and after
         (memory flat), the event loop's longest lag (goal under 100 ms), the rate achieved,
         and that the watch reported no failure; also how long the bot's process waited for a
         CPU meanwhile (the kernel's run-queue time, /proc/self/schedstat): on the lab's machine
         the flood's writer, the nodes' dockerd and sshd and the bot share the cores
  --own-core  the flood again with the bot on a core of its own (the last; every other process
         of the machine on the others), as when the bot runs on a machine of its own. It moves
         other people's processes too (root), and puts each back at the end; a benchmark killed
         by SIGKILL meanwhile leaves them on the other cores (`taskset -a -p -c 0-N PID`)
Needs the lab (root) for the flood:

    .venv/bin/python benchmarks/watch_cost.py [--seconds 600] [--flood-rate 100000]
        [--flood-seconds 30] [--own-core] [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext, suppress
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.command_load import LoopLag
from benchmarks.harness import (
    WHERE,
    EventLog,
    SlackSide,
    bot_on,
    bot_settings,
    cluster_on,
    emit_json,
    run_in,
    table,
)
from cluster.config import ClusterConfig
from cluster.events import Failed, Progress

GOAL_CPU_SHARE = 0.01
GOAL_LAG_S = 0.1
FLOOD = r"""
import sys, time
rate, seconds = float(sys.argv[1]), float(sys.argv[2])
out = open("/proc/1/fd/1", "w", buffering=1 << 20)
line = ("(APIServer pid=7) INFO 12-01 10:00:00 [loggers.py:123] Engine 000: "
        "Avg prompt throughput: 0.0 tokens/s, flood line %d\n")
start, sent = time.monotonic(), 0
while (now := time.monotonic()) - start < seconds:
    due = int((now - start) * rate)
    if sent < due:
        n = min(2000, due - sent)
        out.write("".join(line % (sent + i) for i in range(n)))
        out.flush()
        sent += n
    else:
        time.sleep(0.002)
print(sent, time.monotonic() - start)
"""


class LongestStep:
    """The most CPU time one callback of the loop took (the bot's own work that held the loop,
    whatever the machine's other load adds to the wall-clock lag), and whose it was."""

    def __init__(self) -> None:
        self.cpu_s = 0.0
        self.name = "-"
        self._original = asyncio.events.Handle._run

    def __enter__(self) -> LongestStep:
        original, longest = self._original, self

        def timed(handle: asyncio.events.Handle) -> None:
            started = time.thread_time()
            original(handle)
            took = time.thread_time() - started
            if took > longest.cpu_s:
                callback = handle._callback  # type: ignore[attr-defined]
                owner = getattr(callback, "__self__", None)
                what = owner.get_coro() if isinstance(owner, asyncio.Task) else callback
                longest.cpu_s, longest.name = took, getattr(what, "__qualname__", repr(what))

        asyncio.events.Handle._run = timed  # type: ignore[method-assign,assignment]
        return self

    def __exit__(self, *exc: object) -> None:
        asyncio.events.Handle._run = self._original  # type: ignore[method-assign]


def rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def run_queue_wait_s() -> float:
    """How long this process's threads have waited, runnable, for a CPU (the scheduler's
    account, in ns)."""
    return (
        sum(
            int((task / "schedstat").read_text().split()[1])
            for task in Path("/proc/self/task").iterdir()
        )
        / 1e9
    )


def threads_of(pid: str) -> list[int]:
    try:
        return [int(task.name) for task in Path(f"/proc/{pid}/task").iterdir()]
    except OSError:
        return []  # gone meanwhile


@contextmanager
def own_core() -> Iterator[None]:
    """The bot's threads alone on the last CPU: every other thread on the machine (the lab's
    nodes, the flood's writer, anything else running; what they fork inherits it) moved to the
    other CPUs, as if the bot ran on a machine of its own. Each thread's mask is restored on exit."""
    cpus = os.sched_getaffinity(0)
    if len(cpus) < 2:
        raise SystemExit("--own-core needs two CPUs or more")
    mine = set(threads_of("self"))
    bot = {max(cpus)}
    moved: dict[int, set[int]] = {}
    for tid in mine:
        moved[tid] = os.sched_getaffinity(tid)
        os.sched_setaffinity(tid, bot)
    for pid in (entry.name for entry in Path("/proc").iterdir() if entry.name.isdigit()):
        for tid in threads_of(pid):
            try:
                before = os.sched_getaffinity(tid)
                if tid not in mine and before & bot and before - bot:
                    os.sched_setaffinity(tid, before - bot)
                    moved[tid] = before
            except OSError:
                continue  # gone meanwhile, or a kernel thread bound to its CPU
    try:
        yield
    finally:
        for tid, before in moved.items():
            with suppress(OSError):
                os.sched_setaffinity(tid, before)


async def sample_rss(seconds: float, every: float) -> list[float]:
    """RSS every `every` seconds for `seconds` (the sleep paces the samples)."""
    samples = [rss_mib()]
    end = time.monotonic() + seconds
    while (left := end - time.monotonic()) > 0:
        await asyncio.sleep(min(every, left))
        samples.append(rss_mib())
    return samples


async def flood(config: ClusterConfig, rate: float, seconds: float) -> tuple[int, float]:
    output = await run_in(
        config.head,
        config.container.name,
        ["python3", "-c", FLOOD, repr(rate), repr(seconds)],
    )
    sent, took = output.split()
    return int(sent), float(took)


async def flood_row(
    config: ClusterConfig,
    log: EventLog,
    rate: float,
    seconds: float,
    pinned: bool,
    json_out: Path | None,
) -> tuple[list[str], bool]:
    cpu0, waited0 = cpu_s(), run_queue_wait_s()
    with own_core() if pinned else nullcontext(), LoopLag() as lag, LongestStep() as step:
        sampler = asyncio.create_task(sample_rss(seconds + 5, every=1.0))
        sent, took = await flood(config, rate, seconds)
        memory = await sampler
    cpu, waited = cpu_s() - cpu0, run_queue_wait_s() - waited0
    failed = [r for r in log.items if isinstance(r.event, Failed)]
    where = "the bot on its own core" if pinned else "cores shared"
    row = [
        f"flood {sent / took:,.0f} lines/s x {took:.0f} s, {where}",
        f"{cpu:.2f}",
        f"{cpu / (seconds + 5) * 100:.0f} %",
        f"{memory[0]:.0f} / {max(memory):.0f} / {memory[-1]:.0f}",
        f"{lag.max * 1000:.0f}",
        f"{step.cpu_s * 1000:.0f} ({step.name})",
        f"{waited:.1f}",
        "failure reported!" if failed else "no failure",
    ]
    emit_json(
        json_out,
        "watch_cost",
        {
            "phase": "flood",
            "own_core": pinned,
            "lines": sent,
            "seconds": took,
            "cpu_s": cpu,
            "run_queue_wait_s": waited,
            "rss_mib": memory,
            "loop_lag_ms": lag.max * 1000,
            "longest_step_cpu_ms": step.cpu_s * 1000,
            "failed": bool(failed),
        },
    )
    return row, lag.max < GOAL_LAG_S and not failed


async def run(
    where: str,
    seconds: float,
    rate: float,
    flood_seconds: float,
    pin: bool,
    json_out: Path | None,
) -> int:
    ok = True
    rows = []
    with SlackSide() as side, tempfile.TemporaryDirectory() as tmp:
        async with cluster_on(where, 2) as config:
            log = EventLog()
            async with bot_on(side, config, bot_settings(Path(tmp)), log):
                await side.up()
                await log.wait_for(lambda e: isinstance(e, Progress) and e.phase == "watch", 180)
                cpu0, wall0 = cpu_s(), time.monotonic()
                idle = await sample_rss(seconds, every=5.0)
                cpu = cpu_s() - cpu0
                share = cpu / (time.monotonic() - wall0)
                ok &= share < GOAL_CPU_SHARE
                rows.append(
                    [
                        f"watching, {seconds:g} s",
                        f"{cpu:.2f}",
                        f"{share * 100:.2f} %",
                        f"{idle[0]:.0f} / {max(idle):.0f} / {idle[-1]:.0f}",
                        "-",
                        "-",
                        "-",
                        "-",
                    ]
                )
                emit_json(
                    json_out,
                    "watch_cost",
                    {
                        "phase": "idle",
                        "seconds": seconds,
                        "cpu_s": cpu,
                        "share": share,
                        "rss_mib": idle,
                    },
                )
                if where != "lab":
                    rows.append(["log flood", "-", "-", "-", "-", "-", "-", "lab only"])
                for pinned in ((False, True) if pin else (False,)) if where == "lab" else ():
                    row, passed = await flood_row(
                        config, log, rate, flood_seconds, pinned, json_out
                    )
                    rows.append(row)
                    ok &= passed
    print(
        table(
            [
                "phase",
                "CPU s",
                "of one core",
                "RSS MiB start/peak/end",
                "loop lag max ms",
                "longest step, CPU ms",
                "waited for a CPU s",
                "watch",
            ],
            rows,
        )
    )
    print(
        "peak RSS over the process's life: "
        f"{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB; "
        f"goals: idle < {GOAL_CPU_SHARE * 100:g} % of one core; "
        f"flood: memory flat, loop lag < {GOAL_LAG_S * 1000:g} ms"
    )
    return 0 if ok else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=600.0, help="idle watch (default 600)")
    parser.add_argument("--flood-rate", type=float, default=100_000.0)
    parser.add_argument("--flood-seconds", type=float, default=30.0)
    parser.add_argument(
        "--own-core", action="store_true", help="the flood again, the bot on a core of its own"
    )
    parser.add_argument("--quick", action="store_true", help="5 s idle, 2 s of 10,000 lines/s")
    parser.add_argument("--where", choices=WHERE, default="lab")
    parser.add_argument("--json", type=Path, default=None, help="append the figures here")
    args = parser.parse_args(argv)
    if args.quick:
        args.seconds, args.flood_rate, args.flood_seconds = 5.0, 10_000.0, 2.0
    return asyncio.run(
        run(args.where, args.seconds, args.flood_rate, args.flood_seconds, args.own_core, args.json)
    )


if __name__ == "__main__":
    sys.exit(main())
