"""The restart policy (cluster `restart: {max, within}`): a death the watch reports is followed
by a teardown and a launch in the same thread, at most `max` times within the window; never
while another job holds the lock; `/spark cancel` stops one; the audit trail has each."""

from __future__ import annotations

import asyncio

import pytest

from cluster.config import RestartPolicy
from cluster.events import Failed, Removed
from handlers.command_context import Invocation
from testkit.doubles import (
    ALICE,
    CH,
    CLUSTER,
    Hold,
    ScriptedControllers,
    launch_passes,
    ready,
    running_dispatcher,
    settings,
)
from tests.handlers.test_dispatch import db_rows

pytestmark = pytest.mark.timeout(60)

RESTARTING = CLUSTER.model_copy(update={"restart": RestartPolicy(max=1, within=3600)})


def died() -> Failed:
    return Failed(
        elapsed_s=9.0,
        checkpoint="serving",
        title="Serving",
        node=CLUSTER.head.name,
        summary="the engine died",
        evidence="EngineDeadError",
        cause="the engine core process exited",
        fix="relaunch",
    )


def removed() -> list[Removed]:
    return [
        Removed(elapsed_s=0.1, node=n.name, container="vllm", removed=True, detail="removed")
        for n in CLUSTER.nodes
    ]


def operations(controllers: ScriptedControllers) -> list[str]:
    return [c.operation for c in controllers.calls if c.operation != "status"]


def titles(chat, thread: str) -> list[str]:
    return [p.message.title for p in chat.posts if p.thread == thread]


async def test_a_death_is_relaunched_once_in_its_thread_then_the_maximum_stops_it(tmp_path):
    controllers = ScriptedControllers(
        up=[*launch_passes(), ready()], watch=[died()], down=removed()
    )
    async with running_dispatcher(controllers, settings(tmp_path), cluster=RESTARTING) as (
        dispatcher,
        chat,
    ):
        await dispatcher.command(Invocation(ALICE, CH, "up"))
        await asyncio.wait_for(
            chat.wait_until(
                lambda: any(p.message.title == "🛑 Not restarting" for p in chat.posts)
            ),
            20,
        )
        await dispatcher.idle()
    assert operations(controllers) == ["up", "watch", "down", "up", "watch"]
    launch = chat.posts[0]
    assert launch.thread is None
    in_thread = titles(chat, launch.ts)
    # the cause first, then the restart's own message (a live checklist) in the same thread, its
    # checkpoints and Ready there too, then the second death and the policy's refusal
    first_death = in_thread.index("✘ Serving failed")
    restart = next(p for p in chat.posts if p.message.title.startswith("🔁 Restart"))
    assert restart.thread == launch.ts and in_thread.index(restart.message.title) > first_death
    assert restart.message.title == "🔁 Restart 1 of 1 within 1h of `lab`"
    assert in_thread.count("✅ Ready") == 2 and in_thread.count("✘ Serving failed") == 2
    assert in_thread[-1] == "🛑 Not restarting"
    refusal = next(p for p in chat.posts if p.message.title == "🛑 Not restarting").message
    assert "already restarted 1 time(s) within 1h (restart.max)" in refusal.text
    # no slash command can be typed in a thread: a reply that names one says where it goes
    assert "`/spark up` in the channel (not in this thread" in refusal.text
    assert "Ready again" in (chat.latest[restart.ts].footer or "")
    assert not [p for p in chat.posts if p.thread not in (None, launch.ts)], "one thread"
    audit = db_rows(tmp_path, "SELECT command, outcome FROM audit")
    assert ("restart", "succeeded") in audit
    assert any(c == "restart" and o.startswith("not restarted: already") for c, o in audit)
    assert db_rows(tmp_path, "SELECT * FROM locks") == []


async def test_no_restart_while_another_job_holds_the_lock(tmp_path):
    dying, benching = Hold(), Hold()
    controllers = ScriptedControllers(
        up=[*launch_passes(), ready()], watch=[dying, died()], bench=[benching]
    )
    async with running_dispatcher(controllers, settings(tmp_path), cluster=RESTARTING) as (
        dispatcher,
        chat,
    ):
        await dispatcher.command(Invocation(ALICE, CH, "up"))
        await asyncio.wait_for(dying.reached.wait(), 10)
        await dispatcher.command(Invocation(ALICE, CH, "bench"))
        await asyncio.wait_for(benching.reached.wait(), 10)
        dying.release.set()  # the server dies while the bench holds the lock
        await asyncio.wait_for(
            chat.wait_until(
                lambda: any(p.message.title == "🛑 Not restarting" for p in chat.posts)
            ),
            10,
        )
        benching.release.set()
        await dispatcher.idle()
    assert "down" not in operations(controllers) and operations(controllers).count("up") == 1
    refusal = next(p for p in chat.posts if p.message.title == "🛑 Not restarting").message
    assert "job #2 `/spark bench" in refusal.text and "holds the lock" in refusal.text
    audit = db_rows(tmp_path, "SELECT command, outcome FROM audit")
    assert any(c == "restart" and "holds the lock" in o for c, o in audit)


async def test_cancel_stops_a_restart(tmp_path):
    tearing_down = Hold()
    controllers = ScriptedControllers(
        up=[*launch_passes(), ready()], watch=[died()], down=[tearing_down]
    )
    async with running_dispatcher(controllers, settings(tmp_path), cluster=RESTARTING) as (
        dispatcher,
        chat,
    ):
        await dispatcher.command(Invocation(ALICE, CH, "up"))
        await asyncio.wait_for(tearing_down.reached.wait(), 10)
        reply = await dispatcher.command(Invocation(ALICE, CH, "cancel"))
        assert reply is not None and reply.title == "Cancelling job #2"
        await dispatcher.idle()
    assert operations(controllers) == ["up", "watch", "down"], "no launch after the cancel"
    assert "down" in controllers.stopped_early
    restart = next(p for p in chat.posts if p.message.title.startswith("🔁 Restart"))
    assert "Cancelled by" in (chat.latest[restart.ts].footer or "")
    audit = db_rows(tmp_path, "SELECT command, outcome FROM audit")
    assert ("restart", f"cancelled by {ALICE}") in audit
    assert db_rows(tmp_path, "SELECT * FROM locks") == []
