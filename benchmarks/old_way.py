"""Against the old way: when the operator learns that the server is Ready, and that a launch
failed, with the seed's shell loop (benchmarks/old_way.sh: the launch steps with the docker
CLI over ssh, then `sleep 30; tail -30` until "Application startup complete", then a health
poll) and with spark-bot's `up` (the controller the CLI and Slack drive), on the same lab and
the same emulator profile, one after the other.

The emulator runs the Spark pair's real phase durations (profile spark-pair-qwen35, 689 s
nominal) times `--scale` (default 0.17: a launch of about two minutes); the failure is the
emulator's NCCL init error. For each: when it happened (Docker's timestamp of the server's
line), when each learned of it, how late, and the ratio. Needs the lab (root):

    .venv/bin/python benchmarks/old_way.py [--scale 0.17] [--poll 30] [--part ready|failure|both]
    .venv/bin/python benchmarks/old_way.py --quick     # tiny: scale 0.005, poll 2 s
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import aiodocker

from benchmarks.harness import cluster_on, down, emit_json, first_stamp, table
from cluster.config import ClusterConfig, Secrets
from cluster.controller import Controller
from cluster.events import CheckpointPassed, Failed, Ready

SCRIPT = Path(__file__).with_name("old_way.sh")
PROFILE = "spark-pair-qwen35"
FAULT = "nccl_error"
READY_LINE = "Application startup complete"
FAULT_LINE = "NCCL error: unhandled system error"
OLD_NAME = "vllm_oldway"
# A launch of minutes: phase deadlines far beyond it, so only the emulator decides the pace.
SLOW_TIMEOUTS: dict[str, float] = {
    "weights": 1800,
    "engine": 900,
    "api": 900,
    "stall": 900,
    "containers": 120,
}


@dataclass
class Learned:
    who: str
    what: str
    happened_s: float | None  # the server's line, seconds after the launch began
    learned_s: float | None  # when this launcher told its operator

    @property
    def late_s(self) -> float | None:
        if self.happened_s is None or self.learned_s is None:
            return None
        return self.learned_s - self.happened_s


def emulator_env(scale: float, fault: str | None, profile: str) -> dict[str, str]:
    env = {"SPARK_EMU_PROFILE": profile, "SPARK_EMU_TIME_SCALE": repr(scale)}
    if fault:
        env["SPARK_EMU_FAULT"] = fault
    return env


async def shell(
    config: ClusterConfig, env: dict[str, str], poll: float, what: str
) -> tuple[float | None, float]:
    """Run old_way.sh; (seconds from its start to learning `what`, or None; its start)."""
    head, worker = config.nodes[0], config.nodes[1]
    assert head.ssh is not None, "the lab's nodes are reached over SSH"
    settings = {
        "HEAD_SOCK": head.docker_socket,
        "WORKER_SOCK": worker.docker_socket,
        "HEAD_IP": head.fabric_ip,
        "WORKER_IP": worker.fabric_ip,
        "API": f"http://{head.ssh.host}:{config.serve.port}",
        "IMAGE": config.container.image,
        "NAME": OLD_NAME,
        "POLL": repr(poll),
        "EMU_ENV": " ".join(f"{k}={v}" for k, v in env.items()),
    }
    started = time.time()
    # a thread waits for the script: no subprocess transport outlives the benchmark's loop
    done = await asyncio.to_thread(
        subprocess.run,
        ["bash", str(SCRIPT)],
        env={**os.environ, **settings},
        stdout=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        check=False,
    )
    out = done.stdout
    events = {}
    for line in out.decode().splitlines():
        if line.startswith("EVENT "):
            _, event, at, *_ = line.split(" ", 3)
            events[event] = float(at)
    learned_at = events.get("ready" if what == "Ready" else "failed")
    return (None if learned_at is None else learned_at - started), started


async def old_way(config: ClusterConfig, env: dict[str, str], poll: float, what: str) -> Learned:
    """Runs the script; meanwhile samples the head container's log (the script removes its
    containers when it ends) for Docker's timestamp of the line that shows the event."""
    needle = READY_LINE if what == "Ready" else FAULT_LINE
    task = asyncio.create_task(shell(config, env, poll, what))
    happened = None
    while not task.done() and happened is None:
        try:
            happened = await first_stamp(config.head, OLD_NAME, needle)
        except aiodocker.DockerError:
            happened = None  # no container yet
        if happened is None:
            await asyncio.wait([task], timeout=1.0)
    learned_s, started = await task
    return Learned(
        "old way (sleep/tail)",
        what,
        None if happened is None else happened.timestamp() - started,
        learned_s,
    )


async def spark_bot(config: ClusterConfig, what: str) -> list[Learned]:
    """`up`'s outcome (Ready comes after /health, /v1/models and a sample completion), and for
    a launch that succeeds, also its "API server started" checkpoint: when it told of the line
    the old way waits for."""
    controller = Controller(config, Secrets({}))
    started = time.time()
    learned_s = api_s = None
    async for event in controller.up():
        if isinstance(event, CheckpointPassed) and event.checkpoint == "api_server":
            api_s = time.time() - started
        if isinstance(event, Ready | Failed) and learned_s is None:
            learned_s = time.time() - started
            if isinstance(event, Ready) != (what == "Ready"):
                raise SystemExit(f"spark-bot up: expected {what}, got {event}")
    needle = READY_LINE if what == "Ready" else FAULT_LINE
    stamp = await first_stamp(config.head, config.container.name, needle)
    await down(config)
    happened = None if stamp is None else stamp.timestamp() - started
    learned = [Learned("spark-bot up", what, happened, learned_s)]
    if what == "Ready":
        learned.append(Learned("spark-bot: API server checkpoint", what, happened, api_s))
    return learned


async def run(
    scale: float, poll: float, parts: list[str], profile: str, json_out: Path | None
) -> int:
    rows, ok = [], True
    for part in parts:
        what = "Ready" if part == "ready" else "failure"
        env = emulator_env(scale, None if part == "ready" else FAULT, profile)
        async with cluster_on("lab", 2, env=env, timeouts=SLOW_TIMEOUTS) as config:
            old = await old_way(config, env, poll, what)
            told = await spark_bot(config, what)
        ours = told[0]
        for learned in (old, *told):
            rows.append(
                [
                    what,
                    learned.who,
                    _s(learned.happened_s),
                    _s(learned.learned_s),
                    _s(learned.late_s),
                ]
            )
        if old.learned_s and ours.learned_s:
            # a ratio of lateness means nothing once spark-bot's is within the clocks' noise
            late = (
                f"{(old.late_s or 0) / ours.late_s:.0f}x"
                if ours.late_s is not None and ours.late_s >= 0.1
                else "-"
            )
            rows.append(
                [what, "ratio old/spark-bot", "", f"{old.learned_s / ours.learned_s:.2f}x", late]
            )
        else:
            ok = False
        emit_json(
            json_out,
            "old_way",
            {
                "what": what,
                "scale": scale,
                "poll_s": poll,
                "old": vars(old),
                "spark_bot": vars(ours),
            },
        )
    print(
        table(
            ["event", "launcher", "happened (s)", "learned (s)", "late by (s)"],
            rows,
        )
    )
    print(
        f"seconds from the launch's start; emulator profile {profile} x {scale:g}; "
        f"the old way looks every {poll:g} s; happened = Docker's timestamp of the server's line"
    )
    return 0 if ok else 1


def _s(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--scale", type=float, default=0.17, help="emulator time scale (0.17: ~2 min)"
    )
    parser.add_argument("--poll", type=float, default=30.0, help="the old way's sleep (default 30)")
    parser.add_argument("--part", choices=("ready", "failure", "both"), default="both")
    parser.add_argument(
        "--quick", action="store_true", help="scale 0.005 of the lab profile, poll 2 s"
    )
    parser.add_argument("--json", type=Path, default=None, help="append the figures here")
    args = parser.parse_args(argv)
    parts = ["ready", "failure"] if args.part == "both" else [args.part]
    from lab.api import exclusive_use

    with exclusive_use():
        if args.quick:
            return asyncio.run(run(0.005, 2.0, parts, "lab", args.json))
        return asyncio.run(run(args.scale, args.poll, parts, PROFILE, args.json))


if __name__ == "__main__":
    sys.exit(main())
