"""spark-bot against the real engine, multiprocessing backend: TP=2 across two lab nodes.

One launch serves the module: every checkpoint proven by a real line or a real API answer, then
verify, status, logs, bench and watch on the running server, and a `down` that is no failure.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from benchmarks import real_accuracy
from cluster.bench.history import JsonLinesHistory
from cluster.bench.models import BenchReport
from cluster.config import Secrets
from cluster.events import (
    BenchResult,
    CheckpointPassed,
    Failed,
    LogTail,
    Progress,
    Ready,
    Removed,
    StatusReport,
)
from cluster.logs.logtext import clean_line, strip_prefixes
from cluster.nodes import connect_cluster
from cluster.operations.launch import api_base_url
from cluster.progress.checkpoints import BY_ID, launch_plan, verify_plan
from testkit.lab_cluster import collect
from testkit.real_cluster import VERSION, real_controller, shm_entries

pytestmark = [pytest.mark.lab, pytest.mark.real_engine, pytest.mark.timeout(400)]

REPO = Path(__file__).resolve().parents[2]
API_KEY = "spark-real-key-7Hc2Lq9Xw0"


@pytest.fixture(scope="module")
def launched(real_lab):
    """The module's one launch, with an API key the bot's client must send: (controller, its
    events); removed at the end."""
    controller = real_controller(secrets=Secrets({"VLLM_API_KEY": API_KEY}))
    asyncio.run(collect(controller.down()))
    shm_before = shm_entries()
    events = asyncio.run(collect(controller.up()))
    yield controller, events
    asyncio.run(collect(controller.down()))
    assert shm_entries() <= shm_before, "the engine's shared memory stays in its containers"


async def _unauthenticated_models(config) -> httpx.Response:
    async with connect_cluster(config) as connection:
        base_url = await api_base_url(config, connection.head)
        async with httpx.AsyncClient(base_url=base_url, timeout=10) as client:
            return await client.get("/v1/models")


def test_the_real_engine_wants_the_key_the_bot_sends(launched):
    controller, events = launched
    assert isinstance(events[-1], Ready), "launched, verified by the bot's own client with the key"
    refused = asyncio.run(_unauthenticated_models(controller.config))
    assert refused.status_code == 401 and refused.json() == {"error": "Unauthorized"}, (
        "as the emulator says it"
    )
    assert API_KEY not in "".join(e.model_dump_json() for e in events)


def passed(events) -> dict[str, CheckpointPassed]:
    return {e.checkpoint: e for e in events if isinstance(e, CheckpointPassed)}


def test_up_reaches_ready_with_every_checkpoint_proven_by_a_real_line(launched):
    controller, events = launched
    failures = [e for e in events if isinstance(e, Failed)]
    assert not failures, failures[0].model_dump_json(indent=1)
    by_id = passed(events)
    assert list(by_id) == [c.id for c in launch_plan(controller.config)]
    assert not [e for e in by_id.values() if e.warning and "not seen" in e.warning], (
        "no line missed"
    )
    # vLLM 0.32.0 (CPU, dummy weights) as it prints itself: one line per node for the ranks
    weights = by_id["weights"].evidence.splitlines()
    assert len(weights) == 2 and all("Initializing model took" in line for line in weights)
    assert sorted(re.search(r"Worker_TP\d", line).group(0) for line in weights) == [
        "Worker_TP0",
        "Worker_TP1",
    ]
    assert "CPU KV cache size:" in by_id["kv_cache"].evidence
    assert re.search(
        r"init engine \(profile, create kv cache, warmup model\) took [\d.]+ s$",
        by_id["engine"].evidence,
    )
    assert by_id["api_server"].evidence == "INFO:     Application startup complete."
    ready = events[-1]
    assert isinstance(ready, Ready) and ready.model == "tiny" and ready.vllm_version == VERSION
    assert ready.sample.completion_tokens > 1 and ready.sample.decode_tps > 0, (
        "the real engine's own answer"
    )


RANK_LABEL = re.compile(
    r"  \[[^\]]+\]$"
)  # cluster/progress/checkpoint_follower.py's `  [node, rank]`


def test_the_emulators_0_32_dialect_prints_the_real_engines_checkpoint_lines(launched, tmp_path):
    _, events = launched
    real = {  # each line as logged: without the rank label a per-rank checkpoint's evidence adds
        cid: RANK_LABEL.sub("", e.evidence.splitlines()[0])
        for cid, e in passed(events).items()
        if BY_ID[cid].logged
    }
    emulated = emulator_lines(tmp_path)
    for cid, real_line in real.items():
        checkpoint = BY_ID[cid]
        mine = next((line for line in emulated if spelling_of(checkpoint, line) is not None), None)
        assert mine is not None, (
            f"the emulator's 0.32 dialect prints no {cid} line (real: {real_line})"
        )
        assert spelling_of(checkpoint, mine) == spelling_of(checkpoint, real_line), (
            cid,
            mine,
            real_line,
        )
        assert shape(mine) == shape(real_line), (
            f"{cid}:\n  emulator: {mine}\n  real:     {real_line}"
        )


def emulator_lines(tmp_path: Path) -> list[str]:
    """The emulator's start-up in the 0.32 dialect, on this host, up to its API server line."""
    env = dict(
        os.environ,
        SPARK_EMU_VLLM_DIALECT="0.32",
        SPARK_EMU_TIME_SCALE="0.01",
        SPARK_EMU_GPUS="2",
        SPARK_EMU_STATE_DIR=str(tmp_path),
        PYTHONPATH=str(REPO / "lab"),
    )
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "emulator",
            "vllm",
            "serve",
            "tiny",
            "--host",
            "127.0.0.1",
            "--port",
            "0",
            "--tensor-parallel-size",
            "2",
            "--max-model-len",
            "512",
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    lines = []
    deadline = time.monotonic() + 60
    try:
        for raw in proc.stdout:
            lines.append(clean_line(raw))
            if "Application startup complete." in raw or time.monotonic() > deadline:
                break
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()  # waits, and closes our end of its pipe
    return lines


def spelling_of(checkpoint, line: str) -> int | None:
    message = strip_prefixes(line)
    return next((i for i, s in enumerate(checkpoint.spellings) if s.pattern.search(message)), None)


def shape(line: str) -> str:
    """A line's shape: the logger's [file:line] and the message, every number a N."""
    where = re.search(r"\[([\w.]+:\d+)\]", line)
    return (where.group(1) if where else "") + " " + re.sub(r"\d[\d,.]*", "N", strip_prefixes(line))


def test_verify_status_and_logs_on_the_real_server(launched):
    controller, _ = launched
    verified = asyncio.run(collect(controller.verify()))
    assert not [e for e in verified if isinstance(e, Failed)], verified[-1]
    assert [e.checkpoint for e in verified if isinstance(e, CheckpointPassed)] == [
        c.id for c in verify_plan(controller.config)
    ]
    [status] = asyncio.run(collect(controller.status()))
    assert (
        isinstance(status, StatusReport) and status.api_healthy and status.vllm_version == VERSION
    )
    assert [c.running for c in status.containers] == [True, True]
    [head] = asyncio.run(collect(controller.logs(lines=40)))
    [worker] = asyncio.run(collect(controller.logs("spark-lab-1", lines=40)))
    assert isinstance(head, LogTail) and any(
        "Application startup complete." in line for line in head.lines
    )
    assert any("Worker_TP1" in line for line in worker.lines), "the headless rank's own log"


def test_bench_measures_the_real_server_and_its_tokens_match_the_engines_counter(
    launched, tmp_path
):
    controller, _ = launched
    events = asyncio.run(
        collect(
            controller.bench(
                concurrency=[1, 2],
                max_tokens=24,
                runs=2,
                history=JsonLinesHistory(tmp_path / "bench.jsonl", BenchReport),
            )
        )
    )
    result = events[-1]
    assert isinstance(result, BenchResult), result
    report = result.report
    assert report.single.decode_tok_s > 0 and report.single.ttft_s > 0
    assert [level.concurrency for level in report.sweep] == [1, 2]
    assert all(level.ok == level.requests for level in report.sweep)
    assert report.metrics_check.matches is True, (
        report.metrics_check.detail
    )  # vllm:generation_tokens_total
    assert report.fingerprint.vllm_version == VERSION


def test_the_bench_agrees_with_the_engines_own_figures_for_the_same_requests(launched):
    """benchmarks/bench_accuracy.py --where lab-real, short, on this module's server (vLLM's own
    client left out: its start alone takes ~30 s): the engine's /metrics histograms, read after
    each of the bench's single-stream runs, are that run's own figures as the engine timed it."""
    controller, events = launched
    measured = asyncio.run(
        real_accuracy.measure_running(
            controller, events[-1], max_tokens=64, runs=3, with_vllm=False
        )
    )
    ours, engine = measured.ours.requests, measured.server.requests
    assert len(engine) == 2, "runs 2 and 3: run 1 follows the warm-up with no read between"
    assert {r.tokens for r in ours + engine} == {64}
    for mine, theirs in zip(ours[1:], engine, strict=True):
        # sent before the engine received it, its first token read after the engine made it
        assert mine.ttft_s > theirs.ttft_s
        # The decode window is the time from the first token to the last: a first token read
        # late by the client (a busy core) shortens ours by that lateness, which is at most what
        # our TTFT exceeds the engine's; beyond it, 5 %.
        mine_s = (mine.tokens - 1) / mine.decode_tok_s
        theirs_s = (theirs.tokens - 1) / theirs.decode_tok_s
        late = mine.ttft_s - theirs.ttft_s
        assert abs(mine_s - theirs_s) <= 0.05 * theirs_s + late, (mine, theirs)


def test_watch_then_down_is_a_stop_not_an_engine_death(launched):
    controller, _ = launched

    async def watch_through_down():
        seen = []
        watching = controller.watch(health_interval=2)
        first = await anext(watching)
        seen.append(first)
        removal = asyncio.create_task(collect(controller.down()))
        async with asyncio.timeout(120):
            async for event in watching:
                seen.append(event)
        return seen, await removal

    seen, removed = asyncio.run(watch_through_down())
    assert [e.removed for e in removed if isinstance(e, Removed)] == [True, True]
    assert not [e for e in seen if isinstance(e, Failed)], next(
        e for e in seen if isinstance(e, Failed)
    )
    assert isinstance(seen[-1], Progress) and seen[-1].phase == "stopped"
    assert "SIGTERM" in seen[-1].message
