"""After the bot restarts: the locks a previous run left released, the jobs it interrupted told
so in their threads, and a cluster still serving watched again from its launch's thread."""

from __future__ import annotations

import asyncio
import logging
from functools import partial

from cluster.events import StatusReport
from handlers.chat import Posted
from handlers.job_state import JobState
from handlers.jobs import LAUNCHES, RELAUNCH, JobManager, describe_state
from handlers.messages import Message
from handlers.render import JobView
from handlers.serving_watch import ServingWatch
from handlers.store import JobRecord

log = logging.getLogger(__name__)


def view_for(jobs: JobManager, record: JobRecord) -> JobView:
    """The messages of a job posted by an earlier run of the bot (from what the store kept)."""
    view = JobView(
        jobs.chat,
        record.channel,
        title="",
        text="",
        plan=[],
        job_id=record.id,
        requester=record.user,
        settings=jobs.settings.jobs,
        deliveries=jobs.deliveries,
        posted=Posted(record.channel, record.ts) if record.ts else None,
        link=record.link,
        thread=record.thread,
        on_parent=lambda m: jobs.journal.write(
            f"job {record.id}'s message",
            lambda: jobs.store.save_parent(record.id, m.model_dump_json()),
        ),
    )
    if record.parent_json:
        view.parent = Message.model_validate_json(record.parent_json)
        view.items = {str(i): item for i, item in enumerate(view.parent.checklist)}
    view.parent = view.parent.model_copy(update={"buttons": []})
    return view


async def reconcile_within(jobs: JobManager, watch: ServingWatch, seconds: float) -> None:
    """`reconcile`, given up after `seconds` (nodes that do not answer); jobs wait for it."""
    try:
        async with asyncio.timeout(seconds):
            await reconcile(jobs, watch)
    except TimeoutError:
        log.error(
            "reconcile: gave up after %.0f s (the nodes did not answer); jobs go ahead", seconds
        )
    finally:
        jobs.reconciled.set()


async def reconcile(jobs: JobManager, watch: ServingWatch) -> None:
    """Release the locks of jobs a previous run left behind (their owner is gone: `begin`
    let this instance start), compare with the real cluster, and watch a running cluster
    again in the thread of the job that launched it."""
    interrupted: list[JobRecord] = []
    at = jobs.store.clock()
    alive = {instance.id for instance in await jobs.store.instances()}
    for lock in await jobs.store.locks():
        if lock.instance == jobs.owner.id or (
            lock.instance in alive and lock.expires and lock.expires > at
        ):
            continue
        job, outcome = lock.job, "interrupted: the bot stopped during the job"
        await jobs.journal.write(
            f"the release of job {job.id}'s lock",
            partial(jobs.store.release, lock.cluster, job.id, lock.instance),
        )
        await jobs.journal.write(
            f"job {job.id}'s end",
            partial(
                jobs.store.finish_job,
                job.id,
                JobState.INTERRUPTED,
                "the bot stopped during the job",
            ),
        )
        await jobs.journal.write(
            f"job {job.id}'s audit",
            partial(
                jobs.store.audit, job.user, job.channel, job.command, outcome, job.id, job.link
            ),
        )
        jobs.metrics.job_ended(job.command, JobState.INTERRUPTED)
        interrupted.append(job)
    try:
        [report] = [
            e
            async for e in jobs.controller_for(jobs.cluster).status()
            if isinstance(e, StatusReport)
        ]
    except Exception as error:
        log.error("reconcile: cannot read the cluster state: %s", error)
        report = None
    running = (
        report is not None and bool(report.containers) and all(c.running for c in report.containers)
    )
    watched = await jobs.store.watch(jobs.cluster.name)
    launched = next((j for j in reversed(interrupted) if j.command.split()[0] in LAUNCHES), None)
    if launched and running:
        watched = launched
    for record in interrupted:
        view = view_for(jobs, record)
        state = describe_state(report)
        footer = "⚠ Interrupted: the bot restarted during this job (lock released)"
        await view.finish(JobState.INTERRUPTED, footer)
        resumed = running and watched is not None and watched.id == record.id
        then = " Watching it again from here." if resumed else ""
        await view.reply(
            Message(
                title="⚠ The bot restarted during this job",
                tone="warning",
                text=f"The lock is released. Cluster now: {state}.{then}",
            )
        )
    if watched is None:
        return
    view = view_for(jobs, watched)
    if running:
        if watched not in interrupted:
            await view.reply(
                Message(
                    title="👀 Watching again after a bot restart",
                    tone="neutral",
                    text=f"Cluster now: {describe_state(report)}.",
                )
            )
        await watch.start(watched, view)
    else:
        await watch.clear()
        if report is not None:
            await view.reply(
                Message(
                    title="⚠ The cluster stopped while the bot was away",
                    tone="warning",
                    mention=watched.user,
                    text=f"<@{watched.user}> cluster now: {describe_state(report)}; {RELAUNCH}.",
                ),
                broadcast=True,
            )
