"""Writes to the store that must never stop or undo cluster work.

SQLite can fail for a while (another connection holds the database, the disk is full, an I/O
error): a write is retried briefly, and when it still fails the work goes on with its state in
memory. A job's journal tells its requester once, privately, that the job could not be recorded.
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

log = logging.getLogger(__name__)

T = TypeVar("T")

# Short waits between attempts; with each attempt's own busy wait (handlers/store.py) a write
# gives up after about 2 s: long enough for a brief lock or a checkpoint, short enough for a job.
RETRY_DELAYS = (0.05, 0.1, 0.2, 0.4, 0.6)


async def retried(write: Callable[[], Awaitable[T]], delays: tuple[float, ...] = RETRY_DELAYS) -> T:
    """`write()`, tried again after each delay while SQLite says it cannot now (locked, full, I/O
    error); the last error is raised. Other errors are not passing, and are raised at once."""
    for delay in delays:
        try:
            return await write()
        except sqlite3.OperationalError as error:
            log.warning("store write failed (%s); trying again in %.2fs", error, delay)
        await asyncio.sleep(delay)
    return await write()


class Journal:
    """Writes that are wanted but not needed for the work to go on: each is retried briefly; a
    lasting failure is logged (and told once through `tell`), then the journal tries each later
    write once only until one succeeds, so a broken store does not slow the work down."""

    def __init__(self, tell: Callable[[str], Awaitable[Any]] | None = None):
        self.tell = tell
        self.failure: str | None = None  # the first lasting failure, as told
        self.failing = False

    async def write(self, what: str, write: Callable[[], Awaitable[Any]]) -> bool:
        """Whether `write()` was recorded."""
        try:
            await (write() if self.failing else retried(write))
        except sqlite3.Error as error:
            log.error("could not record %s: %s", what, error)
            self.failing = True
            if self.failure is None:
                self.failure = f"{what}: {error}"
                if self.tell is not None:
                    await self.tell(self.failure)
            return False
        self.failing = False
        return True
