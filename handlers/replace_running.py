"""What `/spark up` does about what already runs on the nodes. The launch's own preflight finds
it, over its one connection per node, and asks through `confirm_replace` in the job's thread,
before its other checks; the serving watch and the recorded launch end only once the launch
changes the cluster (every check passed and it is about to remove what runs, or nothing was there
to replace), never when the answer keeps what runs or a check after a yes fails: then what runs
goes on running, and the watch with it."""

from __future__ import annotations

from collections.abc import AsyncGenerator
from contextlib import aclosing

from cluster.config import ClusterConfig
from cluster.events import CheckpointPassed, Event, Failed, Progress
from cluster.operations.preflight import REPLACING, Leftover
from handlers import commands as c
from handlers.command_context import CommandContext
from handlers.job_state import JobState
from handlers.jobs import Ending, Job
from handlers.messages import escape
from handlers.question import Consent, Question
from handlers.thread_questions import Answer

CHECKPOINT = "no_stale_container"  # where the launch meets what runs


def replace_question(config: ClusterConfig, leftovers: tuple[Leftover, ...]) -> Question:
    """The question about the leftovers the launch found; a container spark-bot did not start is
    named in it, and only a yes to a question that named it removes it."""
    state = ", ".join(f"`{escape(x.node)}` {escape(x.status)}" for x in leftovers)
    foreign = [x for x in leftovers if not x.ours]
    if not foreign:
        return Question(
            f"`{config.name}` is already running ({state}). Replace it?",
            "Replace",
            "The running server is removed and launched again.",
        )
    name = escape(config.container.name)
    named = ", ".join(f"`{name}` on `{escape(x.node)}` ({escape(x.status)})" for x in foreign)
    it, was = ("it", "was") if len(foreign) == 1 else ("them", "were")
    return Question(
        f"{named} {was} NOT started by spark-bot for `{config.name}`. Replace removes {it} "
        f"(`docker rm -f {name}`) and launches `{config.name}` in its place. "
        f"Cluster now: {state}. Remove {it} and replace?",
        "Remove and replace",
        f"{named}: not started by spark-bot; removed for good, with whatever {it} runs.",
        Consent(replace_foreign=tuple(x.node for x in foreign)),
    )


class ReplaceRunning:
    """One `/spark up`'s dealings with what runs: its `confirm_replace`, the launch's events as
    the job sees them, and how the job ends when the answer kept what runs."""

    def __init__(self, d: CommandContext, command: c.Up, config: ClusterConfig):
        self.d = d
        self.command = command
        self.config = config
        self.job: Job | None = None
        self.answer: Answer | None = None  # None: nothing was asked
        self._changing = False

    def started(self, job: Job) -> None:
        self.job = job

    async def confirm(self, leftovers: tuple[Leftover, ...]) -> bool:
        assert self.job is not None, "the launch runs as a job"
        question = replace_question(self.config, leftovers)
        self.answer = await self.d.questions.ask(self.job.view, self.command, question)
        return self.answer.yes

    async def events(self, launch: AsyncGenerator[Event, None]) -> AsyncGenerator[Event, None]:
        async with aclosing(launch):
            async for event in launch:
                if isinstance(event, Progress) and event.phase == REPLACING:
                    # the launch waits at this word: stopped before it removes what the watch
                    # follows
                    await self._will_change()
                elif isinstance(event, CheckpointPassed) and event.checkpoint == CHECKPOINT:
                    await self._will_change()  # nothing was there to replace
                elif (
                    isinstance(event, Failed)
                    and event.checkpoint == CHECKPOINT
                    and self.answer is not None
                    and not self.answer.yes
                ):
                    continue  # what runs was kept, as asked: no failure
                yield event

    def ending(self, job: Job) -> Ending | None:
        answer = self.answer
        if answer is None or answer.yes:
            return None
        name = self.d.cluster.name
        if answer.by is not None:
            return Ending(
                JobState.UNCONFIRMED,
                f"not replaced: kept by {answer.by}; the cluster was left as it was",
                f"✋ Not replaced: <@{answer.by}> kept it; `{name}` was left as it was",
            )
        return Ending(
            JobState.UNCONFIRMED,
            f"not replaced: {answer.why}; nothing was changed",
            f"✋ Not replaced: {escape(answer.why)}; nothing was changed",
        )

    async def _will_change(self) -> None:
        if self._changing:
            return
        self._changing = True
        await self.d.watch.stop()
        await self.d.jobs.clear_launch()  # what runs from now on is no longer that launch
