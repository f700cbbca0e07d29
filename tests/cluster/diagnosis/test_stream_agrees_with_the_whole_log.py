"""The launch's streaming verdict (LogFollower, as each line arrives) agrees with the whole log's
(cluster.diagnosis.explain): a line vLLM logs at ERROR and goes on from (its own dialect, from
its source) fails neither; a fatal line fails both, the stream at once; an error no row knows
before the end fails neither. The development part of the corpus of real logs is streamed too."""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.config import load_config
from cluster.config import Secrets
from cluster.diagnosis.explain import explain
from cluster.events import CheckpointPassed, Event, Failed
from cluster.logs.container_stream import ClusterMonitor, LogLine
from cluster.progress.checkpoint_follower import Expectation, LogFollower
from cluster.progress.checkpoints import BY_ID, spellings_for
from cluster.progress.reporter import Reporter
from testkit.lab_cluster import LAB_CONFIG
from tests.cluster.diagnosis import corpus

CONFIG = load_config(LAB_CONFIG).cluster
LOGS = Path(__file__).resolve().parents[2] / "data" / "logs"
HEALTHY = (LOGS / "real-vllm-0.32-cpu-ray-head.log").read_text().splitlines()
READY = next(i for i, line in enumerate(HEALTHY) if "Application startup complete." in line)
ENGINE = "(EngineCore pid=227) "


def vllm(level: str, file: str, msg: str) -> str:
    return f"{ENGINE}{level} 12-01 06:21:05 [{file}] {msg}"


# vLLM 0.32.0's own ERROR lines that the start-up goes on from, as its NewLineFormatter prints
# them (the record's prefix on each line of its traceback): platforms/cuda.py
# is_fully_connected, v1/attention/backends/fa_utils.py, model_executor/layers/fused_moe/
# config.py, plugins/__init__.py
SURVIVED = [
    vllm(
        "ERROR",
        "cuda.py:823",
        "NVLink detection failed. This is normal if your machine has no NVLink equipped.",
    ),
    vllm("ERROR", "cuda.py:823", "Traceback (most recent call last):"),
    vllm(
        "ERROR",
        "cuda.py:823",
        '  File "/usr/local/lib/python3.12/dist-packages/vllm/platforms/cuda.py", line 815, '
        "in is_fully_connected",
    ),
    vllm("ERROR", "cuda.py:823", "    p2p_status = pynvml.nvmlDeviceGetP2PStatus("),
    vllm("ERROR", "cuda.py:823", "vllm.third_party.pynvml.NVMLError_NotSupported: Not Supported"),
    vllm(
        "ERROR",
        "fa_utils.py:212",
        "Cannot use FA version 3 is not supported due to FA3 is only supported on devices with "
        "compute capability 9.x",
    ),
    vllm(
        "ERROR",
        "config.py:35",
        "Failed to import Triton kernels. Please make sure your triton version is compatible. "
        "Error: cannot import name 'PrecisionConfig' from 'triton_kernels.matmul_ogs'",
    ),
    "(APIServer pid=1) ERROR 12-01 06:20:01 [__init__.py:72] Failed to load plugin my_plugin",
    "(APIServer pid=1) ERROR 12-01 06:20:01 [__init__.py:72] Traceback (most recent call last):",
    "(APIServer pid=1) ERROR 12-01 06:20:01 [__init__.py:72] ModuleNotFoundError: No module "
    "named 'my_plugin_dep'",
]


async def streamed(lines: list[str]) -> tuple[list[Event], int]:
    """The follower's events for the API checkpoint over `lines` (published as a container's
    log), and how many lines it had read when it answered."""
    monitor = ClusterMonitor("vllm", Secrets({}), 10)
    head = CONFIG.head.name
    for line in lines:
        monitor.publish(LogLine(head, line))
    follower = LogFollower(CONFIG, monitor, Reporter())
    read: list[LogLine] = []
    follower.observers.append(read.append)
    checkpoint = BY_ID["api_server"]
    expectation = Expectation(checkpoint, spellings_for(checkpoint, CONFIG.knowledge))
    events = [event async for event in follower.expect([expectation])]
    return events, len(read)


def verdict_of(events: list[Event]) -> str:
    assert len(events) == 1, events
    return "failed" if isinstance(events[0], Failed) else "passed"


async def test_vllms_survived_error_lines_fail_neither_the_stream_nor_the_log():
    lines = HEALTHY[: READY - 2] + SURVIVED + HEALTHY[READY - 2 :]
    events, _ = await streamed(lines)
    assert isinstance(events[0], CheckpointPassed), events
    assert events[0].warning is None  # not findings either: nothing to warn of
    explained = explain(lines)
    assert explained.verdict == "healthy", explained.why
    shown = {(m.row, m.fatal) for m in explained.matches}
    assert {
        ("nvlink_detection_failed", False),
        ("flash_attn_version_unusable", False),
        ("triton_kernels_import_failed", False),
        ("plugin_load_failed", False),
    } <= shown


async def test_their_tracebacks_are_no_root_of_a_later_failure():
    lines = HEALTHY[: READY - 2] + SURVIVED
    lines += [
        vllm("ERROR", "core.py:1510", "EngineCore failed to start."),
        vllm("ERROR", "core.py:1510", "Traceback (most recent call last):"),
        vllm("ERROR", "core.py:1510", "ValueError: No available memory for the cache blocks."),
    ]
    found = explain(lines).diagnosis
    assert found is not None and found.signature_id == "kv_cache_no_memory"
    without_row = [line.replace("No available memory", "Nothing left") for line in lines]
    found = explain(without_row).diagnosis
    assert found is not None and found.signature_id == "engine_start_failed"
    assert found.evidence.endswith("ValueError: Nothing left for the cache blocks.")


async def test_a_fatal_line_fails_the_stream_at_once_and_the_whole_log():
    fatal = vllm("ERROR", "core.py:1", "torch.OutOfMemoryError: CUDA out of memory.")
    lines = [*HEALTHY[: READY - 2], fatal, *HEALTHY[READY - 2 :]]
    events, read = await streamed(lines)
    assert verdict_of(events) == "failed"
    failed = events[0]
    assert isinstance(failed, Failed) and failed.signature == "cuda_oom"
    assert failed.evidence == fatal
    assert read == READY - 2  # answered as the fatal line arrived, before the ready line
    assert explain(lines).verdict == "failed"


async def test_an_error_no_row_knows_before_the_end_fails_neither():
    unknown = [
        vllm("ERROR", "gpu_worker.py:1", "Traceback (most recent call last):"),
        vllm("ERROR", "gpu_worker.py:1", "RuntimeError: a probe that vLLM catches"),
    ]
    lines = HEALTHY[: READY - 2] + unknown + HEALTHY[READY - 2 :]
    events, _ = await streamed(lines)
    assert verdict_of(events) == "passed"
    assert explain(lines).verdict == "healthy"


HEALTHY_CASES = [
    case
    for case in corpus.development(corpus.load_cases())
    if case.outcome == "healthy" and explain(case.lines).ready_line is not None
]


@pytest.mark.parametrize("case", HEALTHY_CASES, ids=[c.id for c in HEALTHY_CASES])
async def test_a_real_healthy_start_up_streamed_passes_as_its_whole_log_does(case):
    events, _ = await streamed(case.lines)
    assert explain(case.lines).verdict == "healthy"
    assert verdict_of(events) == "passed", events
