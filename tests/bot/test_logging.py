"""The bot's log as an operator configures it: `--log-format json` writes one JSON object a line
(time, level, logger, message, and the cluster and job a record was written for), the level
comes from `--log-level` or SPARK_BOT_LOG_LEVEL, and no planted secret reaches a line, not even
at debug level, where the Slack SDK logs its requests."""

from __future__ import annotations

import asyncio
import io
import json
import logging
import os
import signal
import sys
from pathlib import Path

import pytest
import yaml

from bot.logs import configure_logging, log_settings
from cluster.errors import ConfigError
from testkit import planted_secrets as secrets
from testkit.planted_secrets import planted_in
from tests.handlers.helpers import bot_config

pytestmark = pytest.mark.timeout(60)

ROOT = Path(__file__).resolve().parents[2]
CH, ALICE = "C0SPARKOPS", "U0ALICE"


@pytest.fixture
def root_logger():
    """configure_logging changes the root logger: put it back as pytest had it."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield root
    root.handlers[:], root.level = handlers, level


def test_the_flag_wins_over_the_environment_which_wins_over_the_default():
    env = {"SPARK_BOT_LOG_LEVEL": "debug", "SPARK_BOT_LOG_FORMAT": "json"}
    assert log_settings({}, level=None, log_format=None) == (logging.INFO, "text")
    assert log_settings({}, level=None, log_format=None, default_level="warning")[0] == 30
    assert log_settings(env, level=None, log_format=None) == (logging.DEBUG, "json")
    assert log_settings(env, level="error", log_format="text") == (logging.ERROR, "text")
    with pytest.raises(ConfigError, match=r"SPARK_BOT_LOG_LEVEL='loud' is not a log level: use"):
        log_settings({"SPARK_BOT_LOG_LEVEL": "loud"}, level=None, log_format=None)
    with pytest.raises(ConfigError, match=r"SPARK_BOT_LOG_FORMAT='xml' is not a log format"):
        log_settings({"SPARK_BOT_LOG_FORMAT": "xml"}, level=None, log_format=None)


@pytest.mark.leaks_on_purpose  # it logs a planted token, for the handler to mask
def test_a_json_line_redacts_the_message_the_traceback_and_extra_fields(root_logger):
    stream = io.StringIO()
    environ = {"HF_TOKEN": "plain-words-secret"}
    configure_logging(environ, logging.INFO, "json", stream)
    log = logging.getLogger("handlers.jobs")
    try:
        raise RuntimeError(f"bad token {secrets.SLACK_BOT_TOKEN}")
    except RuntimeError:
        log.exception(
            "job %s failed with %s", 7, "plain-words-secret", extra={"peer": "hf_" + "A" * 30}
        )
    log.debug("below the level")
    [line] = stream.getvalue().splitlines()
    record = json.loads(line)
    assert record["level"] == "ERROR" and record["logger"] == "handlers.jobs"
    assert record["message"] == "job 7 failed with ***"
    assert "RuntimeError: bad token ***" in record["exc_info"]
    assert record["peer"] == "***"
    assert record["time"].endswith("+00:00")
    assert not planted_in(line) and "plain-words-secret" not in line


class JsonLines:
    """The bot's standard error as it arrives, each line one JSON object (or the test fails)."""

    def __init__(self, stream: asyncio.StreamReader):
        self.records: list[dict] = []
        self.raw: list[str] = []
        self._arrived = asyncio.Condition()
        self._ended = False
        self.reader = asyncio.create_task(self._read(stream))

    async def _read(self, stream: asyncio.StreamReader) -> None:
        try:
            while line := await stream.readline():
                text = line.decode()
                self.raw.append(text)
                self.records.append(json.loads(text))
                async with self._arrived:
                    self._arrived.notify_all()
        finally:
            self._ended = True
            async with self._arrived:
                self._arrived.notify_all()

    async def wait_for(self, condition, timeout: float = 30) -> dict:
        """The first record `condition` accepts, as soon as it is logged."""

        def found() -> dict | None:
            return next((r for r in self.records if condition(r)), None)

        async with asyncio.timeout(timeout), self._arrived:
            await self._arrived.wait_for(lambda: found() is not None or self._ended)
        record = found()
        assert record is not None, "the bot's log ended (it exited) first"
        return record


async def run_bot(slack, tmp_path: Path, flags: list[str], env: dict[str, str]):
    config = bot_config(tmp_path).model_dump(mode="json")
    config["slack"] = {"api_url": slack.api_url, "host": "127.0.0.1", "port": 0}
    config["access"] = {"read": {"users": ["*"], "channels": [CH]}}
    path = tmp_path / "sparks.yaml"
    path.write_text(yaml.safe_dump(config))
    environ = {
        **{k: v for k, v in os.environ.items() if not k.startswith("SPARK_BOT_")},
        "SLACK_BOT_TOKEN": slack.bot_token,
        "SLACK_APP_TOKEN": slack.app_token,
        "HF_TOKEN": secrets.HF_TOKEN,
        **env,
    }
    return await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bot.cli", "run", "--config", str(path), *flags,
        cwd=ROOT, env=environ, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip


async def test_spark_bot_run_logs_json_lines_naming_the_job_at_the_flags_level(slack, tmp_path):
    # the format from the environment, the level from the flag over the environment's
    env = {"SPARK_BOT_LOG_FORMAT": "json", "SPARK_BOT_LOG_LEVEL": "error"}
    proc = await run_bot(slack, tmp_path, ["--log-level", "debug"], env)
    assert proc.stderr is not None
    log = JsonLines(proc.stderr)
    try:
        await log.wait_for(lambda r: r["message"].startswith("spark-bot on Slack"))
        await slack.wait_for_connection()
        slack.rate_limit("chat.postMessage")  # the job's outbox logs the 429, in the job's name
        await slack.send_slash_command(ALICE, CH, "verify")
        refused = await log.wait_for(lambda r: "rate limited" in r["message"])
        await slack.wait_for_calls("chat.postMessage", 2, timeout=20)
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(proc.wait(), 30) == 0
        await log.reader
    lines, raw = log.records, log.raw
    assert refused["level"] == "WARNING" and refused["logger"] == "handlers.outbox"
    assert refused["job_id"] == 1 and refused["cluster"] == "nowhere"
    assert {"time", "level", "logger", "message"} <= set(refused)
    assert any(r["level"] == "DEBUG" for r in lines), "the flag's level"
    leaks = [f"{name} in {line!r}" for line in raw for name in planted_in(line)]
    assert not leaks, leaks[:3]
