"""What spark-bot's `up` adds to the server's own start-up: orchestration overhead on 2, 3 and
4 nodes.

For each launch (the controller the CLI and Slack drive, on the lab):
  wall      `up` from its start to Ready
  server    the server's own start-up: from the moment `up` started `vllm serve` to Docker's
            timestamp of its "Application startup complete"
  sample    the sample completion `up` ends with (the model's speed, not orchestration)
  ray       the emulated `ray start`'s own time on the launch's path (Ray): from Docker's start of
            the head's container to its "Ray runtime started.", plus the slowest worker's
            (each container's start to its line); the emulator's start-up, as `server` is
  overhead  wall - server - sample - ray: SSH, preflight on every node, creating and starting
            the containers, Ray's registration (`ray status`), the checks after the API is up;
            also shown with `ray` counted in (pessimistic)
  bot CPU   the CPU seconds the launching process used: the rest of the wall time it waited
Goal: overhead under 2 s on 2 nodes, growing under 1 s per extra node.

    .venv/bin/python benchmarks/overhead.py [--nodes 2,3,4] [--runs 3] [--quick]
        [--where lab|embedded]
"""

from __future__ import annotations

import argparse
import asyncio
import resource
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import aiodocker

from benchmarks.harness import WHERE, cluster_on, down, emit_json, first_stamp, table
from cluster.config import ClusterConfig, Secrets
from cluster.controller import Controller
from cluster.events import CheckpointPassed, Failed, Progress, Ready
from cluster.logs.timestamps import parse_docker_timestamp

GOAL_TWO_S = 2.0
GOAL_PER_NODE_S = 1.0
READY_LINE = "Application startup complete"
RAY_LINE = "Ray runtime started."


async def ray_start_s(config: ClusterConfig) -> float:
    """The emulated `ray start`'s time on the launch's path: the head's, then the slowest
    worker's (the workers start together once the head's Ray is up); 0 without Ray."""
    spans = []
    for node in config.nodes:
        line = await first_stamp(node, config.container.name, RAY_LINE)
        if line is None:
            return 0.0
        async with aiodocker.Docker(url=f"unix://{node.docker_socket}") as docker:
            info = await docker.containers.container(config.container.name).show()
        started = parse_docker_timestamp(info["State"]["StartedAt"])
        assert started is not None
        spans.append(line.timestamp() - started.timestamp())
    return spans[0] + max(spans[1:], default=0.0)


async def one(config: ClusterConfig, steps: dict[str, list[float]]) -> dict[str, float]:
    """One launch's split; `steps` gets the elapsed time of each checkpoint passed before
    `vllm serve` started (where the overhead goes)."""
    controller = Controller(config, Secrets({}))
    serve_issued = None
    ready = None
    cpu_before = cpu_s()
    async for event in controller.up():
        if isinstance(event, CheckpointPassed) and serve_issued is None:
            steps.setdefault(event.checkpoint, []).append(event.elapsed_s)
        elif isinstance(event, Progress) and event.phase == "weights" and serve_issued is None:
            serve_issued = time.time()
        elif isinstance(event, Failed):
            raise SystemExit(f"the launch failed: {event.summary}")
        elif isinstance(event, Ready):
            ready = event
    assert ready is not None and serve_issued is not None
    cpu = cpu_s() - cpu_before
    complete = await first_stamp(config.head, config.container.name, READY_LINE)
    assert complete is not None
    ray = await ray_start_s(config)
    await down(config)
    server = complete.timestamp() - serve_issued
    sample = ready.sample.e2e_s if ready.sample else 0.0
    return {
        "wall": ready.elapsed_s,
        "server": server,
        "sample": sample,
        "ray": ray,
        "overhead": ready.elapsed_s - server - sample - ray,
        "with_ray": ready.elapsed_s - server - sample,
        "cpu": cpu,
    }


def cpu_s() -> float:
    """CPU seconds (user + system) this process has used: what of `up` is ours to spend."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def run(where: str, node_counts: list[int], runs: int, json_out: Path | None) -> int:
    rows, medians = [], {}
    breakdown: dict[int, dict[str, list[float]]] = {}
    for nodes in node_counts:
        steps = breakdown.setdefault(nodes, {})
        async with cluster_on(where, nodes) as config:
            results = [await one(config, steps) for _ in range(runs)]
        median = {k: statistics.median(r[k] for r in results) for k in results[0]}
        medians[nodes] = median
        emit_json(json_out, "overhead", {"nodes": nodes, "runs": runs, **median})
        rows.append(
            [
                nodes,
                runs,
                round(median["wall"], 2),
                round(median["server"], 2),
                round(median["sample"], 2),
                round(median["ray"], 2),
                round(median["overhead"], 2),
                round(max(r["overhead"] for r in results), 2),
                round(median["with_ray"], 2),
                round(median["cpu"], 2),
            ]
        )
    print(
        table(
            [
                "nodes",
                "runs",
                "wall s",
                "server s",
                "sample s",
                "ray s (emulated)",
                "overhead s (median)",
                "max",
                "with ray counted",
                "bot CPU s",
            ],
            rows,
        )
    )
    ids = list(next(iter(breakdown.values())))
    print("\nbefore `vllm serve`: each checkpoint's elapsed time (median s)")
    print(
        table(
            ["nodes", *ids],
            [
                [nodes, *(round(statistics.median(steps.get(i, [0.0])), 2) for i in ids)]
                for nodes, steps in breakdown.items()
            ],
        )
    )
    ok = True
    if 2 in medians:
        ok = medians[2]["overhead"] < GOAL_TWO_S
        for nodes, median in medians.items():
            if nodes > 2:
                per_node = (median["overhead"] - medians[2]["overhead"]) / (nodes - 2)
                print(f"{nodes} nodes: +{per_node:.2f} s per extra node")
                ok &= per_node < GOAL_PER_NODE_S
    print(f"goal: overhead < {GOAL_TWO_S:g} s on 2 nodes, < {GOAL_PER_NODE_S:g} s per extra node")
    return 0 if ok else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", default="2,3,4", help="node counts (default 2,3,4)")
    parser.add_argument("--runs", type=int, default=3, help="launches per node count (default 3)")
    parser.add_argument("--quick", action="store_true", help="2 nodes, one launch")
    parser.add_argument("--where", choices=WHERE, default="lab")
    parser.add_argument("--json", type=Path, default=None, help="append the figures here")
    args = parser.parse_args(argv)
    nodes = [2] if args.quick else [int(n) for n in args.nodes.split(",")]
    runs = 1 if args.quick else args.runs
    return asyncio.run(run(args.where, nodes, runs, args.json))


if __name__ == "__main__":
    sys.exit(main())
