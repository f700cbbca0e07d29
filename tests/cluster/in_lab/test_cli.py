"""The operator CLI on the lab: `spark-bot up|verify|status|logs|down --config configs/lab.yaml`."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest

from cluster.config import Secrets
from cluster.controller import Controller
from cluster.events import Failed, Ready, parse_event
from testkit.lab_cluster import cluster_for, serving_started

pytestmark = pytest.mark.lab
CONFIG = str(Path(__file__).resolve().parents[3] / "configs" / "lab.yaml")


async def spark_bot(*args: str, config: str = CONFIG) -> tuple[int, str, str]:
    """The CLI in Python's development mode (asyncio's debug mode, ResourceWarnings shown): it
    must leave nothing unclosed for Python or aiohttp to warn about."""
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-X",
        "dev",
        "-m",
        "bot.cli",
        *args,
        "--config",
        config,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    stdout, stderr = await asyncio.wait_for(process.communicate(), timeout=240)
    assert "nclosed" not in stderr.decode() and "ResourceWarning" not in stderr.decode(), stderr
    return process.returncode, stdout.decode(), stderr.decode()


async def test_up_verify_logs_down_from_the_command_line(clean):
    code, out, _ = await spark_bot("up")
    assert code == 0, out
    assert "✔ Weights loaded on every rank" in out and "Loading weights took" in out
    assert "    | " in out, "each checkpoint shows its log tail"
    assert "READY: qwen35" in out and "tok/s" in out

    code, out, _ = await spark_bot("verify", "--json")
    assert code == 0
    events = [parse_event(line) for line in out.splitlines()]
    assert [e.checkpoint for e in events][-1] == "sample" and not any(
        isinstance(e, Failed) for e in events
    )

    code, out, _ = await spark_bot("logs", "worker", "--lines", "3")
    assert code == 0 and "last 3 lines of vllm_lab on spark-lab-1" in out

    code, out, _ = await spark_bot("up")
    assert code == 1, "a second launch finds the running cluster's container"
    assert "No leftover container" in out and "`down` first" in out

    code, out, _ = await spark_bot("down")
    assert code == 0 and out.count("removed: removed vllm_lab") == 2


async def test_json_lines_and_exit_status_of_a_failure(clean):
    code, out, err = await spark_bot("logs", "nowhere")
    assert code == 2 and "unknown node `nowhere`" in err

    code, out, _ = await spark_bot("up", "--json")
    assert code == 0
    events = [parse_event(line) for line in out.splitlines()]
    assert isinstance(events[-1], Ready)

    code, out, err = await spark_bot("up", "--json")
    assert code == 1
    failure = parse_event(out.splitlines()[-1])
    assert isinstance(failure, Failed) and failure.checkpoint == "no_stale_container"
    assert "cause:" in err and "fix:" in err


async def test_a_live_launch_of_another_way_in_is_not_replaced_from_a_shell(clean):
    # issue 26, item 8: with a launch running from `spark-bot console`, the shell's `up` said a
    # previous launch was still there and `up --replace` killed the live one
    console = Controller(
        cluster_for(clean, env={"SPARK_EMU_FAULT": "slow_start"}),
        Secrets({}),
        who="`spark-bot console`",
    )
    try:
        async with serving_started(console) as launch:
            code, out, _ = await spark_bot("up", "--replace")
            assert code == 1, out
            assert "another launch of lab is running: `spark-bot console` on" in out
            assert "up --replace --take-over" in out
            await asyncio.wait_for(launch.task, timeout=240)
            assert isinstance(launch.events[-1], Ready), "the console's launch went on to Ready"
    finally:
        code, out, _ = await spark_bot("down")
    assert code == 0
