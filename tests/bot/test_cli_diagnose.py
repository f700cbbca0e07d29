"""`spark-bot diagnose`: paste any vLLM log, get the first cause, its evidence and the fix."""

import subprocess
import sys
from pathlib import Path

LOGS = Path(__file__).resolve().parents[1] / "data" / "logs"


def diagnose(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "bot.cli", "diagnose", *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_a_log_file_gives_the_first_cause_not_the_last_symptom():
    result = diagnose(str(LOGS / "oom_then_engine_dead.log"))
    assert result.returncode == 1
    assert "CUDA out of memory" in result.stdout
    assert "evidence (line" in result.stdout and "fix:" in result.stdout
    assert "EngineDeadError" not in result.stdout.splitlines()[0]


def test_standard_input_and_a_healthy_log():
    healthy = (LOGS / "healthy_startup.log").read_text()
    result = diagnose(stdin=healthy)
    assert result.returncode == 0
    assert "No failure found" in result.stdout


def test_a_real_log_ending_in_a_requested_shutdown_is_no_failure():
    # vLLM 0.32.0 (CPU), served, then SIGINT: [shutdown] lines, then teardown noise
    result = diagnose(str(LOGS / "real-vllm-0.32-cpu-sigint.log"))
    assert result.returncode == 0, result.stdout
    assert "requested shutdown" in result.stdout and "[shutdown]" in result.stdout


def test_an_unrecognised_failure_names_its_first_error_and_the_row(tmp_path):
    log = tmp_path / "ray.log"
    log.write_text(
        "2026-12-01 06:18:28,593\tINFO scripts.py:1234 -- Local node IP: 198.18.1.11\n"
        "Traceback (most recent call last):\n"
        '  File "/venv/ray/_private/resource_and_label_spec.py", line 187, in _load_env_resources\n'
        "    env_resources = json.loads(env_string)\n"
        "json.decoder.JSONDecodeError: Expecting property name enclosed in double quotes: line 1\n"
    )
    result = diagnose(str(log))
    assert result.returncode == 1
    assert "evidence (line 5): json.decoder.JSONDecodeError" in result.stdout
    assert "row:   unrecognised" in result.stdout and "failures.py" not in result.stdout


def test_unreadable_file_is_a_clear_error():
    result = diagnose("/nonexistent/vllm.log")
    assert result.returncode == 2
    assert "cannot read" in result.stderr


def test_a_finding_that_is_not_fatal_exits_zero(tmp_path):
    log = tmp_path / "socket.log"
    log.write_text(
        "spark1:89:120 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[0] [send] via NET/Socket/0\n"
    )
    result = diagnose(str(log))
    assert result.returncode == 0
    assert result.stdout.startswith("No failure found, but worth reading")


def test_a_line_taught_in_a_knowledge_file_names_its_row(tmp_path):
    knowledge = tmp_path / "knowledge.yaml"
    knowledge.write_text(
        "signatures:\n"
        "  - id: moe_kernel_missing\n"
        "    pattern: 'No MoE kernel available for (?P<dtype>\\w+)'\n"
        "    cause: 'no fused-MoE kernel for {dtype}'\n"
        "    fix: 'use an image built for the GB10'\n"
    )
    log = tmp_path / "vllm.log"
    log.write_text(
        "(Worker_TP0 pid=3) ERROR 12-01 06:19:09 [fused_moe.py:77] No MoE kernel available for fp8\n"
        "(EngineCore pid=1) ERROR 12-01 06:19:10 [core.py:708] EngineCore failed to start.\n"
    )
    taught = diagnose("--extra", str(knowledge), str(log))
    assert taught.returncode == 1
    assert (
        "row:   moe_kernel_missing" in taught.stdout
        and "no fused-MoE kernel for fp8" in taught.stdout
    )
    untaught = diagnose(str(log))
    assert "row:   engine_start_failed" in untaught.stdout
    assert (
        "no row knows it), the first error before it: `No MoE kernel available for fp8`"
        in untaught.stdout
    )


def test_a_bad_knowledge_file_is_a_clear_error(tmp_path):
    knowledge = tmp_path / "knowledge.yaml"
    knowledge.write_text(
        "signatures:\n  - id: broken\n    pattern: '(unclosed'\n    cause: c\n    fix: f\n"
    )
    result = diagnose("--extra", str(knowledge), "-", stdin="")
    assert result.returncode == 2
    assert f"{knowledge}: 1 invalid setting(s)" in result.stderr
    assert (
        "line 3: signatures.0.pattern" in result.stderr
        and "not a valid regular expression" in result.stderr
    )


def test_the_cli_prints_the_one_text_shape_of_an_explanation():
    # cluster.diagnosis.explain.as_text is the only renderer of a diagnosis as text
    from cluster.diagnosis.explain import as_text, explain

    for name in (
        "oom_then_engine_dead.log",
        "healthy_startup.log",
        "real-vllm-0.32-cpu-sigint.log",
    ):
        lines = (LOGS / name).read_text().splitlines()
        explained = explain(lines)
        plain, detailed = diagnose(str(LOGS / name)), diagnose("--explain", str(LOGS / name))
        assert plain.stdout == as_text(explained) + "\n"
        assert detailed.stdout == as_text(explained, details=True) + "\n"
        assert detailed.stdout.startswith(plain.stdout.rstrip("\n"))
        assert "\nwhy: " in detailed.stdout and "checkpoints proven:" in detailed.stdout
