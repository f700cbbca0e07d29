"""The bot's log: one handler on stderr, as text or one JSON object a line, at the level the flag
or the environment asks for, every record through the redacting filter.

JSON lines carry `time` (UTC, ISO 8601), `level`, `logger`, `message`, `exc_info` for a
traceback, and the `cluster` and `job_id` the record was written for, where known
(handlers.log_context).
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Mapping
from typing import Any, Literal, TextIO

from pythonjsonlogger.json import JsonFormatter

from cluster.errors import ConfigError
from cluster.redact import RedactingFilter, redact, secret_name
from handlers.log_context import ContextFilter

LogFormat = Literal["text", "json"]
LOG_FORMATS: tuple[LogFormat, ...] = ("text", "json")
LOG_LEVELS = ("debug", "info", "warning", "error", "critical")
LEVEL_VARIABLE = "SPARK_BOT_LOG_LEVEL"
FORMAT_VARIABLE = "SPARK_BOT_LOG_FORMAT"
TEXT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
HANDLER_NAME = "spark-bot"


class RedactedJsonFormatter(JsonFormatter):
    """pythonjsonlogger's formatter; every string it writes is redacted, the fields a record's
    `extra` brought and a traceback formatted from `exc_info` included."""

    def __init__(self, known: tuple[str, ...]) -> None:
        super().__init__(
            ["levelname", "name", "message"],
            rename_fields={"levelname": "level", "name": "logger"},
            timestamp="time",
        )
        self.known = known

    def process_log_record(self, log_data: dict[str, Any]) -> dict[str, Any]:
        return {
            key: redact(value, self.known) if isinstance(value, str) else value
            for key, value in log_data.items()
        }


def log_settings(
    environ: Mapping[str, str],
    *,
    level: str | None,
    log_format: str | None,
    default_level: str = "info",
) -> tuple[int, LogFormat]:
    """The level and format: the flag's, else the environment's, else the default."""
    level_name = level or environ.get(LEVEL_VARIABLE) or default_level
    if level_name.lower() not in LOG_LEVELS:
        raise ConfigError(
            f"{LEVEL_VARIABLE}={level_name!r} is not a log level: "
            f"use one of {', '.join(LOG_LEVELS)}"
        )
    chosen = (log_format or environ.get(FORMAT_VARIABLE) or "text").lower()
    if chosen not in LOG_FORMATS:
        raise ConfigError(
            f"{FORMAT_VARIABLE}={chosen!r} is not a log format: use text or json "
            "(json: one object a line)"
        )
    return logging.getLevelNamesMapping()[level_name.upper()], chosen


def configure_logging(
    environ: Mapping[str, str],
    level: int = logging.INFO,
    log_format: LogFormat = "text",
    stream: TextIO | None = None,
) -> logging.Handler:
    """Log to `stream` (stderr), every record through the redacting filter: token shapes, and the
    values of the environment's variables named like secrets (SLACK_BOT_TOKEN, HF_TOKEN...).
    Called again, it replaces the handler it installed."""
    known = tuple(value for name, value in environ.items() if secret_name(name) and len(value) >= 8)
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.set_name(HANDLER_NAME)
    handler.setLevel(level)  # also for a logger a library set to a lower level of its own
    handler.setFormatter(
        RedactedJsonFormatter(known) if log_format == "json" else logging.Formatter(TEXT)
    )
    handler.addFilter(ContextFilter())
    handler.addFilter(RedactingFilter(known))
    root = logging.getLogger()
    for old in [h for h in root.handlers if h.get_name() == HANDLER_NAME]:
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level)
    return handler
