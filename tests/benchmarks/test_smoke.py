"""Each operator-facing benchmark's short run, so none can rot: on the embedded cluster (no
root) for the fast suite, on the lab for the shell baseline. They check what a run must show
whatever the machine's speed (every figure present, no reply lost or reordered); the speed goals
are the benchmarks' own business (docs/performance.md), not asserted here."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from benchmarks import (
    checkpoint_to_slack,
    failure_to_slack,
    log_pipeline,
    old_way,
    overhead,
    peers,
    run_all,
    watch_cost,
)

pytestmark = pytest.mark.timeout(120)


def figures(path: Path, name: str) -> list[dict]:
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    return [line for line in lines if line["benchmark"] == name]


def test_checkpoint_to_slack_under_429s_loses_and_reorders_no_reply(tmp_path, capsys):
    out = tmp_path / "figures.jsonl"
    checkpoint_to_slack.main(
        ["--where", "embedded", "--scenarios", "ray2-429", "--runs", "1", "--json", str(out)]
    )
    [row] = figures(out, "checkpoint_to_slack")
    assert row["checkpoints"] >= 5 and row["refused"] > 0
    assert row["lost"] == 0 and row["reordered"] == 0
    assert all(row["reply_ms"][k] > 0 for k in ("p50", "p95", "max"))
    assert "reply p95" in capsys.readouterr().out


def test_failure_to_slack_times_a_killed_worker(tmp_path, capsys):
    out = tmp_path / "figures.jsonl"
    failure_to_slack.main(
        ["--where", "embedded", "--faults", "worker-killed", "--runs", "1", "--json", str(out)]
    )
    [row] = figures(out, "failure_to_slack")
    assert row["fault"] == "worker-killed" and row["n"] == 1 and 0 < row["max"] < 30
    assert "worker-killed" in capsys.readouterr().out
    assert "serving-hang" in {fault.name for fault in failure_to_slack.FAULTS}


def test_failure_to_slack_times_a_hang_under_traffic_told_by_the_token_stall_rule(tmp_path):
    """The clients' streams stop at the hang; the reply is the token-stall rule's (the benchmark
    refuses any other), no canary was sent while they ran, and the rule waited its time."""
    out = tmp_path / "figures.jsonl"
    failure_to_slack.main(
        ["--where", "embedded", "--faults", "serving-hang-traffic", "--quick", "--json", str(out)]
    )
    [row] = figures(out, "failure_to_slack")
    assert row["fault"] == "serving-hang-traffic" and row["n"] == 1
    assert row["canaries"] == 0 and row["tokens"][0] > 0 and row["probe_ms"][0] > 0
    assert row["p50"] > failure_to_slack.TOKEN_STALL_S - 0.1, "told before the stall's time"


def test_overhead_splits_a_launch(tmp_path):
    out = tmp_path / "figures.jsonl"
    overhead.main(["--where", "embedded", "--quick", "--json", str(out)])
    [row] = figures(out, "overhead")
    assert row["nodes"] == 2 and row["wall"] > row["server"] > 0
    assert row["with_ray"] == pytest.approx(row["wall"] - row["server"] - row["sample"])
    assert 0 < row["ray"] < row["with_ray"], "the emulated `ray start` took time, not all of it"
    assert row["overhead"] == pytest.approx(row["with_ray"] - row["ray"])


def test_watch_cost_measures_the_idle_bot(tmp_path):
    out = tmp_path / "figures.jsonl"
    watch_cost.main(["--where", "embedded", "--seconds", "1", "--json", str(out)])
    [idle] = figures(out, "watch_cost")
    assert idle["phase"] == "idle" and idle["cpu_s"] > 0 and min(idle["rss_mib"]) > 0


def test_log_pipeline_times_each_step_on_both_kinds_of_line(tmp_path):
    out = tmp_path / "figures.jsonl"
    assert log_pipeline.main(["--quick", "--json", str(out)]) == 0
    rows = figures(out, "log_pipeline")
    assert [row["lines"] for row in rows] == ["flood", "real"]
    assert all(row[step] > 0 for row in rows for step in ("clean", "redact", "feed", "all"))


def test_run_all_knows_every_benchmark_and_its_quick_mode():
    for name in run_all.BENCHMARKS:
        argv = run_all.command(name, True, "embedded", Path("x.jsonl"))
        assert Path(argv[1]).is_file(), argv
    with pytest.raises(SystemExit):
        run_all.main(["--only", "nonesuch"])


@pytest.mark.lab
@pytest.mark.timeout(300)
def test_the_old_way_and_spark_bot_both_learn_of_ready_and_of_the_failure(lab, tmp_path):
    out = tmp_path / "figures.jsonl"
    assert old_way.main(["--quick", "--json", str(out)]) == 0
    rows = figures(out, "old_way")
    assert [r["what"] for r in rows] == ["Ready", "failure"]
    for row in rows:
        for who in ("old", "spark_bot"):
            learned, happened = row[who]["learned_s"], row[who]["happened_s"]
            assert learned is not None and happened is not None
            assert learned > happened - 0.05, "nobody learns of a line before Docker stamps it"


@pytest.mark.lab
@pytest.mark.timeout(300)
def test_sparkrun_as_a_new_user_runs_it_reaches_ready_beside_spark_bot_and_leaves_nothing(
    lab, tmp_path
):
    """sparkrun installed from PyPI into its own venv (cached), set up for the lab by the
    benchmark, launches, reports Ready with the API answering, and is stopped: no sparkrun
    container, no sparkrun process, no model files of the run and no sparkrun files in the
    nodes' homes stay behind."""
    from testkit.lab_cluster import cluster_for

    out = tmp_path / "figures.jsonl"
    assert peers.main(["--quick", "--json", str(out)]) == 0
    [row] = figures(out, "peers")
    theirs, ours = row["sparkrun"], row["spark_bot"]
    assert row["what"] == "Ready" and theirs["extra"]["api_answered"]
    assert theirs["reported_s"] > ours["reported_s"] > 0
    assert "Planning:" in " ".join(theirs["extra"]["steps"]), "its steps are stamped"
    config = cluster_for(lab)
    assert asyncio.run(peers.leftovers(config)) == {}
    assert not [p for p in Path("/proc").glob("[0-9]*/cmdline") if b"-m\0sparkrun" in _read(p)]
    assert not [m for n in lab.nodes for m in (Path(n.hf_cache) / "hub").glob("models--Qwen--*")]
    assert not [p for n in lab.nodes for p in peers.sparkrun_files(Path(n.hf_cache)) if p.exists()]


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError:
        return b""
