"""The root of a death from its exception chain, not the symptom vLLM or Ray prints around it."""

from __future__ import annotations

from pathlib import Path

from cluster.diagnosis.engine import LogDiagnoser, diagnose, first_error
from cluster.diagnosis.failures import SIGNATURES
from cluster.diagnosis.tracebacks import raised_exception
from cluster.logs.logtext import strip_prefixes

LOGS = Path(__file__).resolve().parents[2] / "data" / "logs"
ENGINE = "(EngineCore_DP0 pid=89) "
RAY = "(RayWorkerWrapper pid=4009, ip=10.0.0.2) "


def vllm(level: str, msg: str, file: str = "core.py:708") -> str:
    return f"{level} 11-30 05:42:03 [{file}] {msg}"


def test_the_real_engines_ray_refusal_is_quoted_as_the_cause():
    # vLLM 0.32.0 CPU, `--distributed-executor-backend ray` without the lab's device-key hook
    lines = (LOGS / "real-vllm-0.32-cpu-ray-refusal.log").read_text().splitlines()
    d = diagnose(lines)
    assert d is not None and d.fatal and d.signature_id == "ray_platform_unsupported"
    assert d.evidence.endswith("ValueError: current platform cpu does not support ray.")
    assert d.family == "ray_cluster" and "cpu platform" in d.title
    # without its row, the chain still names it: the root exception quoted, its family by frame
    table = tuple(sig for sig in SIGNATURES if sig.id != "ray_platform_unsupported")
    d = diagnose(lines, table)
    assert d is not None and d.signature_id == "engine_start_failed"
    assert d.evidence.endswith("ValueError: current platform cpu does not support ray.")
    assert "`ValueError: current platform cpu does not support ray.`" in d.cause
    assert d.family == "ray_cluster"  # raised in vllm/v1/executor/ray_utils.py
    assert d.search == "ValueError: current platform cpu does not support ray."


def test_the_stream_answers_at_the_symptom_then_names_the_root_as_the_traceback_follows():
    lines = [
        ENGINE + vllm("INFO", "Initializing a V1 LLM engine (v0.32.0)", "core.py:133"),
        ENGINE + vllm("ERROR", "EngineCore failed to start."),
        ENGINE + vllm("ERROR", "Traceback (most recent call last):"),
        ENGINE + vllm("ERROR", '  File "/x/flashinfer/cute_dsl/utils.py", line 9, in <module>'),
        ENGINE + vllm("ERROR", "    from cutlass.cute.nvgpu import OperandMajorMode"),
        ENGINE
        + vllm(
            "ERROR",
            "AttributeError: module 'cutlass.cute.nvgpu' has no attribute 'OperandMajorMode'",
        ),
    ]
    ld = LogDiagnoser()
    first = ld.feed(lines[0]), ld.feed(lines[1])
    assert first[0] is None
    assert first[1] is not None and first[1].signature_id == "engine_start_failed"
    assert first[1].line_number == 2  # the answer when the fatal line arrives
    for line in lines[2:]:
        assert ld.feed(line) is None  # refinements are read from .diagnosis, not returned
    refined = ld.diagnosis
    assert refined is not None and refined.line_number == 6
    assert "the root exception in its traceback: `AttributeError: module 'cutlass" in refined.cause
    assert refined.family == "package_version"
    assert refined == diagnose(lines)


def test_the_innermost_exception_of_a_chain_is_the_root():
    lines = [
        "Traceback (most recent call last):",
        '  File "/x/transformers/models/auto/configuration_auto.py", line 1, in from_pretrained',
        "KeyError: 'qwen3_next'",
        "",
        "During handling of the above exception, another exception occurred:",
        "",
        "Traceback (most recent call last):",
        "ValueError: a newer exception of the chain (synthetic)",
        "",
        "The above exception was the direct cause of the following exception:",
        "",
        "RuntimeError: Engine core initialization failed. See root cause above.",
    ]
    d = diagnose(lines)
    assert d is not None and d.signature_id == "engine_start_failed"
    assert d.line_number == 3 and d.evidence == "KeyError: 'qwen3_next'"


def test_a_ray_task_error_wraps_its_inner_exception():
    lines = [
        ENGINE + vllm("ERROR", "EngineCore failed to start."),
        ENGINE + "ray.exceptions.RayTaskError(OSError): ray::RayWorkerWrapper.execute_method() "
        "(pid=4009, ip=10.0.0.2)",
        ENGINE + '  File "/x/vllm/worker/worker_base.py", line 628, in execute_method',
        ENGINE + "OSError: libcudart.so.13: cannot open shared object file",
    ]
    assert raised_exception(strip_prefixes(lines[1])).inner == "OSError"  # type: ignore[union-attr]
    d = diagnose(lines)
    assert d is not None and d.line_number == 4 and "libcudart.so.13" in d.cause


def test_ray_prefixes_and_repeats_do_not_hide_the_root():
    lines = [
        RAY + "ERROR 11-30 05:42:03 [worker_base.py:620] Error executing method 'init_device'. "
        "This might cause deadlock in distributed execution. [repeated 2x across cluster]",
        RAY + "ERROR 11-30 05:42:03 [worker_base.py:620] ImportError: /x/vllm/_C.abi3.so: "
        "undefined symbol: _ZN3c104cuda9SetDeviceEi [repeated 2x across cluster]",
        ENGINE + "ray.exceptions.ActorDiedError: The actor died unexpectedly before finishing "
        "this task.",
    ]
    d = diagnose(lines)
    assert d is not None and d.signature_id == "ray_actor_died" and d.line_number == 2
    assert "`ImportError: /x/vllm/_C.abi3.so: undefined symbol" in d.cause
    assert first_error(lines) == (2, lines[1])
