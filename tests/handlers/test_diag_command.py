"""`/spark diag` on the doubles: where the bundle goes (the watched job's thread in its own
channel, else a new thread where it was asked), what the asker is told, and the audit."""

from __future__ import annotations

import asyncio

import pytest

from cluster.events import DiagnosticsCollected
from handlers.command_context import Invocation
from testkit.doubles import (
    ALICE,
    BOB,
    CH,
    ScriptedControllers,
    launch_passes,
    ready,
    running_dispatcher,
    settings,
)
from tests.handlers.test_dispatch import db_rows

pytestmark = pytest.mark.timeout(60)


def collected() -> DiagnosticsCollected:
    return DiagnosticsCollected(
        elapsed_s=0.4,
        path="(set by the double)",
        size=8,
        summary="spark-bot diagnostics",
        files=["SUMMARY.txt", "nodes/spark-lab-0/container.log"],
        problems=["nodes/spark-lab-0/nvidia-smi.txt: missing: `nvidia-smi` is not installed"],
    )


async def test_without_a_job_the_bundle_goes_to_a_new_thread_where_it_was_asked(tmp_path):
    controllers = ScriptedControllers(diag=[collected()])
    async with running_dispatcher(controllers, settings(tmp_path)) as (dispatcher, chat):
        assert await dispatcher.command(Invocation(BOB, CH, "diag")) is None  # from a task
        await asyncio.wait_for(dispatcher.idle(), 10)
    [parent] = chat.posts
    assert parent.thread is None and parent.message.title == "🩺 Diagnostics of `lab`"
    [(thread, bundle)] = chat.uploads
    assert thread == parent.ts and bundle.content == b"a bundle"
    assert bundle.filename == "spark-diag-lab-cluster.tar.gz"
    [(user, told)] = chat.private
    assert user == BOB and told.title == "Diagnostics bundle uploaded"
    assert "a new thread here" in told.text and "nvidia-smi" in told.text
    [call] = [c for c in controllers.calls if c.operation == "diag"]
    assert call.options["events"] == [] and "no job" in call.options["events_note"]
    assert ("diag", "uploaded to a new thread here: 2 files") in db_rows(
        tmp_path, "SELECT command, outcome FROM audit"
    )


async def test_the_watched_launch_gets_it_in_its_thread_with_its_events(tmp_path):
    controllers = ScriptedControllers(up=[*launch_passes(), ready()], diag=[collected()])
    async with running_dispatcher(controllers, settings(tmp_path)) as (dispatcher, chat):
        await dispatcher.command(Invocation(ALICE, CH, "up"))
        await asyncio.wait_for(dispatcher.idle(), 10)
        await dispatcher.command(Invocation(BOB, CH, "diag"))
        await asyncio.wait_for(dispatcher.idle(), 10)
    launch = chat.posts[0]
    [(thread, bundle)] = chat.uploads
    assert thread == launch.ts and bundle.filename == "spark-diag-lab-1.tar.gz"
    assert not [p for p in chat.posts if p.message.title.startswith("🩺")], "no new thread"
    [call] = [c for c in controllers.calls if c.operation == "diag"]
    events = call.options["events"]
    assert len(events) == len(launch_passes()) + 1 and '"kind":"ready"' in events[-1]
    assert "job #1 `/spark up`" in call.options["events_note"]
    assert "the thread of job #1" in chat.private[-1][1].text


async def test_a_restarts_bundle_goes_under_its_launchs_thread_never_under_a_reply(tmp_path):
    # a restart's message is a reply in its launch's thread; Slack's files.completeUploadExternal
    # says never to use a reply's ts as thread_ts, only its parent's
    controllers = ScriptedControllers(diag=[collected()])
    async with running_dispatcher(controllers, settings(tmp_path)) as (dispatcher, chat):
        store, launch_ts = dispatcher.store, "1700000000.000100"
        restart = await store.create_job("lab", "restart", ALICE, CH)
        await store.set_parent(restart.id, "1700000050.000200", None, "{}", thread=launch_ts)
        await store.set_watch("lab", restart.id)
        await dispatcher.command(Invocation(BOB, CH, "diag"))
        await asyncio.wait_for(dispatcher.idle(), 10)
    [(thread, _)] = chat.uploads
    assert thread == launch_ts
