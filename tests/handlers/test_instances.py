"""One spark-bot per database: the cluster lock is a lease of the instance that runs the job,
renewed by its heartbeat; a second instance on the same file refuses to start, and may take over
only once the first is proven gone. The store's clock is the test's: no waiting for leases."""

from __future__ import annotations

import sqlite3

import pytest

from handlers.command_context import Invocation
from handlers.dispatch import Dispatcher
from handlers.errors import AnotherInstance
from handlers.job_state import JobState
from handlers.store import MIGRATIONS, SCHEMA, Store
from testkit.doubles import (
    ALICE,
    BOB,
    CH,
    CLUSTER,
    Clock,
    Hold,
    RecordingChat,
    ScriptedControllers,
    running_dispatcher,
    settings,
)

pytestmark = pytest.mark.timeout(10)

LEASE = 30  # the default store.lease


async def test_a_second_instance_cannot_touch_the_first_ones_lock_until_its_lease_expires(tmp_path):
    clock = Clock()
    bot_settings = settings(tmp_path)
    path = bot_settings.store.path
    first_hold, second_hold = Hold(), Hold()
    async with running_dispatcher(
        ScriptedControllers(up=[first_hold]), bot_settings, store=Store(path, clock)
    ) as (first, _):
        await first.command(Invocation(ALICE, CH, "up"))
        await first_hold.reached.wait()
        first_id = first.jobs.owner.id

        second = Dispatcher(
            CLUSTER,
            bot_settings,
            RecordingChat(),
            Store(path, clock),
            ScriptedControllers(verify=[second_hold]),
        )
        with pytest.raises(AnotherInstance, match=f"another spark-bot uses {path} .*stop it first"):
            await second.start()

        other = Store(path, clock)  # the store as the second instance would use it
        await other.open()
        try:
            record = await other.create_job(CLUSTER.name, "verify", BOB, CH)
            holder = await other.acquire(CLUSTER.name, record.id, "second", LEASE)
            assert holder is not None and holder.job.id == 1, "the first's lease is not taken"
            await other.release(CLUSTER.name, 1, "second")
            assert [(lock.job.id, lock.instance) for lock in await other.locks()] == [(1, first_id)]

            # while the first beats, its lease outlives the lease length
            clock.advance(LEASE * 2 / 3)
            await first.jobs.heartbeat()
            clock.advance(LEASE * 2 / 3)
            assert await other.acquire(CLUSTER.name, record.id, "second", LEASE) is not None
            with pytest.raises(AnotherInstance):
                await second.start()
        finally:
            await other.close()

        clock.advance(LEASE + 1)  # the first has stopped beating (hung, or gone with its host)
        await second.start()
        try:
            await second.idle()  # its reconciliation with what the first left
            assert await second.store.locks() == [], "the first's expired lock was released"
            assert (await second.store.job(1)).state == JobState.INTERRUPTED
            await second.command(Invocation(ALICE, CH, "verify"))
            await second_hold.reached.wait()
            [lock] = await second.store.locks()
            assert (lock.job.id, lock.instance) == (3, second.jobs.owner.id)

            first_hold.release.set()  # the first's job ends: it cannot free the second's lock
            await first.idle()
            assert [(lock.job.id, lock.instance) for lock in await second.store.locks()] == [
                (3, second.jobs.owner.id)
            ]
            second_hold.release.set()
            await second.idle()
            assert (await second.store.job(3)).state == JobState.SUCCEEDED
        finally:
            await second.stop()


async def test_a_bot_that_stopped_cleanly_leaves_the_database_to_the_next_at_once(tmp_path):
    bot_settings = settings(tmp_path)
    async with running_dispatcher(ScriptedControllers(), bot_settings):
        pass
    async with running_dispatcher(ScriptedControllers(verify=[]), bot_settings) as (dispatcher, _):
        await dispatcher.command(Invocation(ALICE, CH, "verify"))
        await dispatcher.idle()
        assert (await dispatcher.store.job(1)).state == JobState.SUCCEEDED


async def test_a_database_of_an_earlier_version_is_migrated_and_its_lock_released(tmp_path):
    bot_settings = settings(tmp_path)
    with sqlite3.connect(bot_settings.store.path) as db:
        db.executescript(SCHEMA)  # as spark-bot wrote it before leases
        db.execute(
            "INSERT INTO jobs (cluster, command, user, channel, state, started_at) "
            "VALUES (?, 'up', ?, ?, 'running', '2026-11-30T08:00:00+00:00')",
            (CLUSTER.name, ALICE, CH),
        )
        db.execute(
            "INSERT INTO locks (cluster, job_id, instance, since) VALUES (?, 1, 'old', '2026-11-30T08:00:00')",
            (CLUSTER.name,),
        )
    db.close()
    async with running_dispatcher(ScriptedControllers(), bot_settings) as (dispatcher, _):
        await dispatcher.idle()
        assert await dispatcher.store.locks() == []
        assert (await dispatcher.store.job(1)).state == JobState.INTERRUPTED
    with sqlite3.connect(bot_settings.store.path) as db:
        assert db.execute("PRAGMA user_version").fetchone()[0] == len(MIGRATIONS)
        assert "expires" in [column[1] for column in db.execute("PRAGMA table_info(locks)")]
    db.close()
