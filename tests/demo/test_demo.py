"""`spark-bot demo` end to end: the real CLI, console adapter, handlers and controller on the
embedded cluster; then nothing left behind (processes, sockets, work directory)."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
from pathlib import Path

from demo.cluster import CLUSTER_MARKER
from demo.engine import processes_marked
from testkit.terminal import sigint_as_a_terminal_sends_it

SPARK_BOT = [sys.executable, "-m", "bot.cli"]
_WORKDIR = re.compile(r"engine (/tmp/spark-demo-[A-Za-z0-9_]+)/node0/docker\.sock")


# A guard against a demo that never ends, not a speed: the tour takes ~45 s at load 8, over 120 s
# at load 15.
def demo(*args: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*SPARK_BOT, "demo", *args], capture_output=True, text=True, timeout=timeout
    )


def assert_nothing_left(output: str) -> None:
    match = _WORKDIR.search(output)
    assert match, output[:2000]
    workdir = Path(match[1])
    assert not workdir.exists(), f"{workdir} left behind (sockets, tool dirs, logs)"
    assert processes_marked(str(workdir), CLUSTER_MARKER) == [], "container processes left running"


def test_up_verify_bench_status_logs_down_then_nothing_left():
    run = demo(
        "--run",
        "/spark up",
        "--run",
        "/spark verify",
        "--run",
        "/spark bench max_tokens=16 runs=1",
        "--run",
        "/spark status",
        "--run",
        "/spark logs worker 5",
        "--run",
        "/spark down",
    )
    out = run.stdout
    assert run.returncode == 0, out[-3000:] + run.stderr[-3000:]
    # every launch checkpoint, with its evidence and a log tail
    for title in [
        "RoCE and fabric interfaces",
        "Containers started",
        "Ray sees every node and GPU",
        "NCCL over RDMA",
        "Weights loaded on every rank",
        "KV cache sized",
        "Engine initialised",
        "API server started",
        "Sample completion",
    ]:
        assert f"✔ {title}" in out, title
    assert (
        "Detected IB_IF: rocep1s0f1,roceP2p1s0f1; Detected ETH_IF: enp1s0f1np1; Detected Local IP: 127.0.0.10"
        in out
    )
    assert "Detected Local IP: 127.0.0.11" in out
    assert "Loading weights took" in out and "last 10 log lines:" in out
    assert re.search(r"✅ Ready.*\n.*answers at http://127\.0\.0\.10:\d+", out)
    # the demo mounts no Hugging Face cache: the model and fit checks could not run, and say so
    # nor the image's against the GPU, nor its NCCL: the demo's containers get none (container.gpus false)
    for title in (
        "The image built for the GPU",
        "The same NCCL on every node",
        "The model complete on every node",
        "The model fits",
    ):
        assert f"✔ {title}" not in out and f"➖ {title}" in out, title
    assert "➖ Not verified: The image built for the GPU: the containers get no GPU" in out
    assert "➖ Not verified: The same NCCL on every node: the containers get no GPU" in out
    assert "➖ Not verified: The model complete on every node: no container mount" in out
    assert "➖ Not verified: The model fits (weights, KV cache, overhead): no fit estimate" in out
    assert "17/21 done, 4 not checked" in out
    assert re.search(r"Sample completion: \d+ tokens, [\d.]+ tok/s", out)
    assert "6/6 done" in out, "verify passes every checkpoint"
    assert re.search(r"📊 Benchmark[\s\S]*Single stream: decode \*[\d.]+ tok/s\*", out)
    assert "API: healthy" in out
    assert "Last 5 lines of `vllm_demo` on `spark-demo-1`" in out
    assert "Removed 2 container(s)" in out
    assert_nothing_left(out)


def test_fault_gives_a_failure_notification_with_cause_and_fix_and_exit_status_1():
    run = demo("--fault", "nccl_error", "--run", "/spark up")
    out = run.stdout
    assert run.returncode == 1, out[-3000:]
    assert "injected fault: nccl_error" in out
    assert "✘ Weights loaded on every rank failed" in out
    assert "NCCL failed to initialise (unhandled system error)" in out
    assert (
        "*Cause:* Missing IPC_LOCK capability" in out
        and "*Fix:* Run the containers with `--cap-add=IPC_LOCK`" in out
    )
    assert "RuntimeError: NCCL error: unhandled system error" in out, "the evidence line"
    assert_nothing_left(out)


def test_commands_from_standard_input_exit_with_the_last_commands_status():
    run = subprocess.run(
        [*SPARK_BOT, "demo"],
        input="/spark status\n/spark bogus\n/spark down\n",
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    assert (
        "> /spark status" in run.stdout and "That is not a /spark command I can run" in run.stdout
    )
    assert_nothing_left(run.stdout)


def test_an_empty_standard_input_ends_the_demo():
    """`< /dev/null` (a service, a CI step): the loop cannot poll /dev/null; it once waited forever."""
    with open("/dev/null") as devnull:
        run = subprocess.run(
            [*SPARK_BOT, "demo"], stdin=devnull, capture_output=True, text=True, timeout=60
        )
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    assert "Traceback" not in run.stderr, run.stderr[-2000:]
    assert_nothing_left(run.stdout)


def test_ctrl_c_while_serving_cleans_up_everything():
    process = subprocess.Popen(
        [*SPARK_BOT, "demo"],
        preexec_fn=sigint_as_a_terminal_sends_it,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdin and process.stdout
        process.stdin.write("/spark up\n")
        process.stdin.flush()
        seen = []
        for line in process.stdout:  # synchronise on the output itself: Ready means serving
            seen.append(line)
            # the outcome line, after the Ready reply (the GPU, NCCL, model and fit checks cannot run here)
            if "17/21 done, 4 not checked  ✔ Ready" in line:
                break
        output = "".join(seen)
        assert "✅ Ready" in output, output[-3000:]
        # stdin stays open: communicate() would close it, and an ended input also ends the demo
        # (exit 0), which a loaded machine may let it see before the signal; the output pipes
        # are drained meanwhile, so the demo never waits on a full one
        stdin, process.stdin = process.stdin, None
        process.send_signal(signal.SIGINT)
        try:
            _rest, errors = process.communicate(timeout=30)
        finally:
            stdin.close()
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        for pipe in (process.stdin, process.stdout, process.stderr):
            if pipe is not None:
                pipe.close()
    assert process.returncode == 130, errors[-2000:]
    assert "the embedded cluster is cleaned up" in errors
    assert_nothing_left(output)
