"""Controller events -> chat messages for one job: the parent message as a live checklist edited
in place (throttled by its outbox), a thread reply per checkpoint, and a loud notification on failure.

Text uses a small markup every adapter understands: *bold*, `code`, <@USER>, <#CHANNEL>,
<URL|label>; what the cluster says (log lines, errors, summaries, model output) enters it only
through `escape()`. Secrets never reach here: the controller redacts log lines before they leave it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from cluster.bench.models import BenchReport
from cluster.events import (
    BenchResult,
    CheckpointPassed,
    Event,
    FabricTestResult,
    Failed,
    Progress,
    Ready,
    Removed,
)
from cluster.operations.fabric_report import FabricTestReport, lane_line
from cluster.progress.checkpoints import Checkpoint
from cluster.redact import redact
from handlers.chat import Chat, Posted
from handlers.job_state import JobState
from handlers.messages import (
    CANCEL_ACTION,
    Attachment,
    Button,
    ChecklistItem,
    Confirm,
    Message,
    Tone,
    escape,
)
from handlers.outbox import Deliveries, Outbox
from handlers.settings import JobsConfig

log = logging.getLogger(__name__)
R = TypeVar("R")

INLINE_CHARS = 2500  # a log tail longer than this also goes up as a file


class Delivery:
    """Chat calls that must not stop a job: failures are logged with what was lost."""

    def __init__(self, chat: Chat):
        self.chat = chat
        self.failures: list[str] = []

    async def __call__(self, what: str, call: Awaitable[R]) -> R | None:
        try:
            return await call
        except asyncio.CancelledError:
            raise
        except Exception as error:
            log.error("could not deliver %s: %s", what, error)
            self.failures.append(f"{what}: {error}")
            return None


class JobView:
    """The messages of one job. `parent` is the current parent message (persisted by the caller
    through `on_parent`); its outbox delivers them, so nothing here waits for the chat."""

    def __init__(
        self,
        chat: Chat,
        channel: str,
        *,
        title: str,
        text: str,
        plan: list[Checkpoint],
        job_id: int,
        requester: str,
        settings: JobsConfig,
        deliveries: Deliveries | None = None,
        posted: Posted | None = None,
        link: str | None = None,
        on_parent: Callable[[Message], Awaitable[object]] | None = None,
        on_posted: Callable[[Posted], Awaitable[None]] | None = None,
        on_checkpoint_shown: Callable[[CheckpointPassed], None] | None = None,
        thread: str | None = None,
        reply_to: str | None = None,
    ):
        self.deliver = Delivery(chat)
        self.reply_to = reply_to  # the requester's private way back (Slack: a response_url)
        self.chat = chat
        self.channel = channel
        self.job_id = job_id
        self.requester = requester
        self.settings = settings
        self.on_parent = on_parent
        self.on_posted = on_posted
        self.on_checkpoint_shown = on_checkpoint_shown
        self.outbox = Outbox(
            chat,
            channel,
            name=f"job {job_id}",
            settings=settings,
            deliveries=deliveries or Deliveries(),
            posted=posted,
            on_posted=self._posted,
            on_undelivered=self._undelivered,
            thread=thread,
        )
        self.link = link
        self.items: dict[str, ChecklistItem] = {c.id: ChecklistItem(title=c.title) for c in plan}
        self.parent = Message(
            title=title, text=text, tone="running", buttons=[self._cancel_button()]
        )
        self._progress: str | None = None
        self._mark_running()

    def _cancel_button(self) -> Button:
        return Button(
            label="Cancel",
            action=CANCEL_ACTION,
            value=str(self.job_id),
            style="danger",
            confirm=Confirm(
                title="Cancel this job?",
                text="The job stops and the controller removes what it started.",
                confirm="Cancel the job",
                deny="Keep going",
            ),
        )

    @property
    def posted(self) -> Posted | None:
        return self.outbox.posted

    @property
    def thread(self) -> str | None:
        """The thread its replies go to: the one it was opened in, else its own parent's."""
        return self.outbox.thread or (self.posted.ts if self.posted else None)

    async def shown(self) -> Posted | None:
        """Once the parent message is in the chat: where; None when the chat would not take it."""
        return await self.outbox.first_post()

    async def delivered(self) -> None:
        """Until the chat has everything queued so far (or it was given up)."""
        await self.outbox.drained()

    # -- the parent message -----------------------------------------------------------------

    def open(self) -> None:
        """Queue the parent message; `on_posted` is called once the chat has it."""
        self.parent = self._render_parent()
        self.outbox.open(self.parent)

    async def _posted(self, posted: Posted) -> None:
        self.link = await self.deliver("permalink", self.chat.permalink(posted))
        if self.on_posted:
            await self.on_posted(posted)

    async def _undelivered(self, final: Message, lost: int) -> None:
        """The chat never took the job's last state: its requester hears how the job ended."""
        lost_replies = f" ({lost} thread replies are lost)" if lost else ""
        note = (
            f"The bot could not show this in <#{self.channel}>: the chat refused its messages{lost_replies}. "
            f"How job #{self.job_id} ended:"
        )
        message = final.model_copy(update={"text": f"{note}\n{final.text}".strip(), "buttons": []})
        await self.deliver(
            f"job {self.job_id}'s outcome to {self.requester}",
            self.chat.reply_private(self.channel, self.requester, message, reply_to=self.reply_to),
        )

    def _mark_running(self) -> None:
        for key, item in self.items.items():
            if item.state == "running":
                return
            if item.state == "pending":
                self.items[key] = item.model_copy(update={"state": "running"})
                return

    def _render_parent(self, **update: Any) -> Message:
        footer = (
            f"… {self._progress}"
            if self._progress and self.parent.tone == "running"
            else self.parent.footer
        )
        fields = {"checklist": list(self.items.values()), "footer": footer, **update}
        return self.parent.model_copy(update=fields)

    async def refresh(self, *, final: bool = False, **update: Any) -> None:
        """Re-render the parent; the chat gets the latest state once the update interval has
        passed, or at once when `final` (a failure, the job's end: its last look)."""
        self.parent = self._render_parent(**update)
        if self.on_parent:
            await self.on_parent(self.parent)
        self.outbox.parent(self.parent, urgent=final, final=final)

    # -- thread replies ---------------------------------------------------------------------

    async def reply(
        self,
        message: Message,
        *,
        broadcast: bool = False,
        on_posted: Callable[[], None] | None = None,
    ) -> None:
        self.outbox.reply(message, broadcast=broadcast, on_posted=on_posted)

    # -- events -----------------------------------------------------------------------------

    async def event(self, event: Event) -> None:
        if isinstance(event, CheckpointPassed):
            await self._passed(event)
        elif isinstance(event, Progress):
            self._progress = escape(event.message[:200])
            await self.refresh()
        elif isinstance(event, Failed):
            await self.failed(event)
        elif isinstance(event, Ready):
            await self.reply(ready_message(event))
        elif isinstance(event, Removed):
            state = "done" if event.removed else "failed" if event.failed else "skipped"
            self.items[f"removed:{event.node}:{event.container}"] = ChecklistItem(
                title=escape(event.node),
                state=state,
                elapsed_s=event.elapsed_s,
                note=escape(event.detail),
            )
            await self.refresh()
        elif isinstance(event, BenchResult):
            chart = None
            if has_chart(event.report):
                # matplotlib takes a while: imported when first needed (the CLI imports this module
                # for its help), drawn in a thread, not on the event loop
                from handlers.bench_chart import bench_chart_png

                chart = await asyncio.to_thread(bench_chart_png, event.report)
            await self.reply(bench_message(event.report, chart))
        elif isinstance(event, FabricTestResult):
            await self.reply(fabric_test_message(event.report))

    async def _passed(self, event: CheckpointPassed) -> None:
        unchecked = event.not_checked
        item = self.items.get(event.checkpoint)
        if item is not None and item.state != "done":
            note = event.warning if unchecked is None else f"not checked: {unchecked}"
            self.items[event.checkpoint] = item.model_copy(
                update={
                    "state": "done" if unchecked is None else "not_checked",
                    "elapsed_s": event.elapsed_s,
                    "note": escape(note) if note else None,
                }
            )
            self._mark_running()
        await self.refresh()
        where = f" ({event.node})" if event.node else ""
        tone: Tone = "warning" if event.warning or unchecked else "success"
        shown = self.on_checkpoint_shown
        if unchecked is None:
            title = f"✔ {event.title}{where}"
            text = f"Passed at {event.elapsed_s:.1f}s" + (
                f"\n⚠ {escape(event.warning)}" if event.warning else ""
            )
        else:
            title = f"➖ {event.title}{where}"
            text = f"Not checked at {event.elapsed_s:.1f}s: {escape(unchecked)}"
        await self.reply(
            self._with_log(
                Message(title=title, text=text, tone=tone, evidence=event.evidence),
                event.log_tail,
                f"{event.checkpoint}.log",
            ),
            on_posted=(lambda: shown(event)) if shown is not None else None,
        )

    def _with_log(self, message: Message, lines: list[str], filename: str) -> Message:
        if not lines:
            return message
        inline = lines[-self.settings.inline_log_lines :]
        update: dict[str, Any] = {"code": inline, "code_title": f"last {len(inline)} log lines"}
        if len(lines) > len(inline) or sum(len(x) + 1 for x in inline) > INLINE_CHARS:
            update["attachment"] = Attachment(
                filename=filename,
                title=f"{filename} ({len(lines)} lines)",
                content=redact("\n".join(lines) + "\n"),
            )
        return message.model_copy(update=update)

    async def failed(self, event: Failed, *, during: str = "") -> None:
        item = self.items.get(event.checkpoint)
        if item is not None:
            self.items[event.checkpoint] = item.model_copy(
                update={"state": "failed", "elapsed_s": event.elapsed_s}
            )
        for key, other in self.items.items():
            if other.state == "running":
                self.items[key] = other.model_copy(update={"state": "pending"})
        where = f" on {escape(event.node)}" if event.node else ""
        await self.refresh(
            final=True,
            tone="failure",
            buttons=[],
            footer=f"✘ {escape(event.title)}{where} failed{during}: {escape(event.summary)}",
        )
        await self.reply(
            self._with_log(
                failure_message(event, self.requester, during),
                event.log_tail,
                f"{event.checkpoint}-failure.log",
            ),
            broadcast=True,
        )

    async def finish(self, state: JobState, footer: str) -> None:
        """The job's last look: no running item, no Cancel button, the colour of its end state."""
        for key, item in self.items.items():
            if item.state == "running":
                self.items[key] = item.model_copy(update={"state": "pending"})
        await self.refresh(final=True, tone=state.tone, buttons=[], footer=footer)


def failure_message(event: Failed, requester: str, during: str = "") -> Message:
    where = f" on `{escape(event.node)}`" if event.node else ""
    text = (
        f"<@{requester}> *{escape(event.title)}*{where} failed{during}.\n{escape(event.summary)}\n"
        f"*Cause:* {escape(event.cause)}\n*Fix:* {escape(event.fix)}"
    )
    return Message(
        title=f"✘ {event.title} failed",
        text=text,
        tone="failure",
        evidence=event.evidence or None,
        mention=requester,
    )


def ready_message(event: Ready) -> Message:
    version = f" (vLLM {escape(event.vllm_version)})" if event.vllm_version else ""
    lines = [f"`{escape(event.model)}` answers at {escape(event.api_url)}{version}"]
    if event.recipe:
        lines.append(f"Recipe: `{escape(event.recipe)}`")
    if event.memory:
        lines.append(f"Memory: {escape(event.memory)}")
    lines += [f"➖ Not verified: {escape(why)}" for why in event.not_verified]
    sample = event.sample
    if sample:
        rate = f"{sample.decode_tps:.1f} tok/s" if sample.decode_tps else "n/a tok/s"
        lines.append(
            f"Sample completion: {sample.completion_tokens} tokens, {rate}, "
            f"TTFT {sample.ttft_s * 1000:.0f} ms, finish {escape(sample.finish_reason)}"
        )
        answer = (
            sample.text or f"(token budget spent in reasoning) …{sample.reasoning[-200:]}"
        ).strip()
        return Message(
            title="✅ Ready",
            text="\n".join(lines),
            tone="success",
            code=answer[:1500].splitlines(),
            code_title="sample answer",
        )
    return Message(title="✅ Ready", text="\n".join(lines), tone="success")


def chart_title(report: BenchReport) -> str:
    parts = (["Throughput and TTFT by concurrency"] if len(report.sweep) >= 2 else []) + (
        ["TTFT, prefill and decode by prompt length"] if report.depth else []
    )
    return "; ".join(parts) or "Benchmark"


def has_chart(report: BenchReport) -> bool:
    """A picture is worth it: two levels of the sweep, or a depth that was measured."""
    return sum(1 for level in report.sweep if level.ok) >= 2 or any(d.ok for d in report.depth)


def _num(value: float | None, scale: float = 1.0, fmt: str = ".1f") -> str:
    return "-" if value is None else format(value * scale, fmt)


def bench_message(report: BenchReport, chart: bytes | None = None) -> Message:
    """The result in the thread; `chart`: the sweep and depth as a PNG (`bench_chart_png`)."""
    recipe = report.fingerprint.serve.get("recipe")
    lines = [
        f"`{escape(report.model)}`, {report.settings.max_tokens} max tokens"
        + (f", recipe `{escape(str(recipe))}`" if recipe else "")
    ]
    single = report.single
    if single:
        lines.append(
            f"Single stream: decode *{_num(single.decode_tok_s)} tok/s*, "
            f"TTFT {_num(single.ttft_s, 1000, '.0f')} ms, e2e {_num(single.e2e_tok_s)} tok/s "
            f"(median of {len(single.runs)})"
        )
    table = []
    if report.sweep:
        table.append("conc  output tok/s  per-stream  TTFT p50 ms  ok")
        for level in report.sweep:
            table.append(
                f"{level.concurrency:4d}  {level.output_tok_s:12.1f}  "
                f"{_num(level.per_stream_decode_tok_s):>10}  {_num(level.ttft_p50_s, 1000, '.0f'):>11}"
                f"  {level.ok}/{level.requests}"
            )
    if report.depth:
        table += [""] if table else []
        table.append(" depth  prompt tok  TTFT ms  prefill tok/s  decode tok/s  ok")
        for d in report.depth:
            table.append(
                f"{d.depth:6d}  {_num(d.prompt_tokens, fmt='.0f'):>10}"
                f"  {_num(d.ttft_s, 1000, '.0f'):>7}  {_num(d.prefill_tok_s):>13}"
                f"  {_num(d.decode_tok_s):>12}  {d.ok}/{d.requests}"
            )
        lines += [f"⚠ depth {d.depth}: {escape(d.errors[0])}" for d in report.depth if d.errors]
    sample = report.sample
    if sample and sample.budget_spent_in_reasoning:
        lines.append(
            f"Answer: none, the token budget ran out inside reasoning. Reasoning excerpt: "
            f"_…{_one_line(sample.reasoning[-300:])}_"
        )
    elif sample:
        lines.append(f"Answer: {_one_line(sample.text[:500])}")
    lines += [
        f"vs previous: {escape(c.metric)}: {escape(c.describe())}" for c in report.comparisons
    ]
    lines += [f"⚠ {escape(w)}" for w in report.warnings]
    attachment = None
    if chart is not None:
        attachment = Attachment(
            filename="bench.png" if report.depth else "bench-sweep.png",
            title=chart_title(report),
            content=chart,
        )
    return Message(
        title="📊 Benchmark",
        text="\n".join(lines),
        tone="success",
        code=table,
        code_title=_table_title(report) if table else None,
        attachment=attachment,
    )


def fabric_test_message(report: FabricTestReport) -> Message:
    """Each pair's figure against the link's nominal speed; its lanes (one per subnet) as a
    table; what fell short and why; the comparison with the last run."""
    lines, table = [], []
    for pair in report.pairs:
        mark = "✘ " if pair.gbps is None else ""
        lines.append(mark + escape(report.line(pair)))
        lines += [f"⚠ {escape(warning)}" for warning in pair.warnings]
        table += [f"{pair.name}  {lane_line(lane)}" for lane in pair.lanes]
    lines += [
        f"vs previous: {escape(c.metric)}: {escape(c.describe())}" for c in report.comparisons
    ]
    return Message(
        title="🔌 Fabric bandwidth",
        text="\n".join(lines),
        tone="warning" if report.failed else "success",
        code=table,
        code_title="each subnet's ib_write_bw" if table else None,
    )


def _table_title(report: BenchReport) -> str:
    parts = (["concurrency sweep"] if report.sweep else []) + (["depth"] if report.depth else [])
    return " and ".join(parts)


def _one_line(text: str) -> str:
    """Model output inside a line of markup: escaped, on one line."""
    return escape(" ".join(text.split()))
