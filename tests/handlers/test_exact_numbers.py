"""A number in `/spark up` is echoed, audited, confirmed and launched exactly as typed."""

from __future__ import annotations

import io
import sqlite3

import pytest

from bot.app import run_console
from cluster.serving.containers import serve_command
from handlers.specs import parse_command
from tests.handlers.helpers import bot_config, lines

pytestmark = pytest.mark.timeout(60)

OVERRIDES = {
    "gpu_memory_utilization": {"min": 0.1, "max": 0.95},
    "max_model_len": {"min": 1024, "max": 32768},
}


@pytest.mark.parametrize("typed", ["0.9123456", "0.1234567891", "0.5", "0.95"])
def test_the_command_text_carries_the_number_as_typed(tmp_path, typed):
    config = bot_config(tmp_path, OVERRIDES)
    command = parse_command(f"up gpu_memory_utilization={typed}", config.cluster, config.commands)
    assert command.text() == f"up gpu_memory_utilization={typed}"
    # a confirmation button carries text() back: the confirmed launch is the asked one
    assert parse_command(command.text(), config.cluster, config.commands) == command
    launched = command.apply(config.cluster, config.commands)
    argv = serve_command(launched)
    assert argv[argv.index("--gpu-memory-utilization") + 1] == typed


async def test_the_audit_and_the_job_record_keep_the_number_as_typed(tmp_path):
    out = io.StringIO()
    await run_console(
        bot_config(tmp_path, OVERRIDES),
        {},
        lines=lines("/spark up gpu_memory_utilization=0.9123456 max_model_len=8192"),
        out=out,
    )
    with sqlite3.connect(tmp_path / "spark-bot.db") as db:
        audited = [row[0] for row in db.execute("SELECT command FROM audit")]
        jobs = [row[0] for row in db.execute("SELECT command FROM jobs")]
    assert jobs == ["up gpu_memory_utilization=0.9123456 max_model_len=8192"], out.getvalue()
    assert audited and set(audited) == set(jobs), audited
