"""Which cluster and job a log record was written for: set where a job's work starts, read by the
log handler's filter, so a record from deep in the controller still names its job.

A context variable: a task copies it when created, so the tasks a job starts (its outbox, its
watch) keep naming the job.
"""

from __future__ import annotations

import contextvars
import logging

Ids = tuple[tuple[str, str | int], ...]  # (name, value) pairs: an immutable default
_IDS: contextvars.ContextVar[Ids] = contextvars.ContextVar("spark_bot_log_ids", default=())


def _with(ids: dict[str, str | int]) -> Ids:
    return tuple({**dict(_IDS.get()), **ids}.items())


def for_this_task(**ids: str | int) -> None:
    """Records written from now on in this task (and in tasks it creates) carry `ids`: for a task
    that does one job's work and ends with it."""
    _IDS.set(_with(ids))


def context_with(**ids: str | int) -> contextvars.Context:
    """A copy of the current context whose records carry `ids` too (for asyncio.create_task)."""
    context = contextvars.copy_context()
    context.run(_IDS.set, _with(ids))
    return context


class ContextFilter(logging.Filter):
    """Sets the ids of the current context on each record (`cluster`, `job_id`), unless the
    record already has them."""

    def filter(self, record: logging.LogRecord) -> bool:
        for key, value in _IDS.get():
            if not hasattr(record, key):
                setattr(record, key, value)
        return True
