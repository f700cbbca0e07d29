"""`spark-bot diagnose`: paste any vLLM log, get the first cause, its evidence and the fix."""

import subprocess
import sys
from pathlib import Path

LOGS = Path(__file__).resolve().parent / "data" / "logs"


def diagnose(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "bot.cli", "diagnose", *args], input=stdin,
                          capture_output=True, text=True, timeout=60)


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
    log.write_text("2026-12-01 06:18:28,593\tINFO scripts.py:1234 -- Local node IP: 198.18.1.11\n"
                   "Traceback (most recent call last):\n"
                   '  File "/venv/ray/_private/resource_and_label_spec.py", line 187, in _load_env_resources\n'
                   "    env_resources = json.loads(env_string)\n"
                   "json.decoder.JSONDecodeError: Expecting property name enclosed in double quotes: line 1\n")
    result = diagnose(str(log))
    assert result.returncode == 1
    assert "evidence (line 5): json.decoder.JSONDecodeError" in result.stdout
    assert "row:   unrecognised" in result.stdout and "signatures.py" not in result.stdout


def test_unreadable_file_is_a_clear_error():
    result = diagnose("/nonexistent/vllm.log")
    assert result.returncode == 2
    assert "cannot read" in result.stderr


def test_a_finding_that_is_not_fatal_exits_zero(tmp_path):
    log = tmp_path / "socket.log"
    log.write_text("spark1:89:120 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[0] [send] via NET/Socket/0\n")
    result = diagnose(str(log))
    assert result.returncode == 0
    assert result.stdout.startswith("No failure found, but worth reading")
