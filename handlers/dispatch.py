"""What `/spark …` means: parse, authorize, then answer at once or start a job.

Adapters call `command()` and `action()`; both return quickly (the reply to show the user
privately, or None) and leave any work to tasks the job manager owns. What each command is and
does is declared in handlers/specs.py; this module runs any of them the same way.
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
from collections.abc import AsyncIterator, Callable, Coroutine
from contextlib import asynccontextmanager
from dataclasses import dataclass, field, replace
from typing import Any

from cluster.config import ClusterConfig
from cluster.errors import NodeError, SparkBotError
from cluster.events import Event, Failed
from cluster.redact import redact
from handlers import commands as c
from handlers.access import Access
from handlers.chat import Chat, ConversationKind
from handlers.command_context import CommandContext, Invocation
from handlers.errors import Busy, CommandError, StoreUnavailable
from handlers.job_state import JobState
from handlers.jobs import ControllerFactory, Job, JobManager, JobPlan, since
from handlers.journal import retried
from handlers.log_context import for_this_task
from handlers.messages import (
    CANCEL_ACTION,
    CONFIRM_ACTION,
    KEEP_ACTION,
    REPLACE_ACTION,
    Message,
    escape,
)
from handlers.metrics import BotMetrics
from handlers.question import Consent, Question, yes_button
from handlers.reconcile import reconcile_within
from handlers.render import Delivery
from handlers.serving_watch import ServingWatch
from handlers.settings import BotSettings
from handlers.specs import CommandSpec, chat_usage, parse_command, spec_for
from handlers.store import ConfirmationRecord, JobRecord, Store
from handlers.thread_questions import Answer, ThreadQuestions

log = logging.getLogger(__name__)

OnEvent = Callable[[Job, Event], Coroutine[Any, Any, None]]
RECONCILE_WITHIN = 120.0  # seconds: beyond it jobs start without the state of the cluster


@dataclass(frozen=True)
class Action:
    """A button click, with the same context as a command (Slack: the action's response_url)."""

    user: str
    channel: str
    action: str
    value: str
    kind: ConversationKind = "channel"
    reply_to: str | None = field(default=None, repr=False)


class Dispatcher:
    def __init__(
        self,
        cluster: ClusterConfig,
        settings: BotSettings,
        chat: Chat,
        store: Store,
        controller_for: ControllerFactory,
        access: Access | None = None,
        metrics: BotMetrics | None = None,
    ):
        self.cluster = cluster
        self.metrics = metrics or BotMetrics()
        self.settings = settings
        self.chat = chat
        self.store = store
        self.access = access or Access(settings.access)
        self.jobs = JobManager(
            cluster, settings, chat, store, controller_for, self.metrics.cluster(cluster.name)
        )
        self.watch = ServingWatch(self.jobs)
        self.questions = ThreadQuestions(
            cluster.name, store, chat, self.jobs.deliveries, settings.commands.confirm_within
        )
        self.controller_for = controller_for
        self.deliver = Delivery(chat)
        self.context = CommandContext(
            cluster,
            settings,
            chat,
            store,
            self.jobs,
            self.watch,
            controller_for,
            self.audit,
            self.questions,
        )

    async def start(self) -> None:
        """Open the store and take it for this instance (AnotherInstance: another bot uses it);
        the reconciliation with what a previous run left runs in a task: connecting to the chat
        does not wait for the nodes to answer (jobs do)."""
        await self.store.open()
        try:
            await self.jobs.begin()
        except BaseException:
            await self.store.close()
            raise
        self.jobs.spawn(reconcile_within(self.jobs, self.watch, RECONCILE_WITHIN), "reconcile")

    async def stop(self) -> None:
        await self.jobs.stop()
        await self.store.close()

    # -- entry points -----------------------------------------------------------------------

    async def command(self, invocation: Invocation) -> Message | None:
        """The private reply to show at once (None: nothing to say); the work goes to a task.

        It never waits for the store or the cluster, so an adapter can acknowledge with its reply
        in time (Slack wants one within 3 s): every write and every answer happens in a task."""
        user, channel, text = invocation.user, invocation.channel, invocation.text.strip()
        try:
            command = parse_command(text, self.cluster, self.settings.commands)
        except CommandError as error:
            # redacted before it is cut short: a token cut in two no longer has a token's shape
            self.audit(user, channel, redact(text)[:200], f"invalid: {redact(str(error))}")
            return Message(
                title="That is not a /spark command I can run",
                tone="warning",
                text=f"{redact(str(error))}\n\n*Usage*\n{chat_usage()}",
            )
        return await self._start(command, invocation, consent=None)

    async def action(self, action: Action) -> Message | None:
        """A button click; the reply replaces the clicked private message (None: leave it)."""
        if action.action == CANCEL_ACTION:
            denied = self._denied(c.Cancel(), action.user, action.channel, action.kind)
            if denied:
                return denied
            lock = self.jobs.cancel(
                action.user, int(action.value) if action.value.isdigit() else None
            )
            outcome = f"cancelled job {lock.job.id}" if lock else "nothing to cancel"
            self.audit(action.user, action.channel, "cancel (button)", outcome)
            return None
        if action.action == CONFIRM_ACTION:
            return await self._confirmed(action)
        if action.action in {REPLACE_ACTION, KEEP_ACTION}:
            return await self._answered(action)
        log.warning("unknown action %s", action.action)
        return None

    async def idle(self) -> None:
        await self.jobs.idle()

    def audit(
        self,
        user: str,
        channel: str,
        command: str,
        outcome: str,
        job_id: int | None = None,
        link: str | None = None,
    ) -> None:
        """Add to the audit trail from a task: nothing waits for it, and a store that cannot write
        it costs a line in the log, not the command."""
        self.jobs.record(
            f"the audit of `{command}`",
            lambda: self.store.audit(user, channel, command, outcome, job_id, link),
        )

    # -- helpers ----------------------------------------------------------------------------

    async def _taken(self, action: Action) -> ConfirmationRecord | Message:
        """The question whose nonce the button carries, marked answered by this click if it was
        asked of this user, in this channel, about this cluster, is not answered yet and has not
        expired; else why not (or that it cannot be checked now), for the clicker."""
        try:
            record, taken = await retried(
                lambda: self.store.answer(
                    action.value, self.cluster.name, action.user, action.channel
                )
            )
        except sqlite3.Error as error:
            log.error("confirmation not checked: %s", error)
            return Message(
                title="This confirmation could not be checked",
                tone="warning",
                text=f"The bot's database cannot be read now ({escape(error)}); nothing was done. "
                "Click again in a moment.",
            )
        if not taken:
            return self._refuse(action, record, self._why_not(record, action))
        assert record is not None
        return record

    async def _answered(self, action: Action) -> Message | None:
        """A button of a question a running job asks in its thread: taken as a Confirm button is
        (the requester's, once, where asked, before it expires), their access checked again
        first; the job that waits gets the answer and edits the question (None: nothing to say)."""
        command = self.questions.command(action.value)
        if command is not None:
            denied = self._denied(command, action.user, action.channel, action.kind)
            if denied:
                return denied
        record = await self._taken(action)
        if isinstance(record, Message):
            return record
        yes = action.action == REPLACE_ACTION
        if not self.questions.answer(action.value, Answer(yes, action.user)):
            return self._refuse(action, record, "The job that asked it has ended.")
        self.audit(
            action.user,
            action.channel,
            f"answer {record.command}",
            "replace" if yes else "keep it",
            self.jobs.claim.lock.job.id if self.jobs.claim else None,
        )
        return None

    async def _confirmed(self, action: Action) -> Message:
        """A Confirm button: its value is the nonce of a question asked; what runs is the command
        stored with it, once, for the user it was asked of, in that channel, before it expires."""
        record = await self._taken(action)
        if isinstance(record, Message):
            return record
        try:
            command = parse_command(record.command, self.cluster, self.settings.commands)
        except CommandError as error:  # the config changed since it was asked
            return self._refuse(action, record, redact(str(error)))
        if spec_for(command).confirmation is None:  # (specs.py lets only operate-level jobs ask)
            return self._refuse(
                action, record, f"`/spark {command.text()}` is not a command that asks first."
            )
        reply = await self._start(
            command,
            Invocation(action.user, action.channel, command.text(), action.kind, action.reply_to),
            consent=Consent(record.replace_foreign),
        )
        return reply or Message(
            title=f"Confirmed: `/spark {command.text()}`", text=f"by <@{action.user}>"
        )

    def _refuse(self, action: Action, record: ConfirmationRecord | None, why: str) -> Message:
        self.audit(
            action.user,
            action.channel,
            f"confirm {record.command if record else '(unknown)'}",
            f"refused: {why}",
        )
        return Message(
            title="This confirmation is no longer valid",
            tone="warning",
            text=f"{why} Nothing was done; run the command again to be asked anew.",
        )

    def _why_not(self, record: ConfirmationRecord | None, action: Action) -> str:
        """Why a question cannot be answered by this click (it was not taken)."""
        if record is None:
            return "This button does not belong to a question this bot asked."
        if record.used_at is not None:
            return (
                f"It was already answered by <@{record.used_by}> at {record.used_at:%H:%M:%S} UTC."
            )
        if record.cluster != self.cluster.name:
            return f"It was asked about cluster `{escape(record.cluster)}`, not `{escape(self.cluster.name)}`."
        if record.user != action.user or record.channel != action.channel:
            return f"It was asked of <@{record.user}> in <#{record.channel}>: only they can answer it there."
        asked_for = (record.expires - record.created).total_seconds()
        return f"It expired at {record.expires:%H:%M:%S} UTC, {asked_for:g} s after it was asked."

    async def _start(
        self, command: c.BaseCommand, invocation: Invocation, *, consent: Consent | None
    ) -> Message | None:
        spec = spec_for(command)
        denied = self._denied(command, invocation.user, invocation.channel, invocation.kind)
        if denied:
            return denied
        if spec.reply is not None:
            return await spec.reply(self.context, command, invocation)
        self.jobs.spawn(
            self._run(spec, command, invocation, consent),
            f"{'command' if consent is None else 'confirmed'}-{command.name}",
        )
        return None

    def _denied(
        self, command: c.BaseCommand, user: str, channel: str, kind: ConversationKind
    ) -> Message | None:
        decision = self.access.check(spec_for(command).level, user, channel, command.name, kind)
        if decision.allowed:
            return None
        self.audit(user, channel, command.text(), "denied")
        return Message(title="Not allowed", text=decision.reason, tone="warning")

    async def _reply(self, invocation: Invocation, message: Message) -> None:
        await self.deliver(
            f"private reply to {invocation.user}",
            self.chat.reply_private(
                invocation.channel, invocation.user, message, reply_to=invocation.reply_to
            ),
        )

    async def _run(
        self,
        spec: CommandSpec,
        command: c.BaseCommand,
        invocation: Invocation,
        consent: Consent | None,
    ) -> None:
        if spec.answer is None:
            await self._job(spec, command, invocation, consent)
            return
        try:
            reply = await spec.answer(self.context, command, invocation)
        except Exception as error:
            log.warning(
                "/spark %s failed: %s",
                command.text(),
                error,
                exc_info=not isinstance(error, SparkBotError),
            )
            self.audit(invocation.user, invocation.channel, command.text(), f"error: {error}")
            reply = problem_message(f"`/spark {command.text()}` could not answer", error)
        if reply is not None:
            await self._reply(invocation, reply)

    async def _job(
        self,
        spec: CommandSpec,
        command: c.BaseCommand,
        invocation: Invocation,
        consent: Consent | None,
    ) -> None:
        record = await self._open_job(command, invocation)
        if record is None:
            return
        for_this_task(job_id=record.id)  # this task runs the job: its records name it
        plan = None
        async with self._closed_unless_run(record, command, invocation):
            plan = await self._prepare(spec, command, invocation, record, consent)
        if plan is not None:
            await self.jobs.run(record, plan, reply_to=invocation.reply_to)

    async def _open_job(self, command: c.BaseCommand, invocation: Invocation) -> JobRecord | None:
        """The job's row, holding the cluster lock; None when it could not start (the asker is
        told why: another job holds the lock, or the store cannot record it)."""
        try:
            return await self.jobs.open_job(command.text(), invocation.user, invocation.channel)
        except Busy as busy:
            holder = busy.holder.job
            link = f" · <{holder.link}|the job's thread>" if holder.link else ""
            self.audit(
                invocation.user,
                invocation.channel,
                command.text(),
                f"refused: busy with job {holder.id}",
            )
            await self._reply(
                invocation,
                Message(
                    title="Busy: one job at a time on this cluster",
                    tone="warning",
                    text=f"Job #{holder.id} `/spark {holder.command}` by <@{holder.user}> since "
                    f"{since(busy.holder.since)}{link}. `/spark cancel` stops it.",
                ),
            )
        except StoreUnavailable as error:
            log.error("/spark %s not started: %s", command.text(), error)
            await self._reply(
                invocation,
                Message(
                    title=f"✘ `/spark {command.text()}` did not start",
                    tone="failure",
                    text=f"{escape(error)}, so it started nothing.\n*Try:* again in a moment; if this goes on, "
                    "the bot's log says what holds or fills its database.",
                ),
            )
        return None

    @asynccontextmanager
    async def _closed_unless_run(
        self, record: JobRecord, command: c.BaseCommand, invocation: Invocation
    ) -> AsyncIterator[None]:
        """Around what a job does before `jobs.run` owns it (and releases its lock in every
        case): a failure or a cancel there closes the job, frees the lock and tells the asker; a
        user's cancel or a failure ends here, a shutdown goes on up."""
        try:
            yield
        except BaseException as error:
            who = self.jobs.cancelled_by(record)
            if isinstance(error, asyncio.CancelledError) and who:
                asyncio.current_task().uncancel()  # type: ignore[union-attr] # a user's cancel ends the job here
                outcome = f"cancelled by {who} before it started"
                await self.jobs.close_unstarted(record, JobState.CANCELLED, outcome)
                self.audit(invocation.user, invocation.channel, command.text(), outcome, record.id)
                await self._reply(
                    invocation,
                    Message(
                        title=f"✋ `/spark {command.text()}` cancelled before it started",
                        tone="warning",
                        text=f"Cancelled by <@{who}>; nothing was started.",
                    ),
                )
                return
            outcome = (
                "cancelled before it started"
                if isinstance(error, asyncio.CancelledError)
                else f"error: {error}"
            )
            await self.jobs.close_unstarted(
                record,
                JobState.FAILED if isinstance(error, Exception) else JobState.SHUTDOWN,
                outcome,
            )
            if not isinstance(error, Exception):
                raise
            log.warning(
                "job %s (/spark %s) could not start: %s",
                record.id,
                command.text(),
                error,
                exc_info=not isinstance(error, SparkBotError),
            )
            self.audit(invocation.user, invocation.channel, command.text(), outcome, record.id)
            await self._reply(
                invocation,
                problem_message(
                    f"`/spark {command.text()}` did not start",
                    error,
                    done="Nothing was started; the cluster is free.",
                ),
            )

    async def _prepare(
        self,
        spec: CommandSpec,
        command: c.BaseCommand,
        invocation: Invocation,
        record: JobRecord,
        consent: Consent | None,
    ) -> JobPlan | None:
        """Everything before the job runs: the confirmation, then the spec's own preparation (the
        watch, the config); None: the user was asked to confirm and the job is closed."""
        if consent is None and spec.confirmation is not None:
            question = await spec.confirmation.ask(self.context, command)
            if question is not None:
                nonce = await retried(
                    lambda: self.store.ask(
                        self.cluster.name,
                        invocation.user,
                        invocation.channel,
                        command.text(),
                        question.text,
                        question.consent.replace_foreign,
                        self.settings.commands.confirm_within,
                    )
                )
                await self.jobs.close_unstarted(
                    record, JobState.UNCONFIRMED, "asked for confirmation"
                )
                self.audit(
                    invocation.user,
                    invocation.channel,
                    command.text(),
                    "asked for confirmation",
                    record.id,
                )
                await self._reply(invocation, _confirm(nonce, question))
                return None
        assert spec.job is not None
        plan = await spec.job(self.context, command, record, consent)
        return replace(plan, on_event=self._offering_remedies(invocation, plan))

    def _offering_remedies(self, invocation: Invocation, plan: JobPlan) -> OnEvent:
        """The plan's own reaction to each event, then, for a failure a command fixes, that
        command offered in the thread: its button asks the requester once, like any question."""
        then = plan.on_event

        async def on_event(job: Job, event: Event) -> None:
            if then is not None:
                await then(job, event)
            if isinstance(event, Failed) and event.remedy is not None:
                await self._offer(job, invocation, event.remedy)

        return on_event

    async def _offer(self, job: Job, invocation: Invocation, remedy: str) -> None:
        command = parse_command(remedy, self.cluster, self.settings.commands)
        confirmation = spec_for(command).confirmation
        assert confirmation is not None, "a remedy is a command that asks first"
        question = await confirmation.ask(self.context, command)
        assert question is not None
        try:
            nonce = await retried(
                lambda: self.store.ask(
                    self.cluster.name,
                    invocation.user,
                    invocation.channel,
                    command.text(),
                    question.text,
                    (),
                    self.settings.commands.confirm_within,
                )
            )
        except sqlite3.Error as error:  # the failure's fix already names the command
            log.error("could not offer `/spark %s` after job %s: %s", remedy, job.record.id, error)
            return
        self.audit(invocation.user, invocation.channel, command.text(), "offered", job.record.id)
        offer = _confirm(nonce, question)
        await job.view.reply(
            offer.model_copy(
                update={
                    "title": f"Fix it: /spark {command.text()}",
                    "text": f"<@{invocation.user}> {question.text} "
                    f"(the button is yours for {self.settings.commands.confirm_within:g} s)",
                }
            )
        )


def problem_message(title: str, error: BaseException, *, done: str = "") -> Message:
    """What failed, where, and what to try, for the person who asked (privately)."""
    then = f"\n{done}" if done else ""
    if isinstance(error, NodeError):
        text = (
            f"Node `{escape(error.node)}`: {escape(error.problem)}.{then}\n"
            f"*Try:* {escape(error.fix)}"
        )
    elif isinstance(error, SparkBotError):
        text = (
            f"{escape(error)}{then}\n*Try:* fix that, then run the command again; "
            "`/spark status` shows each node."
        )
    else:
        text = (
            f"{type(error).__name__}: {escape(error)}{then}\n*Try:* `/spark status` to see the nodes, "
            "then run the command again; the bot's log has the details."
        )
    return Message(title=f"✘ {title}"[:150], text=text, tone="failure")


def _confirm(nonce: str, question: Question) -> Message:
    return Message(
        title="Confirm",
        text=question.text,
        tone="warning",
        buttons=[yes_button(question, CONFIRM_ACTION, nonce, deny="Keep it")],
    )
