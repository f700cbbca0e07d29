"""Starting on a database file that is not one, or is damaged: one clear line, no traceback."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from testkit import planted_secrets as secrets
from tests.handlers.helpers import bot_config

SPARK_BOT = [sys.executable, "-m", "bot.cli"]
SLACK_ENV = {"SLACK_BOT_TOKEN": secrets.SLACK_BOT_TOKEN, "SLACK_APP_TOKEN": secrets.SLACK_APP_TOKEN}


def not_a_database(path: Path) -> None:
    path.write_bytes(b"these are someone's notes, not SQLite\n" * 200)


def damaged_database(path: Path) -> None:
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE audit (id INTEGER PRIMARY KEY, command TEXT)")
        db.executemany("INSERT INTO audit (command) VALUES (?)", [("up " + "x" * 100,)] * 300)
    db.close()
    data = bytearray(path.read_bytes())
    page = 4096
    data[page : 2 * page] = b"\xab" * page  # the audit table's root page
    path.write_bytes(bytes(data))


@pytest.mark.parametrize(
    ("command", "spoil"),
    [
        (["console"], not_a_database),
        (["console"], damaged_database),
        (["run"], damaged_database),
    ],
    ids=["console-not-a-database", "console-damaged", "slack-damaged"],
)
def test_an_unusable_database_stops_start_up_with_one_line(tmp_path, command, spoil):
    config = bot_config(tmp_path)
    spoil(config.store.path)
    config_file = tmp_path / "sparks.yaml"
    config_file.write_text(yaml.safe_dump(config.model_dump(mode="json")))
    result = subprocess.run(
        [*SPARK_BOT, *command, "--config", str(config_file)],
        input="",
        text=True,
        capture_output=True,
        env={**os.environ, **SLACK_ENV},
        timeout=60,
    )
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    # (`run` logs Bolt's start-up warnings before it: the error is the one line spark-bot writes)
    [line] = [line for line in result.stderr.splitlines() if line.startswith("spark-bot:")]
    assert result.stderr.endswith(line + "\n")
    assert line.startswith(f"spark-bot: {config.store.path} is not a usable spark-bot database (")
    assert "move it aside (or restore it from a backup)" in line
