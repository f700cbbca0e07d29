"""The watch of a serving cluster after `up`: each failure told in the launch's thread, and the
restart policy's relaunch after a death while watched."""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import AsyncGenerator
from contextlib import aclosing
from functools import partial

from cluster.events import Event, Failed, Progress, Ready
from cluster.progress.checkpoints import launch_plan
from handlers.errors import Busy, StoreUnavailable
from handlers.jobs import RELAUNCH, Job, JobManager, JobPlan
from handlers.journal import Journal
from handlers.log_context import for_this_task
from handlers.messages import Message, escape
from handlers.render import JobView
from handlers.store import JobRecord

log = logging.getLogger(__name__)

# The watch's news that is no failure: a node no longer followed while the API serves, and
# again; a node whose memory runs low (with the trend).
MONITORING = {
    "monitoring_lost": ("⚠ Monitoring lost, the API still serves", "warning"),
    "monitoring_resumed": ("👀 Monitoring resumed", "neutral"),
    "memory_low": ("⚠ Memory low", "warning"),
}


class ServingWatch:
    """At most one watch per cluster, a task of the job manager's that outlives the jobs."""

    def __init__(self, jobs: JobManager):
        self.jobs = jobs
        self.task: asyncio.Task[None] | None = None
        self._restarts: deque[float] = deque()  # when the restart policy relaunched (loop time)

    @property
    def watching(self) -> bool:
        """A watch follows the cluster now (its task ends with a failure, a stop or an error)."""
        return self.task is not None and not self.task.done()

    async def start(self, record: JobRecord, view: JobView, journal: Journal | None = None) -> None:
        await (journal or self.jobs.journal).write(
            f"job {record.id}'s watch",
            lambda: self.jobs.store.set_watch(self.jobs.cluster.name, record.id),
        )
        await self.stop(clear=False)
        self.task = self.jobs.spawn(self._follow(record, view), f"watch-{record.id}", lasting=True)
        self.jobs.metrics.watching("watching")

    async def stop(self, *, clear: bool = True) -> None:
        task, self.task = self.task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        self.jobs.metrics.watching("not_watching")
        if clear:
            await self.clear()

    async def clear(self) -> None:
        await self.jobs.journal.write(
            "the end of the watch", lambda: self.jobs.store.clear_watch(self.jobs.cluster.name)
        )

    async def _follow(self, record: JobRecord, view: JobView) -> None:
        for_this_task(job_id=record.id)
        config = await self.jobs.launched_config()
        events = self.jobs.controller_for(config).watch(
            health_interval=self.jobs.settings.jobs.watch_health_interval
        )
        try:
            async with aclosing(events):
                async for event in events:
                    self.jobs.keep(record.id, event)
                    if isinstance(event, Progress) and event.phase in MONITORING:
                        title, tone = MONITORING[event.phase]
                        self.jobs.metrics.watching(
                            "monitoring_lost" if event.phase == "monitoring_lost" else "watching"
                        )
                        await view.reply(
                            Message(title=title, tone=tone, text=escape(event.message))
                        )
                        continue
                    if isinstance(event, Progress) and event.phase == "stopped":
                        self.jobs.metrics.watching("not_watching")
                        await self.clear()
                        await view.reply(
                            Message(
                                title="ℹ The cluster was stopped",
                                tone="neutral",
                                text=f"{escape(event.message)}. No longer watching; {RELAUNCH}.",
                            )
                        )
                        return
                    if isinstance(event, Failed):
                        self.jobs.metrics.failed(event.signature)
                        self.jobs.metrics.watching("serving_lost")
                        await self.clear()
                        await view.failed(event, during=" while serving")
                        await self.jobs.journal.write(
                            "the watch's audit",
                            partial(
                                self.jobs.store.audit,
                                record.user,
                                record.channel,
                                "watch",
                                f"failed: {event.title}: {event.summary}",
                                record.id,
                                record.link,
                            ),
                        )
                        if self.jobs.cluster.restart is not None:
                            # its own task: the relaunch's watch replaces this one
                            self.jobs.spawn(
                                self._restart(record, view), f"restart-after-{record.id}"
                            )
                        return
        except asyncio.CancelledError:
            raise
        except Exception as error:
            self.jobs.metrics.watching("not_watching")
            log.exception("watch of job %s stopped", record.id)
            await view.reply(
                Message(
                    title="⚠ Stopped watching the cluster",
                    tone="warning",
                    text=f"{type(error).__name__}: {escape(error)}. `/spark status` shows the "
                    "state; `/spark verify` re-checks it.",
                )
            )

    # -- the restart policy -----------------------------------------------------------------

    async def _restart(self, record: JobRecord, view: JobView) -> None:
        """After the watch of `record` reported the server dead: unless the policy's maximum
        within its window is reached or another job holds the lock, a job of the launcher's
        tears down and launches again in the same thread, with the launch's checkpoints."""
        policy = self.jobs.cluster.restart
        assert policy is not None
        now = asyncio.get_running_loop().time()
        while self._restarts and now - self._restarts[0] >= policy.within:
            self._restarts.popleft()
        window = _span(policy.within)
        if len(self._restarts) >= policy.max:
            why = f"already restarted {len(self._restarts)} time(s) within {window} (restart.max)"
            await self._no_restart(record, view, why)
            return
        try:
            restart = await self.jobs.open_job("restart", record.user, record.channel)
        except Busy as busy:
            holder = busy.holder.job
            why = f"job #{holder.id} `/spark {holder.command}` holds the lock"
            await self._no_restart(record, view, why)
            return
        except StoreUnavailable as error:
            await self._no_restart(record, view, str(error))
            return
        self._restarts.append(now)
        count = f"{len(self._restarts)} of {policy.max} within {window}"
        config = await self.jobs.launched_config()
        controller = self.jobs.controller_for(config)

        async def down_then_up() -> AsyncGenerator[Event, None]:
            async with aclosing(controller.down()) as removing:
                async for event in removing:
                    yield event
            async with aclosing(controller.up(replace=True)) as launching:
                async for event in launching:
                    yield event

        async def relaunched(job: Job, event: Event) -> None:
            if isinstance(event, Ready):
                await self.start(job.record, job.view, job.journal)

        plan = JobPlan(
            title=f"🔁 Restart {count} of `{self.jobs.cluster.name}`",
            checkpoints=launch_plan(config),
            events=down_then_up(),
            on_event=relaunched,
            success_footer=lambda job: "Ready again",
        )
        await self.jobs.run(restart, plan, thread=view.thread)

    async def _no_restart(self, record: JobRecord, view: JobView, why: str) -> None:
        await view.reply(
            Message(
                title="🛑 Not restarting",
                tone="warning",
                mention=record.user,
                text=f"<@{record.user}> {escape(why)}. {RELAUNCH}.",
            ),
            broadcast=True,
        )
        await self.jobs.journal.write(
            "the restart's audit",
            lambda: self.jobs.store.audit(
                record.user, record.channel, "restart", f"not restarted: {why}", record.id
            ),
        )


def _span(seconds: float) -> str:
    """1h, 30m, 90s: a window as the config may write it."""
    for unit, size in (("d", 86_400), ("h", 3600), ("m", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{seconds / size:g}{unit}"
    return f"{seconds:g}s"
