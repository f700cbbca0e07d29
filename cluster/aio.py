"""asyncio helpers shared by the controller and the handlers."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Coroutine
from typing import Any

log = logging.getLogger(__name__)

TURN_S = 0.01  # the longest a loop over ready data holds the event loop before it lets others in


class Turns:
    """Lets the event loop run others' callbacks once a loop over ready data has held it for
    `TURN_S`: awaiting a buffer that is never empty (a log flood) does not suspend by itself."""

    def __init__(self, turn_s: float = TURN_S):
        self.turn_s = turn_s
        self._since = time.monotonic()

    async def give(self) -> None:
        """A turn to the others, if this one has held the loop for `turn_s` since its last."""
        if time.monotonic() - self._since >= self.turn_s:
            await asyncio.sleep(0)
            self._since = time.monotonic()


def log_failure(task: asyncio.Task[Any]) -> None:
    """A done callback for a task nothing awaits for its result: its exception is logged, not lost."""
    if not task.cancelled() and task.exception() is not None:
        log.error("task %s failed", task.get_name(), exc_info=task.exception())


async def finish_uncancelled(coro: Coroutine[Any, Any, Any]) -> None:
    """Run `coro` to its end even when the caller is cancelled meanwhile (the cancel is re-raised
    afterwards): a clean-up (releasing a lock, removing what was started) must not stop half-way."""
    task = asyncio.ensure_future(coro)
    cancelled = False
    while not task.done():
        try:
            await asyncio.shield(task)
        except asyncio.CancelledError:
            if task.done() and task.cancelled():
                raise
            cancelled = True
    task.result()
    if cancelled:
        raise asyncio.CancelledError
