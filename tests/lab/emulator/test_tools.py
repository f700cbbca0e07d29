import subprocess
import sys

from .conftest import LAB, REPO


def run(args, env=None):
    import os

    e = dict(os.environ, PYTHONPATH=LAB)
    e.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "emulator", *args],
        env=e,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=30,
    )


def test_nvidia_smi_table_and_query():
    r = run(["nvidia-smi"])
    assert r.returncode == 0
    assert (
        "NVIDIA GB10" in r.stdout and "Not Supported" in r.stdout and "Driver Version:" in r.stdout
    )
    r = run(["nvidia-smi", "--query-gpu=name,memory.total,memory.used", "--format=csv,noheader"])
    assert r.stdout.strip() == "NVIDIA GB10, [N/A], [N/A]"
    r = run(["nvidia-smi", "-L"])
    assert r.stdout.startswith("GPU 0: NVIDIA GB10 (UUID: GPU-")


def test_nvidia_smi_answers_the_fields_launchers_query():
    query = "gpu_name,pstate,memory.total,utilization.gpu,power.draw,clocks.max.sm,fan.speed"
    r = run(["nvidia-smi", "--query-gpu=" + query, "--format=csv"])
    assert r.returncode == 0, r.stdout
    assert r.stdout.splitlines() == [
        "gpu_name, pstate, memory.total [MiB], utilization.gpu [%], power.draw [W], "
        "clocks.max.sm [MHz], fan.speed",
        "NVIDIA GB10, P8, [N/A], 0 %, 4.12 W, 3003 MHz, [N/A]",
    ]
    r = run(["nvidia-smi", "--query-gpu=" + query, "--format=csv,noheader,nounits"])
    assert r.stdout.strip() == "NVIDIA GB10, P8, [N/A], 0, 4.12, 3003, [N/A]"
    r = run(["nvidia-smi", "--query-gpu=name,bogus", "--format=csv"])
    assert r.returncode == 2 and 'Field "bogus" is not a valid field to query.' in r.stdout


def test_ibdev2netdev(tmp_path):
    net = tmp_path / "net"
    (net / "enp1s0f1np1").mkdir(parents=True)
    (net / "enp1s0f1np1" / "operstate").write_text("up\n")
    r = run(["ibdev2netdev"], {"SPARK_EMU_SYS_CLASS_NET": str(net)})
    # a Spark's four: each port once per PCIe link; the twin shares the cabled port's state
    assert r.stdout.splitlines() == [
        "rocep1s0f0 port 1 ==> enp1s0f0np0 (Down)",
        "rocep1s0f1 port 1 ==> enp1s0f1np1 (Up)",
        "roceP2p1s0f0 port 1 ==> enP2p1s0f0np0 (Down)",
        "roceP2p1s0f1 port 1 ==> enP2p1s0f1np1 (Up)",
    ]
    # a twin netdev of its own has its own state
    (net / "enP2p1s0f1np1").mkdir()
    (net / "enP2p1s0f1np1" / "operstate").write_text("down\n")
    r = run(["ibdev2netdev"], {"SPARK_EMU_SYS_CLASS_NET": str(net)})
    assert r.stdout.splitlines()[3] == "roceP2p1s0f1 port 1 ==> enP2p1s0f1np1 (Down)"


def test_unknown_flag_fails_like_vllm():
    r = run(["vllm", "serve", "m", "--foo"])
    assert r.returncode == 2
    assert "usage: vllm serve [model_tag] [options]" in r.stderr
    assert "vllm serve: error: unrecognized arguments: --foo" in r.stderr


def test_module_importable_from_repo_root():
    r = subprocess.run(
        [sys.executable, "-m", "lab.emulator", "vllm", "--version"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert r.returncode == 0 and r.stdout.strip()


def test_profiles_truth():
    from lab.emulator import PROFILES, truth

    assert set(PROFILES) >= {
        "spark-pair-qwen35",
        "spark-pair-public",
        "multi-token-chunks",
        "fast-test",
    }
    pub = [truth("spark-pair-public", c)["aggregate_tok_s"] for c in (1, 2, 4)]
    assert pub == [31.5, 42.4, 59.7]
    assert truth("spark-pair-public", 1)["ttft_s"] == 1.989
    assert abs(truth("spark-pair-qwen35", 1)["per_stream_tok_s"] - 27.0) < 1e-9
    for name in PROFILES:
        agg = [truth(name, c)["aggregate_tok_s"] for c in (1, 2, 3, 4, 8, 16, 32)]
        per = [truth(name, c)["per_stream_tok_s"] for c in (1, 2, 3, 4, 8, 16, 32)]
        assert agg == sorted(agg) and per == sorted(per, reverse=True)
    assert truth("multi-token-chunks", 1)["tokens_per_chunk"] == 4
