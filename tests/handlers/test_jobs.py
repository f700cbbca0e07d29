"""The lock's release cannot be cut short by a cancel."""

from __future__ import annotations

import asyncio

import pytest

from cluster.aio import finish_uncancelled
from handlers.store import Store


async def test_a_cancel_during_the_release_does_not_stop_it(tmp_path):
    store = Store(tmp_path / "db.sqlite")
    await store.open()
    try:
        record = await store.create_job("lab", "up", "U0ALICE", "C0SPARKOPS")
        assert await store.acquire("lab", record.id, "me", 30) is None
        started, proceed = asyncio.Event(), asyncio.Event()

        async def release() -> None:
            started.set()
            await proceed.wait()
            await store.release("lab", record.id, "me")
            await store.finish_job(record.id, "cancelled", "cancelled by U0ALICE")

        task = asyncio.create_task(finish_uncancelled(release()))
        await started.wait()
        task.cancel()  # a Cancel click (or shutdown) while the job's end is being recorded
        proceed.set()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert await store.locks() == []
        assert (await store.job(record.id)).state == "cancelled"
    finally:
        await store.close()
