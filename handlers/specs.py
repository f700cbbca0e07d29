"""Every `/spark` command, declared once: its arguments, one example, what it does, who may run it
(read or operate), whether it asks first, and how it answers or builds its job. The dispatcher
looks commands up here, `/spark help` is generated from here, and so is the CLI's help for the
commands both have (errbot's `@botcmd` and Bolt's listeners, as one table: `SPECS`).

A command is one of three kinds: a `reply` answers at once (in the adapter's acknowledgement),
an `answer` answers privately from a task (it asks the nodes), a `job` takes the cluster lock
and posts its progress in the channel.
"""

from __future__ import annotations

import asyncio
import logging
import re
import shutil
import tempfile
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Concatenate, ParamSpec, TypeVar

from pydantic import ValidationError

from cluster.bench.models import BenchReport
from cluster.config import ClusterConfig
from cluster.controller import Controller
from cluster.events import (
    BenchResult,
    DiagnosticsCollected,
    Event,
    FabricTestResult,
    LogTail,
    Ready,
    RecipesReport,
    StatusReport,
)
from cluster.operations.fabric_report import FabricTestReport
from cluster.progress.checkpoints import (
    BENCH,
    DROP_CACHES,
    FABRIC_TEST,
    SYNC_IMAGE,
    SYNC_MODEL,
    launch_plan,
    verify_plan,
)
from cluster.redact import redact
from handlers import commands as c
from handlers.bench_history import StoreHistory
from handlers.command_context import CommandContext, Invocation
from handlers.errors import ChatError, CommandError
from handlers.jobs import Job, JobPlan
from handlers.messages import Attachment, Message, escape
from handlers.question import Consent, Question
from handlers.render import INLINE_CHARS
from handlers.replace_running import ReplaceRunning
from handlers.settings import CommandsConfig, Level
from handlers.store import JobRecord

log = logging.getLogger(__name__)

# Each takes the command's context (handlers/command_context.py) and the parsed command; a spec
# holds them for any command (`declare()` checks at once that each is given its own command's type).
Reply = Callable[[CommandContext, c.BaseCommand, Invocation], Awaitable[Message]]
Answer = Callable[
    [CommandContext, c.BaseCommand, Invocation], Awaitable[Message | None]
]  # None: it posted itself
BuildJob = Callable[
    [CommandContext, c.BaseCommand, JobRecord, "Consent | None"], Awaitable[JobPlan]
]  # None: not confirmed
Ask = Callable[[CommandContext, c.BaseCommand], Awaitable["Question | None"]]

C = TypeVar("C", bound=c.BaseCommand)
P = ParamSpec("P")
R = TypeVar("R")


@dataclass(frozen=True)
class Confirmation:
    when: str  # for the help: when the command asks first
    ask: Ask  # None: no need to ask this time


@dataclass(frozen=True)
class CommandSpec:
    model: type[c.BaseCommand]
    summary: str
    level: Level
    arguments: str = ""
    example: str | None = None  # the words after `/spark`; without one, the bare command
    reply: Reply | None = None
    answer: Answer | None = None
    job: BuildJob | None = None
    confirmation: Confirmation | None = None
    asks_in_thread: str = ""  # for the help: when its job asks in its thread (its own code asks)

    def __post_init__(self) -> None:
        if sum(kind is not None for kind in (self.reply, self.answer, self.job)) != 1:
            raise TypeError(f"`{self.name}`: give exactly one of reply, answer and job")
        if self.confirmation is not None and (self.job is None or self.level != "operate"):
            # a confirmed command runs as a job under the cluster lock: only operate may lead there
            raise TypeError(f"`{self.name}`: only an operate-level job asks for confirmation")

    @property
    def name(self) -> str:
        return self.model.name

    @property
    def sample(self) -> str:
        """The words after `/spark` of its one example in the help."""
        return self.example or self.name

    def usage(self) -> str:
        """Its line of `/spark help`."""
        arguments = f" {self.arguments}" if self.arguments else ""
        when = self.confirmation.when if self.confirmation else self.asks_in_thread
        asks = f" ({when})" if when else ""
        return f"`/spark {self.name}{arguments}` {self.summary}{asks}, e.g. `/spark {self.sample}`"


def narrowed(
    model: type[C], run: Callable[Concatenate[CommandContext, C, P], Awaitable[R]]
) -> Callable[Concatenate[CommandContext, c.BaseCommand, P], Awaitable[R]]:
    """`run` for any command: given a command of another type, it raises instead of running."""

    async def checked(
        context: CommandContext, command: c.BaseCommand, /, *args: P.args, **kwargs: P.kwargs
    ) -> R:
        if not isinstance(command, model):
            raise TypeError(f"`{model.name}`'s code was given `{command.name}`")
        return await run(context, command, *args, **kwargs)

    return checked


def declare(
    model: type[C],
    *,
    summary: str,
    level: Level,
    arguments: str = "",
    example: str | None = None,
    reply: Callable[[CommandContext, C, Invocation], Awaitable[Message]] | None = None,
    answer: Callable[[CommandContext, C, Invocation], Awaitable[Message | None]] | None = None,
    job: Callable[[CommandContext, C, JobRecord, Consent | None], Awaitable[JobPlan]] | None = None,
    asks: str = "",
    ask: Callable[[CommandContext, C], Awaitable[Question | None]] | None = None,
    asks_in_thread: str = "",
) -> CommandSpec:
    """A command's spec, its code typed for its own command: `asks` (for the help: when it asks
    first) with `ask` (the question, or None when there is no need to ask this time), or
    `asks_in_thread` (for the help: when its running job asks in its thread)."""
    if (ask is None) != (not asks):
        raise TypeError(f"`{model.name}`: give both asks and ask, or neither")
    return CommandSpec(
        model,
        summary=summary,
        level=level,
        arguments=arguments,
        example=example,
        reply=narrowed(model, reply) if reply else None,
        answer=narrowed(model, answer) if answer else None,
        job=narrowed(model, job) if job else None,
        confirmation=Confirmation(asks, narrowed(model, ask)) if ask else None,
        asks_in_thread=asks_in_thread,
    )


# -- answered at once -------------------------------------------------------------------------


async def _help(d: CommandContext, command: c.Help, invocation: Invocation) -> Message:
    d.audit(invocation.user, invocation.channel, "help", "answered")
    return Message(
        title="/spark: run the vLLM cluster from here",
        text=f"Cluster `{d.cluster.name}`: {len(d.cluster.nodes)} node(s), "
        f"model `{d.cluster.serve.model}`.\n\n{chat_usage()}\n\n"
        f"{allowed_overrides(d.settings.commands)}\n{available_recipes(d.cluster)}",
    )


def allowed_overrides(commands: CommandsConfig) -> str:
    """What `/spark up` may change on this bot: the config's overrides and presets."""
    overrides = ", ".join(
        f"`{key}` {bound.min:g}..{bound.max:g}" for key, bound in commands.overrides.items()
    )
    presets = ", ".join(f"`{preset}`" for preset in commands.presets)
    return f"`/spark up` may override: {overrides or 'nothing'}; presets: {presets or 'none'}."


def available_recipes(cluster: ClusterConfig) -> str:
    names = ", ".join(f"`{name}`" for name in cluster.recipes)
    return f"Recipes (`/spark up RECIPE`): {names or 'none'}."


async def _cancel(d: CommandContext, command: c.Cancel, invocation: Invocation) -> Message:
    user, channel = invocation.user, invocation.channel
    lock = d.jobs.cancel(user)
    if lock is None:
        d.audit(user, channel, "cancel", "nothing to cancel")
        return Message(title="Nothing to cancel", text="No job is running on this cluster.")
    job = lock.job
    d.audit(user, channel, "cancel", f"cancelled job {job.id}", job.id, job.link)
    return Message(
        title=f"Cancelling job #{job.id}",
        text=f"`/spark {job.command}` by <@{job.user}>: stopping and cleaning up.",
    )


# -- answered from a task ---------------------------------------------------------------------


async def status_report(controller: Controller) -> StatusReport:
    return next(e for e in [e async for e in controller.status()] if isinstance(e, StatusReport))


async def _status(d: CommandContext, command: c.Status, invocation: Invocation) -> Message:
    report = await status_report(d.controller_for(d.cluster))
    lines = [
        f"`{escape(x.node)}` {escape(x.container)}: *{escape(x.status)}*"
        + (f" since {x.started_at:%Y-%m-%d %H:%M} UTC" if x.started_at and x.running else "")
        + (f" (recipe `{escape(x.recipe)}`)" if x.recipe else "")
        + (f" (recipe unknown: {escape(x.recipe_unknown)})" if x.recipe_unknown else "")
        for x in report.containers
    ]
    health = {True: "healthy", False: "NOT healthy", None: "not asked"}[report.api_healthy]
    job = d.jobs.claim.lock.job if d.jobs.claim else None
    busy = f"\nRunning: job #{job.id} `/spark {job.command}` by <@{job.user}>" if job else ""
    watching = "\nWatching: yes" if d.watch.watching else ""
    d.audit(invocation.user, invocation.channel, "status", "answered")
    return Message(
        title=f"Status of `{d.cluster.name}`",
        tone="success" if report.api_healthy else "neutral",
        text="\n".join(lines)
        + f"\nAPI: {health} ({escape(report.api_detail)})"
        + (f"\nvLLM: {escape(report.vllm_version)}" if report.vllm_version else "")
        + "".join(f"\nMemory `{escape(m.node)}`: {m.describe()}" for m in report.memory)
        + f"{busy}{watching}",
    )


def recipes_text(report: RecipesReport) -> str:
    """The recipes as chat lines: name, model, nodes, what it needs, which one runs."""
    if not report.recipes:
        return (
            "No recipes in the config: add `recipes:` to it, or files to a `recipes/` folder "
            "beside it."
        )
    lines = []
    for r in report.recipes:
        marks = " *running*" if r.running else ""
        marks += " (default)" if r.default else ""
        lines.append(
            f"• `{escape(r.name)}`{marks}: `{escape(r.model)}` on "
            f"{', '.join(map(escape, r.nodes))} "
            f"(TP {r.tensor_parallel_size} x PP {r.pipeline_parallel_size}, {escape(r.backend)})"
            + (f": {escape(r.description)}" if r.description else "")
            + f"\n    needs: {escape(r.needs)}"
        )
    if report.running is None:
        lines.append("No recipe is running.")
    if report.detail:
        lines.append(escape(report.detail))
    return "\n".join(lines)


async def _recipes(d: CommandContext, command: c.Recipes, invocation: Invocation) -> Message:
    report = next(
        e
        for e in [e async for e in d.controller_for(d.cluster).recipes()]
        if isinstance(e, RecipesReport)
    )
    d.audit(invocation.user, invocation.channel, "recipes", "answered")
    return Message(title=f"Recipes of `{d.cluster.name}`", text=recipes_text(report))


async def _logs(d: CommandContext, command: c.Logs, invocation: Invocation) -> Message | None:
    events = [e async for e in d.controller_for(d.cluster).logs(command.node, command.lines)]
    tail = next(e for e in events if isinstance(e, LogTail))
    d.audit(invocation.user, invocation.channel, command.text(), "answered")
    inline = tail.lines[-d.settings.jobs.inline_log_lines :]
    title = f"Last {len(tail.lines)} lines of `{escape(tail.container)}` on `{escape(tail.node)}`"
    if len(tail.lines) == len(inline) and sum(len(x) + 1 for x in inline) <= INLINE_CHARS:
        return Message(title=title, code=tail.lines or ["(empty)"])
    # Too long for a message: the last lines privately here, the whole tail as a file only the
    # asker sees (a log may show more than the channel should).
    try:
        # redacted here too, as the inline lines are when they are shown: a file is no less shown
        await d.chat.upload_private(
            invocation.user,
            Attachment(
                filename=f"{tail.node}-{tail.container}.log",
                title=title,
                content=redact("\n".join(tail.lines)) + "\n",
            ),
            title,
        )
        where = "the whole tail is in your direct messages with the bot, as a file"
    except ChatError as error:
        log.error("could not send the log file to %s: %s", invocation.user, error)
        where = "the whole tail could not be sent as a file; `spark-bot logs` on the bot's host shows it"
    return Message(
        title=title,
        text=f"Only you see this; {where}.",
        code=inline,
        code_title=f"last {len(inline)} lines",
    )


MAX_UPLOAD_BYTES = 1_000_000_000  # Slack's limit for one file; a bundle is bounded far below


async def _diag(d: CommandContext, command: c.Diag, invocation: Invocation) -> Message:
    """Collect the bundle, then upload it to the thread of the cluster's job (the one running,
    else the watched launch) when that job is in this channel, else to a new message here."""
    job = d.jobs.claim.lock.job if d.jobs.claim else await d.store.watch(d.cluster.name)
    events = d.jobs.events_of(job.id) if job else []
    note = (
        f"job #{job.id} `/spark {job.command}` by {job.user}: the {len(events)} events this bot "
        "still holds of it"
        if job
        else "no job of this cluster is running or watched"
    )
    workdir = await asyncio.to_thread(tempfile.mkdtemp, prefix="spark-diag-")
    try:
        found = [
            e
            async for e in d.controller_for(d.cluster).diagnostics(
                Path(workdir) / "bundle.tar.gz", events=events, events_note=note
            )
        ]
        collected = next(e for e in found if isinstance(e, DiagnosticsCollected))
        content = await asyncio.to_thread(Path(collected.path).read_bytes)
    finally:
        await asyncio.to_thread(shutil.rmtree, workdir, True)
    nodes = len(d.cluster.nodes)
    problems = collected.problems
    said = f"{len(collected.files)} files from {nodes} node(s)" + (
        f"; not collected: {escape('; '.join(problems))}" if problems else ""
    )
    if len(content) > MAX_UPLOAD_BYTES:
        d.audit(invocation.user, invocation.channel, "diag", "too large to upload")
        return Message(
            title="The diagnostics bundle is too large for the chat",
            tone="warning",
            text=f"{len(content)} bytes: `spark-bot diag --config …` on the bot's host writes it "
            "to a file; fewer `--lines` make it smaller.",
        )
    name = f"spark-diag-{d.cluster.name}-{job.id if job else 'cluster'}.tar.gz"
    comment = f"🩺 Diagnostics of `{d.cluster.name}` for <@{invocation.user}>: {said}"[:3000]
    try:
        if job is not None and job.thread_root and job.channel == invocation.channel:
            thread, where = job.thread_root, f"the thread of job #{job.id}"
        else:
            posted = await d.chat.post(
                invocation.channel,
                Message(
                    title=f"🩺 Diagnostics of `{d.cluster.name}`",
                    text=f"<@{invocation.user}> ran `/spark diag`: the bundle is in the thread.",
                ),
            )
            thread, where = posted.ts, "a new thread here"
        await d.chat.upload(
            invocation.channel,
            thread,
            Attachment(filename=name, title=name, content=content),
            comment,
        )
    except ChatError as error:
        log.error("could not upload the diagnostics bundle: %s", error)
        d.audit(invocation.user, invocation.channel, "diag", f"not uploaded: {error}")
        return Message(
            title="The diagnostics bundle could not be uploaded",
            tone="warning",
            text=f"{escape(error)}. `spark-bot diag --config …` on the bot's host writes it "
            "to a file.",
        )
    d.audit(
        invocation.user,
        invocation.channel,
        "diag",
        f"uploaded to {where}: {len(collected.files)} files",
        job.id if job else None,
    )
    return Message(title="Diagnostics bundle uploaded", text=f"In {where}: {said}.")


# -- jobs -------------------------------------------------------------------------------------


async def _up(
    d: CommandContext, command: c.Up, record: JobRecord, consent: Consent | None
) -> JobPlan:
    config = command.apply(d.cluster, d.settings.commands)
    applied = command.settings(d.settings.commands)
    # what runs is asked about by the launch itself, in the job's thread; the watch ends there
    running = ReplaceRunning(d, command, config)

    async def launched(job: Job, event: Event) -> None:
        if isinstance(event, Ready):
            await job.journal.write(
                f"job {job.record.id}'s launch settings",
                lambda: d.store.set_launch(d.cluster.name, job.record.id, applied, config.recipe),
            )
            await d.watch.start(job.record, job.view, job.journal)

    return JobPlan(
        title=f"🚀 Launch on `{d.cluster.name}`"
        + (f": recipe `{escape(config.recipe)}`" if config.recipe else ""),
        checkpoints=launch_plan(config),
        events=running.events(d.controller_for(config).up(confirm_replace=running.confirm)),
        on_event=launched,
        success_footer=_up_footer,
        on_start=running.started,
        ending=running.ending,
    )


def _up_footer(job: Job) -> str:
    ready = next((e for e in job.events if isinstance(e, Ready)), None)
    if ready and ready.sample and ready.sample.decode_tps:
        return f"Ready: `{ready.model}`, sample at {ready.sample.decode_tps:.1f} tok/s"
    return "Ready"


async def _verify(
    d: CommandContext, command: c.Verify, record: JobRecord, consent: Consent | None
) -> JobPlan:
    controller = d.controller_for(await d.jobs.launched_config())
    return JobPlan(
        title=f"🔍 Verify `{d.cluster.name}`",
        checkpoints=verify_plan(d.cluster),
        events=controller.verify(),
        success_footer=lambda job: "Verified",
    )


async def _bench(
    d: CommandContext, command: c.Bench, record: JobRecord, consent: Consent | None
) -> JobPlan:
    # the figures are filed under the setup the cluster runs: the launched config, overrides included
    controller = d.controller_for(await d.jobs.launched_config())
    # Compared with the last run of the same setup in the store, and recorded there, before
    # anyone sees it: the bot's one bench history.
    events = controller.bench(
        concurrency=command.concurrency,
        max_tokens=command.max_tokens,
        runs=command.runs,
        depth=command.depth,
        history=StoreHistory(d.store, d.jobs.journal, record.id, BenchReport),
    )
    return JobPlan(
        title=f"📊 Benchmark on `{d.cluster.name}`",
        checkpoints=[BENCH],
        events=events,
        on_event=_after_bench,
        success_footer=_bench_footer,
    )


async def _after_bench(job: Job, event: Event) -> None:
    if isinstance(event, BenchResult):
        job.view.items["bench"] = job.view.items["bench"].model_copy(
            update={"state": "done", "elapsed_s": event.elapsed_s}
        )


def _bench_footer(job: Job) -> str:
    result = next((e for e in job.events if isinstance(e, BenchResult)), None)
    if result and result.report.single and result.report.single.decode_tok_s:
        return f"Benchmark: {result.report.single.decode_tok_s:.1f} tok/s single stream"
    return "Benchmark done"


async def _fabric_test(
    d: CommandContext, command: c.FabricTest, record: JobRecord, consent: Consent | None
) -> JobPlan:
    # compared with the last run of this cluster's nodes in the store, and recorded there: the
    # bench history's table holds it too
    events = d.controller_for(d.cluster).fabric_test(
        seconds=command.seconds,
        history=StoreHistory(d.store, d.jobs.journal, record.id, FabricTestReport),
    )
    return JobPlan(
        title=f"🔌 Fabric test on `{d.cluster.name}`",
        checkpoints=[FABRIC_TEST],
        events=events,
        on_event=_after_fabric_test,
        success_footer=_fabric_test_footer,
    )


async def _after_fabric_test(job: Job, event: Event) -> None:
    if isinstance(event, FabricTestResult):
        job.view.items[FABRIC_TEST.id] = job.view.items[FABRIC_TEST.id].model_copy(
            update={"state": "done", "elapsed_s": event.elapsed_s}
        )


def _fabric_test_footer(job: Job) -> str:
    result = next((e for e in job.events if isinstance(e, FabricTestResult)), None)
    if result is None:
        return "Fabric test done"
    measured = [p for p in result.report.pairs if p.gbps is not None]
    return f"Fabric: {len(measured)} of {len(result.report.pairs)} pair(s) measured"


async def _ask_teardown(d: CommandContext, command: c.Down) -> Question:
    launched = d.cluster.launcher_containers
    also = "".join(
        f" It also stops recipe {' or '.join(f'`{escape(r)}`' for r in recipes)}'s launcher if "
        f"it still runs, and removes `{escape(name)}` on every node: spark-bot did not start "
        "it, that recipe's script did (the recipe names it)."
        for name, recipes in launched.items()
    )
    return Question(
        f"Stop and remove `{d.cluster.container.name}` on every node of `{d.cluster.name}`?" + also,
        "Tear down",
        "The vLLM server stops for everyone.",
    )


async def _down(
    d: CommandContext, command: c.Down, record: JobRecord, consent: Consent | None
) -> JobPlan:
    await d.watch.stop()
    await d.jobs.clear_launch()
    return JobPlan(
        title=f"🧹 Tear down `{d.cluster.name}`",
        checkpoints=[],
        events=d.controller_for(d.cluster).down(),
        success_footer=_down_footer,
    )


def _down_footer(job: Job) -> str:
    removed = sum(1 for e in job.events if getattr(e, "removed", False))
    return f"Removed {removed} container(s)"


async def _ask_sync_image(d: CommandContext, command: c.SyncImage) -> Question:
    head, image = d.cluster.head.name, d.cluster.container.image
    return Question(
        f"Copy `{escape(image)}` from `{escape(head)}` to every node of `{d.cluster.name}` "
        "where it is missing or has another image ID? The head's engine streams it (`docker "
        "save`) through the bot into each such node's engine (`docker load`); the image IDs are "
        "compared after.",
        "Sync image",
        f"Each node whose `{escape(image)}` differs gets the head's: its own is untagged (running "
        "containers keep theirs). Many GB may cross the network.",
    )


async def _sync_image(
    d: CommandContext, command: c.SyncImage, record: JobRecord, consent: Consent | None
) -> JobPlan:
    return JobPlan(
        title=f"📦 Sync image `{escape(d.cluster.container.image)}` on `{d.cluster.name}`",
        checkpoints=list(SYNC_IMAGE),
        events=d.controller_for(d.cluster).sync_image(),
        success_footer=lambda job: "Same image on every node",
    )


async def _ask_sync_model(d: CommandContext, command: c.SyncModel) -> Question:
    model = d.cluster.serve.model
    return Question(
        f"Copy `{escape(model)}` from a node of `{d.cluster.name}` that has it complete (the head "
        "when it does) to every node where it is missing or incomplete? rsync on that node copies "
        "its Hugging Face cache entry over the fabric, going on from any partial copy, never "
        "from the hub; every node is checked again after.",
        "Sync model",
        "Many GB may cross the fabric; files already complete on a node are kept.",
    )


async def _sync_model(
    d: CommandContext, command: c.SyncModel, record: JobRecord, consent: Consent | None
) -> JobPlan:
    return JobPlan(
        title=f"📦 Sync model `{escape(d.cluster.serve.model)}` on `{d.cluster.name}`",
        checkpoints=list(SYNC_MODEL),
        events=d.controller_for(d.cluster).sync_model(),
        success_footer=lambda job: "The model complete on every node",
    )


async def _ask_drop_caches(d: CommandContext, command: c.DropCaches) -> Question:
    argv = d.cluster.memory.drop_caches
    how = (
        f"with `{escape(' '.join(argv))}` (the config's memory.drop_caches, no shell)"
        if argv
        else "(the config names no command for it: the job will say how to grant one)"
    )
    return Question(
        f"Drop the page cache on every node of `{d.cluster.name}` {how}? The memory it holds "
        "becomes free for the next load.",
        "Drop caches",
        "Files are read from disk again when next used (the next load reads the model's files "
        "from disk); nothing running loses memory it holds.",
    )


async def _drop_caches(
    d: CommandContext, command: c.DropCaches, record: JobRecord, consent: Consent | None
) -> JobPlan:
    return JobPlan(
        title=f"🧽 Drop the page cache on `{d.cluster.name}`",
        checkpoints=list(DROP_CACHES),
        events=d.controller_for(d.cluster).drop_caches(),
        success_footer=lambda job: "Page cache dropped on every node",
    )


# -- the registry -----------------------------------------------------------------------------

SPECS: dict[str, CommandSpec] = {
    declared.name: declared
    for declared in [
        declare(
            c.Up,
            summary="launch the cluster and follow it checkpoint by checkpoint to Ready",
            level="operate",
            arguments="[RECIPE] [PRESET] [max_model_len=N] [gpu_memory_utilization=F] [max_num_seqs=N]",
            example="up max_model_len=32768",
            job=_up,
            asks_in_thread="asks in the thread when something is already running",
        ),
        declare(
            c.Verify,
            summary="re-check a running cluster, checkpoint by checkpoint",
            level="read",
            job=_verify,
        ),
        declare(
            c.Bench,
            summary="measure TTFT and tok/s (single stream, optionally a concurrency sweep and "
            "long prompts: TTFT, prefill and decode tok/s at each depth)",
            level="operate",
            arguments="[concurrency=1,2,4] [max_tokens=N] [runs=N] [depth=1k,4k,16k]",
            example="bench concurrency=1,2,4 max_tokens=256",
            job=_bench,
        ),
        declare(
            c.FabricTest,
            summary="measure the fabric's bandwidth between every pair of nodes (perftest's "
            "ib_write_bw, else nccl-tests' all_reduce_perf, whichever the nodes have) against the "
            "link's nominal speed and the last run",
            # operate, as bench: it takes the cluster's one-job lock, and loads the RoCE link
            # (and, with all_reduce_perf, the GPUs) a serving engine's collectives use
            level="operate",
            arguments="[seconds=N]",
            example="fabric-test seconds=5",
            job=_fabric_test,
        ),
        declare(
            c.Status,
            summary="a snapshot of the containers and the API's health",
            level="read",
            answer=_status,
        ),
        declare(
            c.Recipes,
            summary="the recipes: model, nodes, what each needs, which one runs",
            level="read",
            answer=_recipes,
        ),
        declare(
            c.Logs,
            summary="the tail of a node's container log",
            level="read",
            arguments="[head|worker|NODE] [LINES]",
            example="logs worker 200",
            answer=_logs,
        ),
        declare(
            c.Diag,
            summary="collect a diagnostics bundle from every node (logs, docker inspect, ray "
            "status, nvidia-smi, fabric, memory, config with secrets masked, the job's events) "
            "and upload it to the job's thread",
            level="read",
            answer=_diag,
        ),
        declare(
            c.Down,
            summary="stop and remove the containers on every node",
            level="operate",
            job=_down,
            asks="asks for confirmation",
            ask=_ask_teardown,
        ),
        declare(
            c.SyncImage,
            summary="copy the head's image to every node where it is missing or differs",
            level="operate",
            job=_sync_image,
            asks="asks for confirmation",
            ask=_ask_sync_image,
        ),
        declare(
            c.SyncModel,
            summary="copy the model from a node that has it complete to every node where it is "
            "missing or incomplete (rsync over the fabric, resumable, never from the hub)",
            level="operate",
            job=_sync_model,
            asks="asks for confirmation",
            ask=_ask_sync_model,
        ),
        declare(
            c.DropCaches,
            summary="drop every node's page cache with the config's command (memory.drop_caches),"
            " when the cache holds the memory the next load needs",
            level="operate",
            job=_drop_caches,
            asks="asks for confirmation",
            ask=_ask_drop_caches,
        ),
        declare(
            c.Cancel, summary="stop the running job and clean up", level="operate", reply=_cancel
        ),
        declare(c.Help, summary="this text", level="read", reply=_help),
    ]
}

_SAFE_WORD = re.compile(r"^[A-Za-z0-9._=,:-]+$")


def spec_for(command: c.BaseCommand) -> CommandSpec:
    return SPECS[command.name]


def chat_usage() -> str:
    return "\n".join(spec.usage() for spec in SPECS.values())


def parse_command(text: str, cluster: ClusterConfig, commands: CommandsConfig) -> c.BaseCommand:
    """`/spark …` text -> a validated command (no text: help), or a CommandError saying why.

    Nothing runs for text that does not parse: an unknown command, or any character outside a
    small safe set, before the command's own rules (commands.py)."""
    words = text.split()
    if not words:
        return c.Help()
    for word in words:
        if not _SAFE_WORD.match(word):
            raise CommandError(f"`{word[:40]}`: only letters, digits and . _ = , : - are accepted")
    name, args = words[0].lower(), words[1:]
    spec = SPECS.get(name)
    if spec is None:
        raise CommandError(f"unknown command `{name}`")
    try:
        return spec.model.parse(args, cluster, commands)
    except ValidationError as error:
        first = error.errors()[0]
        field = ".".join(str(p) for p in first["loc"]) or name
        raise CommandError(f"`{name}`: {field}: {first['msg']}") from None
