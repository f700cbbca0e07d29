"""asyncio helpers shared by the controller and the handlers."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from typing import Any

log = logging.getLogger(__name__)


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
