"""What `/spark …` means: parse, authorize, then answer at once or start a job.

Adapters call `command()` and `action()`; both return quickly (the reply to show the user
privately, or None) and leave any work to tasks the job manager owns.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable
from contextlib import aclosing
from dataclasses import dataclass
from typing import Any

from cluster.bench.history import compare
from cluster.bench.models import BenchReport
from cluster.checkpoints import BENCH, launch_plan, verify_plan
from cluster.config import ClusterConfig
from cluster.errors import NodeError, SparkBotError
from cluster.events import BenchResult, Event, LogTail, Ready, StatusReport
from cluster.redact import redact
from handlers import commands as c
from handlers.access import Access
from handlers.chat import Chat
from handlers.jobs import (
    Busy,
    ControllerFactory,
    Job,
    JobManager,
    describe_state,
    since,
)
from handlers.messages import (
    CANCEL_ACTION,
    CONFIRM_ACTION,
    Attachment,
    Button,
    Confirm,
    Message,
    escape,
)
from handlers.render import INLINE_CHARS, Delivery
from handlers.settings import BotSettings
from handlers.store import JobRecord, Store

log = logging.getLogger(__name__)

@dataclass(frozen=True)
class Invocation:
    user: str
    channel: str
    text: str


@dataclass(frozen=True)
class Action:
    user: str
    channel: str
    action: str
    value: str


class Dispatcher:
    def __init__(self, cluster: ClusterConfig, settings: BotSettings, chat: Chat, store: Store,
                 controller_for: ControllerFactory, access: Access | None = None):
        self.cluster = cluster
        self.settings = settings
        self.chat = chat
        self.store = store
        self.access = access or Access(settings.access)
        self.jobs = JobManager(cluster, settings, chat, store, controller_for)
        self.controller_for = controller_for
        self.deliver = Delivery(chat)

    async def start(self) -> None:
        await self.store.open()
        await self.jobs.reconcile()

    async def stop(self) -> None:
        await self.jobs.stop()
        await self.store.close()

    # -- entry points -----------------------------------------------------------------------

    async def command(self, invocation: Invocation) -> Message | None:
        """The private reply to show at once (None: nothing to say); the work goes to a task."""
        user, channel, text = invocation.user, invocation.channel, invocation.text.strip()
        try:
            command = c.parse_command(text, self.cluster, self.settings.commands)
        except c.CommandError as error:
            # redacted before it is cut short: a token cut in two no longer has a token's shape
            await self.store.audit(user, channel, redact(text)[:200], f"invalid: {redact(str(error))}")
            return Message(title="That is not a /spark command I can run", tone="warning",
                           text=f"{redact(str(error))}\n\n*Usage*\n{c.USAGE}")
        denied = self._denied(command, user, channel)
        if denied:
            return denied
        if isinstance(command, c.Help):
            await self.store.audit(user, channel, "help", "answered")
            return Message(title="/spark: run the vLLM cluster from here",
                           text=f"Cluster `{self.cluster.name}`: {len(self.cluster.nodes)} node(s), "
                                f"model `{self.cluster.serve.model}`.\n\n{c.USAGE}")
        if isinstance(command, c.Cancel):
            return await self._cancel(user, channel)
        self.jobs.spawn(self._run(command, invocation, confirmed=False), f"command-{command.name}")
        return None

    async def action(self, action: Action) -> Message | None:
        """A button click; the reply replaces the clicked private message (None: leave it)."""
        if action.action == CANCEL_ACTION:
            denied = self._denied(c.Cancel(), action.user, action.channel)
            if denied:
                return denied
            job = self.jobs.cancel(action.user, int(action.value) if action.value.isdigit() else None)
            outcome = f"cancelled job {job.record.id}" if job else "nothing to cancel"
            await self.store.audit(action.user, action.channel, "cancel (button)", outcome)
            return None
        if action.action == CONFIRM_ACTION:
            try:
                command = c.parse_command(action.value, self.cluster, self.settings.commands)
            except c.CommandError as error:
                return Message(title="This confirmation is no longer valid", text=redact(str(error)), tone="warning")
            denied = self._denied(command, action.user, action.channel)
            if denied:
                return denied
            invocation = Invocation(action.user, action.channel, command.text())
            self.jobs.spawn(self._run(command, invocation, confirmed=True), f"confirmed-{command.name}")
            return Message(title=f"Confirmed: `/spark {command.text()}`", text=f"by <@{action.user}>")
        log.warning("unknown action %s", action.action)
        return None

    async def idle(self) -> None:
        await self.jobs.idle()

    # -- helpers ----------------------------------------------------------------------------

    def _denied(self, command: c.Command, user: str, channel: str) -> Message | None:
        decision = self.access.check(command.level, user, channel, command.name)
        if decision.allowed:
            return None
        self.jobs.spawn(self.store.audit(user, channel, command.text(), "denied"), "audit")
        return Message(title="Not allowed", text=decision.reason, tone="warning")

    async def _reply(self, invocation: Invocation, message: Message) -> None:
        await self.deliver(f"private reply to {invocation.user}",
                           self.chat.reply_private(invocation.channel, invocation.user, message))

    async def _cancel(self, user: str, channel: str) -> Message:
        job = self.jobs.cancel(user)
        if job is None:
            await self.store.audit(user, channel, "cancel", "nothing to cancel")
            return Message(title="Nothing to cancel", text="No job is running on this cluster.")
        await self.store.audit(user, channel, "cancel", f"cancelled job {job.record.id}", job.record.id,
                               job.view.link)
        return Message(title=f"Cancelling job #{job.record.id}",
                       text=f"`/spark {job.record.command}` by <@{job.record.user}>: stopping and cleaning up.")

    async def _run(self, command: c.Command, invocation: Invocation, *, confirmed: bool) -> None:
        if isinstance(command, c.Status | c.Logs):
            try:
                if isinstance(command, c.Status):
                    await self._status(invocation)
                else:
                    await self._logs(command, invocation)
            except Exception as error:  # noqa: BLE001 - the asker hears what went wrong, not silence
                log.warning("/spark %s failed: %s", command.text(), error,
                            exc_info=not isinstance(error, SparkBotError))
                await self.store.audit(invocation.user, invocation.channel, command.text(), f"error: {error}")
                await self._reply(invocation, problem_message(f"`/spark {command.text()}` could not answer", error))
        else:
            await self._job(command, invocation, confirmed)

    async def _status(self, invocation: Invocation) -> None:
        events = [e async for e in self.controller_for(self.cluster).status()]
        report = next(e for e in events if isinstance(e, StatusReport))
        lines = [f"`{escape(x.node)}` {escape(x.container)}: *{escape(x.status)}*"
                 + (f" since {x.started_at:%Y-%m-%d %H:%M} UTC" if x.started_at and x.running else "")
                 for x in report.containers]
        health = {True: "healthy", False: "NOT healthy", None: "not asked"}[report.api_healthy]
        job = self.jobs.current
        busy = (f"\nRunning: job #{job.record.id} `/spark {job.record.command}` by <@{job.record.user}>"
                if job else "")
        watching = "\nWatching: yes" if self.jobs.watching else ""
        await self.store.audit(invocation.user, invocation.channel, "status", "answered")
        await self._reply(invocation, Message(
            title=f"Status of `{self.cluster.name}`", tone="success" if report.api_healthy else "neutral",
            text="\n".join(lines) + f"\nAPI: {health} ({escape(report.api_detail)})"
                 + (f"\nvLLM: {escape(report.vllm_version)}" if report.vllm_version else "")
                 + f"{busy}{watching}"))

    async def _logs(self, command: c.Logs, invocation: Invocation) -> None:
        events = [e async for e in self.controller_for(self.cluster).logs(command.node, command.lines)]
        tail = next(e for e in events if isinstance(e, LogTail))
        await self.store.audit(invocation.user, invocation.channel, command.text(), "answered")
        inline = tail.lines[-self.settings.jobs.inline_log_lines:]
        title = f"Last {len(tail.lines)} lines of `{escape(tail.container)}` on `{escape(tail.node)}`"
        if len(tail.lines) == len(inline) and sum(len(x) + 1 for x in inline) <= INLINE_CHARS:
            await self._reply(invocation, Message(title=title, code=tail.lines or ["(empty)"]))
            return
        # Too long for a message: a short post in the channel, the whole log as a file in its thread.
        posted = await self.deliver("logs message", self.chat.post(invocation.channel, Message(
            title=title, text=f"Asked by <@{invocation.user}>; the whole tail is in the thread as a file.",
            code=inline, code_title=f"last {len(inline)} lines")))
        if posted:
            await self.deliver("logs file", self.chat.upload(
                invocation.channel, posted.ts,
                Attachment(filename=f"{tail.node}-{tail.container}.log", title=title,
                           content="\n".join(tail.lines) + "\n"), title))

    async def _job(self, command: c.Command, invocation: Invocation, confirmed: bool) -> None:
        try:
            record = await self.jobs.open_job(command.text(), invocation.user, invocation.channel)
        except Busy as busy:
            holder = busy.holder.job
            link = f" · <{holder.link}|the job's thread>" if holder.link else ""
            await self.store.audit(invocation.user, invocation.channel, command.text(),
                                   f"refused: busy with job {holder.id}")
            await self._reply(invocation, Message(
                title="Busy: one job at a time on this cluster", tone="warning",
                text=f"Job #{holder.id} `/spark {holder.command}` by <@{holder.user}> since "
                     f"{since(busy.holder.since)}{link}. `/spark cancel` stops it."))
            return
        # From here the job holds the lock: until `jobs.run` owns it (and releases it in every
        # case), any failure or cancel must close the job and free the lock here.
        try:
            start = await self._prepare(command, invocation, record, confirmed)
        except BaseException as error:
            outcome = "cancelled before it started" if isinstance(error, asyncio.CancelledError) else f"error: {error}"
            await self.jobs.close_unstarted(record, "failed" if isinstance(error, Exception) else "cancelled",
                                            outcome)
            if not isinstance(error, Exception):
                raise
            log.warning("job %s (/spark %s) could not start: %s", record.id, command.text(), error,
                        exc_info=not isinstance(error, SparkBotError))
            await self.store.audit(invocation.user, invocation.channel, command.text(), outcome, record.id)
            await self._reply(invocation, problem_message(
                f"`/spark {command.text()}` did not start", error, done="Nothing was started; the cluster is free."))
            return
        if start is not None:
            await start()

    async def _prepare(self, command: c.Command, invocation: Invocation, record: JobRecord,
                       confirmed: bool) -> Callable[[], Any] | None:
        """Everything before the job runs: the confirmation, the watch, the config; returns what
        starts it (None: the user was asked to confirm and the job is closed)."""
        if not confirmed:
            question = await self._confirmation(command)
            if question is not None:
                await self.jobs.close_unstarted(record, "unconfirmed", "asked for confirmation")
                await self.store.audit(invocation.user, invocation.channel, command.text(),
                                       "asked for confirmation", record.id)
                await self._reply(invocation, question)
                return None
        if isinstance(command, c.Up):
            await self.jobs.stop_watch()
            await self.store.clear_launch(self.cluster.name)  # what runs now is no longer that launch
            config = command.apply(self.cluster, self.settings.commands)
            applied = command.settings(self.settings.commands)

            async def launched(job: Job, event: Event) -> None:
                if isinstance(event, Ready):
                    await self.store.set_launch(self.cluster.name, job.record.id, applied)
                    await self.jobs.start_watch(job.record, job.view)

            controller = self.controller_for(config)
            return lambda: self.jobs.run(record, title=f"🚀 Launch on `{self.cluster.name}`",
                                         plan=launch_plan(config), events=controller.up(replace=confirmed),
                                         on_event=launched, success_footer=_up_footer)
        if isinstance(command, c.Verify):
            controller = self.controller_for(await self.jobs.launched_config())
            return lambda: self.jobs.run(record, title=f"🔍 Verify `{self.cluster.name}`",
                                         plan=verify_plan(self.cluster), events=controller.verify(),
                                         success_footer=lambda job: "Verified")
        if isinstance(command, c.Bench):
            # the figures are filed under the setup the cluster runs: the launched config, overrides included
            controller = self.controller_for(await self.jobs.launched_config())
            events = controller.bench(concurrency=command.concurrency, max_tokens=command.max_tokens,
                                      runs=command.runs, history=None)
            return lambda: self.jobs.run(record, title=f"📊 Benchmark on `{self.cluster.name}`", plan=[BENCH],
                                         events=self._compared(events, record.id), on_event=self._after_bench,
                                         success_footer=_bench_footer)
        if isinstance(command, c.Down):
            await self.jobs.stop_watch()
            await self.store.clear_launch(self.cluster.name)
            controller = self.controller_for(self.cluster)
            return lambda: self.jobs.run(record, title=f"🧹 Tear down `{self.cluster.name}`", plan=[],
                                         events=controller.down(), success_footer=_down_footer)
        raise TypeError(f"no job for {command.name}")

    async def _compared(self, events: AsyncIterator[Event], job_id: int) -> AsyncIterator[Event]:
        """Bench events, the result compared with the last of the same setup in the store (the
        bot's one bench history) and recorded there before anyone sees it."""
        async with aclosing(events):
            async for event in events:
                if isinstance(event, BenchResult):
                    report = event.report
                    previous = await self.store.previous_bench(report.setup_key)
                    if previous is not None:
                        earlier = BenchReport.model_validate_json(previous)
                        report = report.model_copy(update={"comparisons": compare(report, earlier)})
                        event = event.model_copy(update={"report": report})
                    await self.store.add_bench(job_id, report.model_dump_json())
                yield event

    async def _confirmation(self, command: c.Command) -> Message | None:
        if isinstance(command, c.Down):
            return _confirm(command, f"Stop and remove `{self.cluster.container.name}` on every node of "
                            f"`{self.cluster.name}`?", "Tear down", "The vLLM server stops for everyone.")
        if isinstance(command, c.Up):
            events = [e async for e in self.controller_for(self.cluster).status()]
            report = next(e for e in events if isinstance(e, StatusReport))
            if any(x.present for x in report.containers):
                return _confirm(command, f"`{self.cluster.name}` is already running ({describe_state(report)}). "
                                "Replace it?", "Replace", "The running server is removed and launched again.")
        return None

    async def _after_bench(self, job: Job, event: Event) -> None:
        if isinstance(event, BenchResult):
            job.view.items["bench"] = job.view.items["bench"].model_copy(
                update={"state": "done", "elapsed_s": event.elapsed_s})


def problem_message(title: str, error: BaseException, *, done: str = "") -> Message:
    """What failed, where, and what to try, for the person who asked (privately)."""
    then = f"\n{done}" if done else ""
    if isinstance(error, NodeError):
        text = (f"Node `{escape(error.node)}`: {escape(error.problem)}.{then}\n"
                f"*Try:* {escape(error.fix)}")
    elif isinstance(error, SparkBotError):
        text = (f"{escape(error)}{then}\n*Try:* fix that, then run the command again; "
                "`/spark status` shows each node.")
    else:
        text = (f"{type(error).__name__}: {escape(error)}{then}\n*Try:* `/spark status` to see the nodes, "
                "then run the command again; the bot's log has the details.")
    return Message(title=f"✘ {title}"[:150], text=text, tone="failure")


def _confirm(command: c.Command, question: str, label: str, consequence: str) -> Message:
    return Message(
        title="Confirm", text=question, tone="warning",
        buttons=[Button(label=label, action=CONFIRM_ACTION, value=command.text(), style="danger",
                        confirm=Confirm(title=f"{label}?", text=consequence, confirm=label, deny="Keep it"))],
    )


def _up_footer(job: Job) -> str:
    ready = next((e for e in job.events if isinstance(e, Ready)), None)
    if ready and ready.sample and ready.sample.decode_tps:
        return f"Ready: `{ready.model}`, sample at {ready.sample.decode_tps:.1f} tok/s"
    return "Ready"


def _bench_footer(job: Job) -> str:
    result = next((e for e in job.events if isinstance(e, BenchResult)), None)
    if result and result.report.single and result.report.single.decode_tok_s:
        return f"Benchmark: {result.report.single.decode_tok_s:.1f} tok/s single stream"
    return "Benchmark done"


def _down_footer(job: Job) -> str:
    removed = sum(1 for e in job.events if getattr(e, "removed", False))
    return f"Removed {removed} container(s)"
