import threading

import httpx
import pytest

from .conftest import free_port
from .test_multinode import ray_pair, ray_status


def serve(spawn, fault, extra_env=None, port=None):
    env = {"SPARK_EMU_GPUS": "2", "SPARK_EMU_FAULT": fault}
    env.update(extra_env or {})
    return spawn(
        [
            "vllm",
            "serve",
            "m",
            "-tp",
            "2",
            "--max-model-len",
            "32768",
            "--port",
            str(port or free_port()),
        ],
        env=env,
        name="serve-" + fault,
    )


@pytest.mark.parametrize(
    "fault,signature",
    [
        ("nccl_error", "RuntimeError: NCCL error: unhandled system error"),
        ("low_memory", "ValueError: Free memory on device cuda:0 ("),
        ("gloo_iface", "Gloo connectFullMesh failed"),
        ("oom", "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate"),
    ],
)
def test_fatal_startup_faults(spawn, fault, signature):
    p = serve(spawn, fault)
    p.wait_for(signature, 20)
    assert p.wait_exit(15) == 1
    text = p.text
    assert "Application startup complete." not in text
    if fault == "oom":
        assert text.index(signature) < text.index("EngineDeadError")
    if fault == "gloo_iface":
        assert (
            text.index("Unable to resolve hostname")
            < text.index("GLOO_SOCKET_IFNAME")
            < text.index(signature)
        )
    if fault == "low_memory":
        assert "on startup is less than desired GPU memory utilization (0.9, 109.47 GiB)" in text
    if fault == "nccl_error":
        assert "ncclCommInitRank" in text and "Engine core initialization failed" in text


def test_nccl_hang(spawn):
    """Hung in NCCL's init: measured against a twin without the fault, started beside it on the
    same machine at the same moment, so it holds at any machine speed (no fixed wait)."""
    hung = serve(spawn, "nccl_hang")
    twin = serve(spawn, "")
    hung.wait_for("NCCL INFO ncclCommInitRank", 20)
    twin.wait_for("Application startup complete.", 60)  # the twin got past every phase after it
    assert hung.p.poll() is None, "still running"
    assert "Loading weights" not in hung.text and "Application startup complete." not in hung.text


def test_slow_start(spawn):
    p = serve(spawn, "slow_start", {"SPARK_EMU_TIME_SCALE": "0.002"})
    p.wait_for("Application startup complete.", 30)
    assert "Loading weights took 210.37 seconds" in p.text  # 7 x 30 s nominal


def test_late_engine_death(spawn):
    port = free_port()
    p = serve(
        spawn,
        "late_engine_death",
        # dead, /health 500 for 10 s, then exit 1: the window this test must ask /health in
        {"SPARK_EMU_FAULT_AFTER_S": "0.5", "SPARK_EMU_DEAD_LINGER_S": "10"},
        port,
    )
    p.wait_for("Application startup complete.", 20)
    # 200 while serving; on a busy machine the death (0.5 s after Ready) may come first: which
    # answer was right is told below from the emulator's own order of lines, not from a clock
    assert httpx.get("http://127.0.0.1:%d/health" % port).status_code in (200, 500)
    line = p.wait_for("Watchdog caught collective operation timeout: WorkNCCL(SeqNum=", 10)
    assert (
        "OpType=_ALLGATHER_BASE" in line
        and "Timeout(ms)=600000) ran for 600060 milliseconds before timing out." in line
    )
    p.wait_for("vllm.v1.engine.exceptions.EngineDeadError", 10)
    assert httpx.get("http://127.0.0.1:%d/health" % port).status_code == 500
    assert p.wait_exit(30) == 1
    dead_at = next(i for i, text in enumerate(p.lines) if "EngineDeadError" in text)
    answers = [(i, text) for i, text in enumerate(p.lines) if '"GET /health HTTP/1.1"' in text]
    assert answers and all(i > dead_at for i, text in answers if " 500 " in text), (
        "/health says 500 only once the engine is dead"
    )


def test_worker_died_loading_ray(spawn, tmp_path):
    _port, _head, worker = ray_pair(spawn, tmp_path)
    worker.wait_for("Ray runtime started.")
    s = spawn(
        [
            "vllm",
            "serve",
            "m",
            "-tp",
            "2",
            "--distributed-executor-backend",
            "ray",
            "--port",
            str(free_port()),
        ],
        env={
            "SPARK_EMU_STATE_DIR": str(tmp_path / "head"),
            "SPARK_EMU_FAULT": "worker_died_loading",
        },
        name="serve",
    )
    line = s.wait_for("SIGBUS received", 20)
    assert "(RayWorkerWrapper pid=" in line and "ip=127.0.0.2)" in line
    s.wait_for("The actor died unexpectedly before finishing this task.")
    s.wait_for("EngineDeadError")
    assert s.wait_exit(15) == 1
    assert "Loading weights took" not in s.text


def test_worker_died_loading_mp(spawn):
    mport = free_port()
    common = [
        "vllm",
        "serve",
        "m",
        "-tp",
        "2",
        "--nnodes",
        "2",
        "--master-addr",
        "127.0.0.1",
        "--master-port",
        str(mport),
    ]
    w = spawn(
        [*common, "--node-rank", "1", "--headless"],
        env={"SPARK_EMU_FAULT": "worker_died_loading"},
        name="r1",
    )
    h = spawn([*common, "--node-rank", "0", "--port", str(free_port())], name="r0")
    h.wait_for("died unexpectedly, shutting down executor.", 20)
    h.wait_for("EngineDeadError")
    assert h.wait_exit(15) == 1
    assert w.wait_exit(15) != 0


def test_ray_worker_never_joins(spawn, tmp_path):
    _port, _head, worker = ray_pair(spawn, tmp_path, {"SPARK_EMU_FAULT": "ray_worker_never_joins"})
    s = spawn(
        [
            "vllm",
            "serve",
            "m",
            "-tp",
            "2",
            "--distributed-executor-backend",
            "ray",
            "--port",
            str(free_port()),
        ],
        env={"SPARK_EMU_STATE_DIR": str(tmp_path / "head"), "SPARK_EMU_TIME_SCALE": "0.002"},
        name="serve",
    )
    s.wait_for("Waiting for creating a placement group of specs for", 20)
    assert ray_status(tmp_path / "head")[1].count(" 1 node_") == 1
    s.wait_for("ValueError: Cannot provide a placement group of", 20)
    assert s.wait_exit(10) == 1
    assert worker.p.poll() is None  # still hanging, never registered


def test_ray_version_mismatch(spawn, tmp_path):
    _port, _head, worker = ray_pair(spawn, tmp_path, {"SPARK_EMU_FAULT": "ray_version_mismatch"})
    worker.wait_for("RuntimeError: Version mismatch: The cluster was started with:")
    assert worker.wait_exit(10) == 1
    text = worker.text
    assert (
        "    Ray: 2.49.1\n    Python: 3.12.3\nThis process on node 127.0.0.2 was started with:\n    Ray: 2.48.0\n"
        "    Python: 3.12.3" in text
    )


def test_ray_version_mismatch_natural(spawn, tmp_path):
    _port, _head, worker = ray_pair(spawn, tmp_path, {"SPARK_EMU_RAY_VERSION": "2.47.0"})
    worker.wait_for("RuntimeError: Version mismatch: The cluster was started with:")
    assert worker.wait_exit(10) == 1


def metric(base, name):
    text = httpx.get(base + "/metrics").text
    [value] = [line.rsplit(" ", 1)[1] for line in text.splitlines() if line.startswith(name + "{")]
    return float(value)


def test_serving_hang_keeps_health_stops_generating_and_freezes_the_metrics(spawn):
    """The hang while a stream runs: /health stays 200, the stream gets no further token, and
    /metrics keeps the last step's figures as vLLM's API server does (it records them only
    from the engine core's output): the running request counted, the token counters still,
    a request sent during the hang changing nothing. The stats line says 0.0 tokens/s once
    with the request running, then falls silent (vLLM's idle rule); EngineCore warns as
    vLLM's shm_broadcast does."""
    port = free_port()
    env = {"SPARK_EMU_FAULT_AFTER_S": "1.0", "SPARK_EMU_STATS_INTERVAL_S": "0.2"}
    p = serve(spawn, "serving_hang", env, port)
    p.wait_for("Application startup complete.", 20)
    base = "http://127.0.0.1:%d" % port
    received = []
    body = {
        "model": "m",
        "prompt": "tell me",
        "max_tokens": 20000,
        "ignore_eos": True,
        "stream": True,
    }

    def stream():
        try:
            with httpx.stream("POST", base + "/v1/completions", json=body, timeout=30) as r:
                for line in r.iter_lines():
                    if line.startswith("data: {"):
                        received.append(line)
        except httpx.HTTPError:
            pass

    threading.Thread(target=stream, daemon=True).start()
    line = p.wait_for("No available shared memory broadcast block found in 60 seconds", 20)
    assert "EngineCore" in line and "shm_broadcast.py" in line
    assert received, "the stream got tokens before the hang"
    assert httpx.get(base + "/health").status_code == 200
    running = metric(base, "vllm:num_requests_running")
    tokens = metric(base, "vllm:generation_tokens_total")
    prompt = metric(base, "vllm:prompt_tokens_total")
    assert running == 1 and tokens > 0
    short = {"model": "m", "prompt": "hi", "max_tokens": 8}
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(base + "/v1/completions", json=short, timeout=1.5)
    assert metric(base, "vllm:num_requests_running") == running, "the gauge is the last step's"
    assert metric(base, "vllm:generation_tokens_total") == tokens
    assert metric(base, "vllm:prompt_tokens_total") == prompt
    assert len(received) <= tokens, "no token reached the client after the counter stopped"
    zero = "Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: 0.0 tokens/s, "
    zeros = [line for line in p.lines if zero in line]
    assert len(zeros) == 1, "\n".join(p.lines[-20:])
    assert "Running: 1 reqs" in zeros[0]
    assert p.p.poll() is None, "a hung engine does not exit"
