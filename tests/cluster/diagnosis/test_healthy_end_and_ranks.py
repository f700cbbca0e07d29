"""Healthy is proven by the end of start-up, not by the absence of ERROR (cluster/diagnosis/explain.py), and
a per-rank checkpoint counts distinct ranks, not lines (cluster/progress/checkpoint_follower.py Expectation)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from cluster.diagnosis.explain import explain
from cluster.logs.container_stream import LogLine
from cluster.logs.logtext import rank_of
from cluster.progress.checkpoint_follower import Expectation
from cluster.progress.checkpoints import BY_ID, WEIGHTS_SPELLINGS

LOGS = Path(__file__).resolve().parents[2] / "data" / "logs"
HEALTHY = (LOGS / "real-vllm-0.32-cpu-ray-head.log").read_text().splitlines()
READY = next(i for i, line in enumerate(HEALTHY) if "Application startup complete." in line)
ENGINE = "(EngineCore pid=227) "


def with_lines(at: int, *extra: str) -> list[str]:
    return HEALTHY[:at] + list(extra) + HEALTHY[at:]


def test_an_error_line_the_start_up_survived_is_no_failure():
    # an ERROR line and an exception no row knows, before the end: the end proves it healthy
    unknown = [
        ENGINE + "ERROR 12-01 06:21:05 [gpu_worker.py:1] Something went sideways",
        ENGINE + "ERROR 12-01 06:21:05 [gpu_worker.py:1] RuntimeError: a probe failed",
    ]
    explained = explain(with_lines(READY - 2, *unknown))
    assert explained.verdict == "healthy", explained.why
    assert explained.ready_line == READY + 3


def test_a_fatal_line_before_the_end_fails_the_log_as_the_stream_does():
    fatal = ENGINE + (
        "ERROR 12-01 06:21:05 [core.py:1] RuntimeError: CUDA error: no kernel image is "
        "available for execution on the device"
    )
    explained = explain(with_lines(READY - 2, fatal))
    assert explained.verdict == "failed", explained.why
    assert explained.diagnosis is not None and explained.diagnosis.fatal
    assert explained.diagnosis.signature_id == "cuda_no_kernel_image"
    assert "a fatal line fails the launch as it arrives" in explained.why


def test_a_fatal_line_after_the_end_of_start_up_is_a_failure():
    oom = ENGINE + "ERROR 12-01 06:30:00 [core.py:1] torch.OutOfMemoryError: CUDA out of memory."
    explained = explain(with_lines(READY + 3, oom))
    assert explained.verdict == "failed" and explained.diagnosis is not None
    assert explained.diagnosis.signature_id == "cuda_oom"
    assert f"after the start-up completed (line {READY + 1})" in explained.why


def test_a_log_without_its_end_is_not_proven_healthy():
    explained = explain(HEALTHY[: READY - 10])
    assert explained.verdict == "incomplete" and "not proven healthy" in explained.why


def test_the_checkpoints_a_healthy_log_proves_each_with_its_line_and_rank():
    explained = explain(HEALTHY)
    weights = [p for p in explained.checkpoints if p.checkpoint == "weights"]
    assert [p.rank for p in weights] == ["TP0", "TP1 on 198.18.1.11"]
    assert {p.checkpoint for p in explained.checkpoints} >= {"weights", "kv_cache", "engine"}
    assert explained.checkpoints_missing == []


def test_diagnose_explain_and_json(tmp_path):
    log = tmp_path / "vllm.log"
    log.write_text(
        "\n".join((LOGS / "real-vllm-0.32-cpu-ray-refusal.log").read_text().splitlines())
    )

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "bot.cli", "diagnose", *args, str(log)],
            capture_output=True,
            text=True,
            timeout=60,
        )

    explained = run("--explain")
    assert explained.returncode == 1
    assert "why: row ray_platform_unsupported is a cause" in explained.stdout
    assert "ray_platform_unsupported (ray_cluster, cause, fatal)" in explained.stdout
    assert "engine_start_failed (other, symptom, fatal)" in explained.stdout
    document = json.loads(run("--json").stdout)
    assert document["verdict"] == "failed"
    assert document["diagnosis"]["family"] == "ray_cluster"
    assert {m["row"] for m in document["matches"]} >= {
        "ray_platform_unsupported",
        "engine_start_failed",
    }


def expectation(count: int = 2) -> Expectation:
    return Expectation(BY_ID["weights"], WEIGHTS_SPELLINGS, count=count)


def test_one_process_printing_the_line_twice_is_one_rank():
    # speculative decoding: the head's engine loads the model, then the draft
    weights = expectation()
    for seconds in ("61.20", "3.10"):
        weights.offer(
            LogLine(
                "spark-a",
                ENGINE + f"INFO 12-01 06:21:03 [default_loader.py:1] Loading weights "
                f"took {seconds} seconds",
            )
        )
    assert not weights.done and weights.tally == {0: 1}
    weights.offer(
        LogLine(
            "spark-b",
            "(EngineCore pid=31) INFO 12-01 06:21:04 [default_loader.py:1] Loading weights took "
            "60.00 seconds",
        )
    )
    assert weights.done
    assert weights.evidence().splitlines()[0].endswith("[spark-a, pid 227]")
    assert weights.evidence().splitlines()[1].endswith("[spark-b, pid 31]")


def test_ranks_of_one_log_and_rays_repeats_count():
    weights = expectation(3)
    for prefix in (
        "(RayWorkerProc pid=252) (Worker_TP0 pid=252) ",
        "(RayWorkerProc pid=95, ip=198.18.1.11) (Worker_TP1 pid=95) ",
    ):
        weights.offer(LogLine("spark-a", prefix + "INFO x [l.py:1] Loading weights took 1 seconds"))
    assert weights.tally == {0: 2} and not weights.done
    weights.offer(
        LogLine(
            "spark-a",
            "(RayWorkerWrapper pid=7, ip=10.0.0.3) INFO x [l.py:1] Loading weights took 1 seconds "
            "[repeated 1x across cluster]",
        )
    )
    assert weights.done  # 2 distinct ranks + a line Ray says one more rank printed
    assert rank_of("[rank1]:[E1130 05:42:03.1 ProcessGroupNCCL.cpp:632] x") == "rank 1"
    assert rank_of("INFO:     Application startup complete.") is None


# vLLM 0.10.0's serving_chat.py logs a request it rejects (`logger.exception`), answers it 400,
# and goes on serving (the lines as a real 0.10.0 server printed them).
REJECTED_REQUEST = [
    "ERROR 08-18 19:58:43 [serving_chat.py:203] Error in preprocessing prompt inputs",
    "ERROR 08-18 19:58:43 [serving_chat.py:203] Traceback (most recent call last):",
    'ERROR 08-18 19:58:43 [serving_chat.py:203]   File "/x/vllm/entrypoints/openai/'
    'serving_engine.py", line 626, in _validate_input',
    "ERROR 08-18 19:58:43 [serving_chat.py:203]     raise ValueError(",
    "ERROR 08-18 19:58:43 [serving_chat.py:203] ValueError: This model's maximum context "
    "length is 2048 tokens. However, you requested 5418 tokens.",
    'INFO:     127.0.0.1:59064 - "POST /v1/chat/completions HTTP/1.1" 400 Bad Request',
]
ANSWERED = 'INFO:     127.0.0.1:52196 - "GET /health HTTP/1.1" 200 OK'


def test_an_exception_the_server_answered_requests_after_is_no_failure():
    explained = explain(with_lines(READY + 1, *REJECTED_REQUEST, ANSWERED))
    assert explained.verdict == "healthy", explained.why


@pytest.mark.parametrize(
    "answered",
    [
        'INFO:     127.0.0.1:40390 - "POST /v1/chat/completions HTTP/1.1" 200 OK',
        'INFO:     10.0.0.7:40391 - "POST /v1/completions HTTP/1.1" 200 OK',
        'INFO:     10.0.0.7:40392 - "GET /ping HTTP/1.1" 200 OK',
    ],
)
def test_a_request_the_engine_answered_after_an_exception_proves_it_survived(answered):
    explained = explain([*HEALTHY[: READY + 1], *REJECTED_REQUEST, answered])
    assert explained.verdict == "healthy", explained.why


def test_what_the_api_process_answers_without_its_engine_proves_nothing():
    # vLLM's /metrics, /v1/models and /version answer 200 with the engine dead or hung
    unproven = [
        'INFO:     127.0.0.1:52200 - "GET /metrics HTTP/1.1" 200 OK',
        'INFO:     127.0.0.1:52201 - "GET /v1/models HTTP/1.1" 200 OK',
        'INFO:     127.0.0.1:52202 - "GET /version HTTP/1.1" 200 OK',
    ]
    explained = explain([*HEALTHY[: READY + 1], *REJECTED_REQUEST, *unproven])
    assert explained.verdict == "failed", explained.why


def test_an_exception_after_the_end_of_start_up_with_no_answer_after_it_is_a_failure():
    explained = explain([*HEALTHY[: READY + 1], ANSWERED, *REJECTED_REQUEST])
    assert explained.verdict == "failed", explained.why
    assert explained.diagnosis is not None
    assert "maximum context length" in explained.diagnosis.evidence
