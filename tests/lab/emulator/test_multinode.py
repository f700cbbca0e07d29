import subprocess
import sys

import httpx

from .conftest import LAB, REPO, free_port


def ray_status(state_dir):
    import os

    env = dict(os.environ, PYTHONPATH=LAB, SPARK_EMU_STATE_DIR=str(state_dir))
    env.pop("RAY_ADDRESS", None)
    r = subprocess.run(
        [sys.executable, "-m", "emulator", "ray", "status"],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=30,
    )
    return r.returncode, r.stdout


def ray_pair(spawn, tmp_path, worker_env=None):
    port = free_port()
    head = spawn(
        [
            "ray",
            "start",
            "--block",
            "--head",
            "--port",
            str(port),
            "--node-ip-address",
            "127.0.0.1",
        ],
        env={"SPARK_EMU_STATE_DIR": str(tmp_path / "head")},
        name="ray-head",
    )
    head.wait_for("Ray runtime started.")
    assert head.wait_for("Local node IP: 127.0.0.1")
    head.wait_for("ray start --address='127.0.0.1:%d'" % port)
    wenv = {"SPARK_EMU_STATE_DIR": str(tmp_path / "worker")}
    wenv.update(worker_env or {})
    worker = spawn(
        [
            "ray",
            "start",
            "--block",
            "--address=127.0.0.1:%d" % port,
            "--node-ip-address",
            "127.0.0.2",
        ],
        env=wenv,
        name="ray-worker",
    )
    return port, head, worker


def test_ray_cluster_status_and_serve(spawn, tmp_path):
    _port, head, worker = ray_pair(spawn, tmp_path)
    worker.wait_for("Ray runtime started.")
    rc, out = ray_status(tmp_path / "head")
    assert rc == 0
    assert "======== Autoscaler status:" in out
    assert out.count(" 1 node_") == 2 and " 0.0/2.0 GPU" in out
    api = free_port()
    serve = spawn(
        [
            "vllm",
            "serve",
            "m",
            "--tensor-parallel-size",
            "2",
            "--distributed-executor-backend",
            "ray",
            "--max-model-len",
            "32768",
            "--port",
            str(api),
        ],
        env={
            "SPARK_EMU_STATE_DIR": str(tmp_path / "head"),
            "VLLM_HOST_IP": "127.0.0.1",
            "NCCL_DEBUG": "INFO",
            "NCCL_SOCKET_IFNAME": "lo",
        },
        name="serve",
    )
    serve.wait_for("Application startup complete.", 30)
    # NCCL binds to NCCL_SOCKET_IFNAME's own address on each node, not Ray's node IP
    # (the worker registered as 127.0.0.2, its `lo` holds 127.0.0.1)
    assert serve.text.count("NCCL INFO Bootstrap: Using lo:127.0.0.1<0>") == 2
    assert "Using lo:127.0.0.2" not in serve.text
    assert "(RayWorkerWrapper pid=" in serve.text and ", ip=127.0.0.2) " in serve.text
    assert sum("Loading weights took" in l for l in serve.lines) == 2
    assert (
        "CustomAllreduce is disabled because this process group spans across nodes." in serve.text
    )
    assert " 2.0/2.0 GPU" in ray_status(tmp_path / "head")[1]
    assert httpx.get("http://127.0.0.1:%d/health" % api).status_code == 200
    # the worker node leaves the cluster: the engine dies with Ray's errors
    worker.kill()
    serve.wait_for(
        "ray.exceptions.ActorDiedError: The actor died unexpectedly before finishing this task.", 20
    )
    serve.wait_for("EngineDeadError", 10)
    assert serve.wait_exit(20) == 1
    # ray stop on the head
    import os

    env = dict(os.environ, PYTHONPATH=LAB, SPARK_EMU_STATE_DIR=str(tmp_path / "head"))
    r = subprocess.run(
        [sys.executable, "-m", "emulator", "ray", "stop"],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert r.stdout.startswith("Stopped all ") and "Ray processes." in r.stdout
    assert head.wait_exit(10) == 0


def test_ray_daemon_mode_and_stop(spawn, tmp_path):
    import os

    port = free_port()
    env = dict(
        os.environ, PYTHONPATH=LAB, SPARK_EMU_STATE_DIR=str(tmp_path), SPARK_EMU_TIME_SCALE="0.01"
    )
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "emulator",
            "ray",
            "start",
            "--head",
            "--port",
            str(port),
            "--node-ip-address",
            "127.0.0.1",
        ],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert r.returncode == 0 and "Ray runtime started." in r.stdout
    rc, out = ray_status(tmp_path)
    assert rc == 0 and " 0.0/1.0 GPU" in out
    r = subprocess.run(
        [sys.executable, "-m", "emulator", "ray", "stop"],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert r.stdout.strip() == "Stopped all 7 Ray processes."
    rc, out = ray_status(tmp_path)
    assert rc == 1


def test_ray_serve_refused_with_too_few_gpus(spawn, tmp_path):
    port = free_port()
    head = spawn(
        [
            "ray",
            "start",
            "--block",
            "--head",
            "--port",
            str(port),
            "--node-ip-address",
            "127.0.0.1",
        ],
        env={"SPARK_EMU_STATE_DIR": str(tmp_path)},
        name="ray-head",
    )
    head.wait_for("Ray runtime started.")
    serve = spawn(
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
        env={"SPARK_EMU_STATE_DIR": str(tmp_path), "SPARK_EMU_TIME_SCALE": "0.002"},
        name="serve",
    )
    serve.wait_for(
        "The number of required GPUs exceeds the total number of available GPUs in the placement group."
    )
    serve.wait_for("Waiting for creating a placement group of specs for 10 seconds.")
    line = serve.wait_for(
        "ValueError: Cannot provide a placement group of placement_group_specs=", 20
    )
    assert (
        "[{'GPU': 1.0, 'node:127.0.0.1': 0.001}, {'GPU': 1.0}] within 1800 seconds. See `ray status` and "
        "`ray list nodes` to make sure the cluster has enough resources." in line
    )
    serve.wait_for("RuntimeError: Engine core initialization failed.")
    assert serve.wait_exit(10) == 1


def test_gcs_unreachable(spawn):
    w = spawn(
        ["ray", "start", "--address=127.0.0.1:%d" % free_port(), "--block"], name="ray-worker"
    )
    w.wait_for("Failed to connect to GCS at address 127.0.0.1:")
    assert w.wait_exit(15) == 1


def test_mp_two_ranks_and_rank_loss(spawn):
    mport, api = free_port(), free_port()
    common = [
        "vllm",
        "serve",
        "m",
        "--tensor-parallel-size",
        "2",
        "--nnodes",
        "2",
        "--master-addr",
        "127.0.0.1",
        "--master-port",
        str(mport),
    ]
    w = spawn(
        [*common, "--node-rank", "1", "--headless"], env={"VLLM_HOST_IP": "127.0.0.2"}, name="rank1"
    )
    h = spawn(
        [*common, "--node-rank", "0", "--port", str(api)],
        env={"VLLM_HOST_IP": "127.0.0.1"},
        name="rank0",
    )
    h.wait_for("Application startup complete.", 30)
    w.wait_for("Loading weights took")
    assert "(Worker_TP1 pid=" in w.text and "(Worker_TP0 pid=" in h.text
    assert httpx.get("http://127.0.0.1:%d/health" % api).status_code == 200
    w.kill()
    h.wait_for("EngineDeadError", 20)
    assert h.wait_exit(20) == 1


def test_mp_headless_exits_when_rank0_dies(spawn):
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
    w = spawn([*common, "--node-rank", "1", "--headless"], name="rank1")
    h = spawn([*common, "--node-rank", "0", "--port", str(free_port())], name="rank0")
    h.wait_for("Application startup complete.", 30)
    h.kill()
    w.wait_for("Connection to the master node", 20)
    assert w.wait_exit(20) == 1


def test_mp_store_timeout_when_rank1_never_comes(spawn):
    h = spawn(
        [
            "vllm",
            "serve",
            "m",
            "-tp",
            "2",
            "--nnodes",
            "2",
            "--node-rank",
            "0",
            "--master-addr",
            "127.0.0.1",
            "--master-port",
            str(free_port()),
            "--port",
            str(free_port()),
        ],
        env={"SPARK_EMU_TIME_SCALE": "0.003"},
        name="rank0",
    )
    h.wait_for(
        "torch.distributed.DistStoreError: Timed out after 601 seconds waiting for clients. 1/2 clients joined.",
        20,
    )
    assert h.wait_exit(10) == 1
