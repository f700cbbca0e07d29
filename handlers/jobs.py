"""The job manager: one job at a time per cluster (the lock, in SQLite), every job an owned task,
cancel through the controller's own cancellation. The watch after `up` is handlers/serving_watch.py,
the reconciliation after the bot restarts handlers/reconcile.py."""

from __future__ import annotations

import asyncio
import logging
import sqlite3
from collections import deque
from collections.abc import AsyncGenerator, Awaitable, Callable, Coroutine
from contextlib import aclosing
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any, TypeVar

from cluster.aio import finish_uncancelled, log_failure
from cluster.config import ClusterConfig
from cluster.controller import Controller
from cluster.events import CheckpointPassed, Event, Failed, StatusReport
from cluster.progress.checkpoints import Checkpoint
from handlers.chat import Chat, Posted
from handlers.commands import apply_serve
from handlers.errors import AnotherInstance, Busy, StoreUnavailable
from handlers.job_state import JobState
from handlers.journal import Journal, retried
from handlers.log_context import context_with
from handlers.messages import Message, escape
from handlers.metrics import BotMetrics, ClusterMetrics
from handlers.outbox import Deliveries
from handlers.render import Delivery, JobView
from handlers.settings import BotSettings
from handlers.store import JobRecord, LockRecord, Owner, Store, now

log = logging.getLogger(__name__)
T = TypeVar("T")

LAUNCHES = ("up", "restart")  # the jobs that leave a server to watch
# Said in a job's thread, where no slash command can be typed (Slack allows them only in the
# message box of a conversation).
RELAUNCH = "`/spark up` in the channel (not in this thread: Slack takes no slash command there) launches it again"
EVENTS_KEPT = 2000  # the latest events of jobs and watches, for a diagnostics bundle

ControllerFactory = Callable[[ClusterConfig], Controller]


@dataclass
class Claim:
    """The cluster lock as this process holds it, from the moment its job is opened until the
    job's end: freed then even if the store cannot delete its row (this instance takes its own
    stale row over at the next job), and what a cancel reaches, whatever the job is awaiting."""

    lock: LockRecord
    task: asyncio.Task[Any] | None = None  # None while the store's lock is being taken
    cancelled_by: str | None = None


@dataclass
class Job:
    record: JobRecord
    view: JobView
    journal: Journal
    state: JobState = JobState.RUNNING
    outcome: str = "running"
    events: list[Event] = field(default_factory=list)

    def end(self, state: JobState, outcome: str) -> None:
        self.state, self.outcome = state, outcome


@dataclass(frozen=True)
class Ending:
    """How a job ends that stopped short of its goal without failing (`up` whose question was
    answered "keep it", or not in time)."""

    state: JobState
    outcome: str  # for the store and the audit trail
    footer: str  # the parent message's last line (markup)


@dataclass(frozen=True)
class JobPlan:
    """What a job shows and follows, built before it runs (handlers/specs.py), run by `JobManager.run`."""

    title: str
    checkpoints: list[Checkpoint]
    events: AsyncGenerator[Event, None]
    on_event: Callable[[Job, Event], Awaitable[None]] | None = None
    success_footer: Callable[[Job], str] = lambda job: "Done"
    # told the job once its message is shown, before its events run (a question in its thread)
    on_start: Callable[[Job], None] | None = None
    # after its events ended without a failure: None when it succeeded, else how it ended instead
    ending: Callable[[Job], Ending | None] = lambda job: None


class JobManager:
    def __init__(
        self,
        cluster: ClusterConfig,
        settings: BotSettings,
        chat: Chat,
        store: Store,
        controller_for: ControllerFactory,
        metrics: ClusterMetrics | None = None,
    ):
        self.cluster = cluster
        self.metrics = metrics or BotMetrics().cluster(cluster.name)
        self.settings = settings
        self.chat = chat
        self.store = store
        self.controller_for = controller_for
        self.owner = Owner.this_process()
        self.lease = settings.store.lease
        self.claim: Claim | None = None
        self.journal = Journal()  # the writes of no one job: the watch, audits
        self.deliver = Delivery(chat)
        self.deliveries = Deliveries()  # every job view's outbox task
        self._unrecorded: list[
            tuple[str, Callable[[], Awaitable[Any]]]
        ] = []  # job ends the store missed
        self._tasks: set[asyncio.Task[Any]] = set()
        self._writes: set[asyncio.Task[bool]] = set()
        self._heartbeat: asyncio.Task[None] | None = None
        self._lasting: set[asyncio.Task[Any]] = set()  # tasks that outlive jobs: the watch
        self.reconciled = asyncio.Event()  # set when the previous run's locks are released
        self._recent: deque[tuple[int, str]] = deque(maxlen=EVENTS_KEPT)  # (job id, JSON line)

    def keep(self, job_id: int, event: Event) -> None:
        """Remember an event of a job (or its watch) for `events_of`; the oldest go first."""
        self._recent.append((job_id, event.to_json()))

    def events_of(self, job_id: int) -> list[str]:
        """The events of job `job_id` this bot still holds (JSON lines, oldest first)."""
        return [line for owner, line in self._recent if owner == job_id]

    # -- owned tasks ------------------------------------------------------------------------

    def spawn(
        self, coro: Coroutine[Any, Any, T], name: str, *, lasting: bool = False
    ) -> asyncio.Task[T]:
        # the coroutine itself, not a wrapper awaiting it: a task cancelled before it ran (a stop
        # right after a start) closes its coroutine instead of leaving it never awaited
        task = asyncio.create_task(coro, name=name, context=context_with(cluster=self.cluster.name))
        self._tasks.add(task)
        if lasting:
            self._lasting.add(task)
        task.add_done_callback(self._ended)
        return task

    def _ended(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        self._lasting.discard(task)
        log_failure(task)

    def record(self, what: str, write: Callable[[], Awaitable[Any]]) -> None:
        """Write to the store in a task nothing waits for (an audit); `stop` lets it finish."""
        task = asyncio.create_task(self.journal.write(what, write), name=f"record {what}")
        self._writes.add(task)
        task.add_done_callback(self._writes.discard)

    async def idle(self, *, chat: bool = True) -> None:
        """Wait until no command task runs, every write is done and (unless not `chat`) every
        message is delivered or given up (a lasting task, the watch, may go on)."""
        while (
            busy := (self._tasks - self._lasting)
            | self._writes
            | (self.deliveries.tasks if chat else set())
        ):
            await asyncio.gather(*busy, return_exceptions=True)

    async def stop(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self.deliveries.close()  # the jobs' last states, for a few seconds at most
        await asyncio.gather(*self._writes, return_exceptions=True)  # each bounded by its retries
        if self._heartbeat is not None:
            self._heartbeat.cancel()
            await asyncio.gather(self._heartbeat, return_exceptions=True)
            self._heartbeat = None
            await self.journal.write(
                "the end of this instance", lambda: self.store.unregister(self.owner)
            )

    # -- this instance on the store ---------------------------------------------------------

    async def begin(self) -> None:
        """Register this instance on the store and keep its leases alive; AnotherInstance when
        another spark-bot still runs on the same database (it would run jobs beside this one)."""
        other = await retried(lambda: self.store.register(self.owner, self.lease))
        if other is not None:
            ago = (self.store.clock() - other.heartbeat).total_seconds()
            raise AnotherInstance(
                f"another spark-bot uses {self.store.path} (pid {other.pid} on {other.host}, running since "
                f"{other.started:%Y-%m-%d %H:%M:%S} UTC, last heard of {ago:.0f} s ago): stop it first, or give "
                f"this one its own store.path; a bot that died is taken as gone {self.lease:g} s (store.lease) "
                "after it was last heard of, or at once when its process is gone from this host"
            )
        self._heartbeat = asyncio.create_task(self._beat(), name="heartbeat")

    async def _beat(self) -> None:
        while True:
            await asyncio.sleep(self.lease / 3)
            await self.heartbeat()

    async def heartbeat(self) -> None:
        """Renew this instance's registration and its job's lease; catch up on missed writes."""
        job_id = self.claim.lock.job.id if self.claim else None
        if await self.journal.write(
            "the heartbeat", lambda: self.store.heartbeat(self.owner, self.lease, job_id)
        ):
            await self._record_missed_ends()

    # -- jobs -------------------------------------------------------------------------------

    async def open_job(self, command: str, user: str, channel: str) -> JobRecord:
        """A job row holding the cluster lock, Busy naming the holder, or StoreUnavailable."""
        await self.reconciled.wait()  # the locks a previous run left are released first
        try:
            record = await retried(
                lambda: self.store.create_job(self.cluster.name, command, user, channel)
            )
        except sqlite3.Error as error:
            raise StoreUnavailable(
                f"the bot could not record the job in its database ({error})"
            ) from error
        await self._record_missed_ends()
        holder = self.claim.lock if self.claim else None
        if holder is None:
            # claimed before the store is asked: a command that comes meanwhile finds it held
            claim = self.claim = Claim(LockRecord(self.cluster.name, record, self.owner.id, now()))
            try:
                holder = await retried(
                    lambda: self.store.acquire(
                        self.cluster.name, record.id, self.owner.id, self.lease
                    )
                )
            except BaseException as error:
                self.claim = None
                if isinstance(error, sqlite3.Error):
                    raise StoreUnavailable(
                        f"the bot could not take the cluster lock in its database ({error})"
                    ) from error
                raise
            if holder is not None:
                self.claim = None
            else:
                claim.task = asyncio.current_task()
                if claim.cancelled_by:  # a cancel came while the lock was being taken
                    claim.task.cancel()  # type: ignore[union-attr]
        if holder is not None:
            self.metrics.job_ended(record.command, JobState.REFUSED)
            await self.journal.write(
                f"job {record.id}'s refusal",
                lambda: self.store.finish_job(
                    record.id, JobState.REFUSED, f"busy: job {holder.job.id} holds the lock"
                ),
            )
            raise Busy(holder)
        return record

    async def close_unstarted(self, record: JobRecord, state: JobState, outcome: str) -> None:
        """End a job that never reached `run` and free the lock, even if a cancel lands meanwhile."""
        await finish_uncancelled(
            self._record_end(record, state, outcome, None, self.journal, audit=False)
        )

    async def clear_launch(self) -> None:
        await self.journal.write(
            "the end of the launch settings", lambda: self.store.clear_launch(self.cluster.name)
        )

    async def launched_config(self) -> ClusterConfig:
        """The config the running cluster was launched with: the base one with the recipe and the
        serve settings the last successful `/spark up` applied (kept in the store, so also after
        a restart)."""
        recipe = await self.store.launched_recipe(self.cluster.name)
        if recipe is not None and recipe not in self.cluster.recipes:
            recipe = None  # the config no longer has it: the config's own setup
        return apply_serve(
            self.cluster.with_recipe(recipe), await self.store.launch(self.cluster.name)
        )

    async def run(
        self,
        record: JobRecord,
        plan: JobPlan,
        *,
        thread: str | None = None,
        reply_to: str | None = None,
    ) -> Job:
        """Post the parent (in `thread` if given), then feed it the events, finish it; the lock
        is released in every case. Nothing of the plan runs before the chat shows the parent: a
        job nobody can follow changes nothing (its requester hears why, privately: `reply_to`)."""
        events = plan.events
        claim = self.claim
        assert claim is not None and claim.lock.job.id == record.id, "run a job open_job opened"
        journal = Journal(tell=lambda failure: self._tell_unrecorded(record, failure, reply_to))

        async def on_posted(
            posted: Posted,
        ) -> None:  # in the outbox's task, whenever the chat takes it
            claim.lock = replace(
                claim.lock, job=replace(record, ts=posted.ts, link=view.link, thread=thread)
            )
            await journal.write(
                f"job {record.id}'s message",
                lambda: self.store.set_parent(
                    record.id, posted.ts, view.link, view.parent.model_dump_json(), thread
                ),
            )

        view = JobView(
            self.chat,
            record.channel,
            title=plan.title,
            text=f"<@{record.user}> ran `/spark {record.command}` · job #{record.id}",
            plan=plan.checkpoints,
            job_id=record.id,
            requester=record.user,
            settings=self.settings.jobs,
            deliveries=self.deliveries,
            on_posted=on_posted,
            on_checkpoint_shown=self._checkpoint_shown,
            thread=thread,
            reply_to=reply_to,
            on_parent=lambda m: journal.write(
                f"job {record.id}'s progress",
                lambda: self.store.save_parent(record.id, m.model_dump_json()),
            ),
        )
        job = Job(record, view, journal)
        started = asyncio.get_running_loop().time()
        recorded = False
        try:
            view.open()
            if await view.shown() is None:
                await events.aclose()  # never started: nothing was asked of the cluster
                job.end(JobState.REFUSED, f"refused: {self._not_shown(view)}")
                await self._tell_not_shown(record, view)
                return job
            if plan.on_start is not None:
                plan.on_start(job)
            # aclosing: a cancel that lands while the view records an event (the generator suspended
            # at a yield) must still run the controller's cleanup, now rather than at garbage collection
            async with aclosing(events):
                async for event in events:
                    job.events.append(event)
                    self.keep(record.id, event)
                    await view.event(event)
                    if plan.on_event:
                        await plan.on_event(job, event)
                    if isinstance(event, Failed):
                        self.metrics.failed(event.signature)
                        job.end(JobState.FAILED, f"failed: {event.title}: {event.summary}")
            if job.state is JobState.RUNNING:
                ending = plan.ending(job) or Ending(
                    JobState.SUCCEEDED,
                    "succeeded",
                    f"✔ {plan.success_footer(job)} in {_took(started)}",
                )
                job.end(ending.state, ending.outcome)
                # Recorded before the message turns green: a bot killed in between must not find
                # the success "interrupted" at its next start and say so over the green message.
                await finish_uncancelled(
                    self._record_end(record, job.state, job.outcome, view.link, journal)
                )
                recorded = True
                await view.finish(job.state, ending.footer)
        except asyncio.CancelledError:
            who = claim.cancelled_by
            if (
                job.state is JobState.RUNNING
            ):  # a failure already told everyone; cancelling only ends the cleanup
                if who:
                    job.end(JobState.CANCELLED, f"cancelled by {who}")
                    footer = f"✋ Cancelled by <@{who}> after {_took(started)}; the controller removed what it started"
                else:
                    job.end(JobState.SHUTDOWN, "cancelled: the bot is shutting down")
                    footer = (
                        "✋ Cancelled: the bot shut down; the controller removed what it started"
                    )
                await self._finish_view(view, job.state, footer)
            if who is None:
                raise
            asyncio.current_task().uncancel()  # type: ignore[union-attr]
        except Exception as error:
            log.exception("job %s crashed", record.id)
            job.end(JobState.CRASHED, f"error: {error}")
            await view.finish(job.state, f"✘ Error: {escape(error)}")
            await view.reply(
                Message(
                    title="✘ The job stopped on an error",
                    tone=job.state.tone,
                    mention=record.user,
                    text=f"<@{record.user}> {type(error).__name__}: {escape(error)}",
                ),
                broadcast=True,
            )
        finally:
            claim.task = (
                None  # no longer cancellable: a Cancel now must not cut the lock's release short
            )
            if (
                not job.state.ended
            ):  # neither an Exception nor a cancel: KeyboardInterrupt, SystemExit
                job.end(JobState.CRASHED, "stopped by a BaseException")
            if not recorded:
                await finish_uncancelled(
                    self._record_end(record, job.state, job.outcome, view.link, journal)
                )
        return job

    def _checkpoint_shown(self, event: CheckpointPassed) -> None:
        if event.logged_at is not None:  # (a checkpoint proven by an API answer has no log line)
            self.metrics.checkpoint_shown(event.logged_at)

    async def _finish_view(self, view: JobView, state: JobState, footer: str) -> None:
        await view.finish(state, footer)
        await view.reply(Message(title="✋ Cancelled", text=footer, tone=state.tone))

    async def _record_end(
        self,
        record: JobRecord,
        state: JobState,
        outcome: str,
        link: str | None,
        journal: Journal,
        *,
        audit: bool = True,
    ) -> None:
        """Release first: whatever happens next, the next command is not refused as busy. What the
        store misses is recorded after its next write that succeeds."""
        if self.claim is not None and self.claim.lock.job.id == record.id:
            self.claim = None
        self.metrics.job_ended(record.command, state)
        writes = [
            ("lock", lambda: self.store.release(self.cluster.name, record.id, self.owner.id)),
            ("end", lambda: self.store.finish_job(record.id, state, outcome)),
        ]
        if audit:
            writes.append(
                (
                    "audit",
                    lambda: self.store.audit(
                        record.user, record.channel, record.command, outcome, record.id, link
                    ),
                )
            )
        for name, write in writes:
            what = f"job {record.id}'s {name}"
            if not await journal.write(what, write):
                self._unrecorded.append((what, write))

    async def _record_missed_ends(self) -> None:
        missed, self._unrecorded = self._unrecorded, []
        for what, write in missed:
            if not await self.journal.write(what, write):
                self._unrecorded.append((what, write))

    def _not_shown(self, view: JobView) -> str:
        refusal = view.outbox.refusal
        if refusal is not None:
            return f"the chat answered `{refusal.code}`: {refusal.fix}"
        return (
            f"the chat did not take the job's message for {self.settings.jobs.delivery_timeout:g} s"
        )

    async def _tell_not_shown(self, record: JobRecord, view: JobView) -> None:
        what = f"job {record.id}'s refusal to {record.user}"
        message = Message(
            title=f"✘ `/spark {record.command}` did not start: the bot cannot post here",
            tone="failure",
            text=f"{escape(self._not_shown(view))}.\nNothing was started; the cluster is untouched.",
        )
        await self.deliver(
            what,
            self.chat.reply_private(record.channel, record.user, message, reply_to=view.reply_to),
        )

    async def _tell_unrecorded(
        self, record: JobRecord, failure: str, reply_to: str | None = None
    ) -> None:
        what = f"job {record.id}'s store failure to {record.user}"
        message = Message(
            title=f"⚠ The bot could not record job #{record.id}",
            tone="warning",
            text=f"{escape(failure)}\nThe cluster work goes on; the bot keeps the job's state in "
            "memory and records how it ended once its database can be written again.",
        )
        # in a task: the job that hit the failure does not wait for the chat
        self.deliveries.start(
            self.deliver(
                what,
                self.chat.reply_private(record.channel, record.user, message, reply_to=reply_to),
            ),
            what,
        )

    def cancel(self, user: str, job_id: int | None = None) -> LockRecord | None:
        """Cancel the job that holds the lock, wherever it is: preparing (asking the nodes, the
        user's confirmation) or running; the lock it held, or None when there is nothing to cancel."""
        claim = self.claim
        if (
            claim is None
            or (job_id is not None and claim.lock.job.id != job_id)
            or claim.cancelled_by
        ):
            return None
        claim.cancelled_by = user
        if claim.task is not None:
            claim.task.cancel()
        return claim.lock

    def cancelled_by(self, record: JobRecord) -> str | None:
        """Who cancelled `record`'s job, if a user did (None: a shutdown, or no cancel)."""
        claim = self.claim
        return claim.cancelled_by if claim is not None and claim.lock.job.id == record.id else None


def describe_state(report: StatusReport | None) -> str:
    if report is None:
        return "unknown (the nodes did not answer)"
    parts = [f"`{escape(c.node)}` {escape(c.status)}" for c in report.containers]
    health = {True: "API healthy", False: "API not healthy", None: "API not asked"}[
        report.api_healthy
    ]
    return ", ".join(parts) + f"; {health}"


def _took(started: float) -> str:
    return f"{asyncio.get_running_loop().time() - started:.1f}s"


def since(moment: datetime) -> str:
    minutes = int((now() - moment).total_seconds() // 60)
    return (
        f"{moment:%H:%M:%S} UTC ({minutes} min ago)"
        if minutes
        else f"{moment:%H:%M:%S} UTC (just now)"
    )
