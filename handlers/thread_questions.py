"""A question a running job asks in its thread (`up`, before it replaces what runs): posted there,
mentioning the requester, with a yes and a "Keep it" button, and awaited. A click is taken as a
confirmation's is (handlers/dispatch.py): once, by the requester, where it was asked, within
`commands.confirm_within`, their access checked again; no answer by then is an answer too. The
question is edited to say who answered what, and loses its buttons."""

from __future__ import annotations

import asyncio
import logging
import sqlite3
from dataclasses import dataclass

from handlers import commands as c
from handlers.chat import Chat, Posted
from handlers.journal import retried
from handlers.messages import KEEP_ACTION, REPLACE_ACTION, Button, Message
from handlers.outbox import Deliveries
from handlers.question import Question, yes_button
from handlers.render import Delivery, JobView
from handlers.store import Store

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Answer:
    yes: bool
    by: str | None = None  # who clicked; None: nobody did
    why: str = ""  # when nobody did: why not, for the job's ending ("no answer in 10 min")


@dataclass
class _Open:
    command: c.BaseCommand
    answered: asyncio.Future[Answer]


class ThreadQuestions:
    """The questions jobs of this cluster wait on, by the nonce their buttons carry."""

    def __init__(
        self, cluster: str, store: Store, chat: Chat, deliveries: Deliveries, within: float
    ):
        self.cluster = cluster
        self.store = store
        self.deliver = Delivery(chat)
        self.chat = chat
        self.deliveries = deliveries  # the question's last edit goes on after the job
        self.within = within
        self._open: dict[str, _Open] = {}

    def command(self, nonce: str) -> c.BaseCommand | None:
        """The command of the job that waits on `nonce`'s question; None when none waits."""
        asked = self._open.get(nonce)
        return asked.command if asked else None

    def answer(self, nonce: str, answer: Answer) -> bool:
        """Hand a click's answer (already taken in the store) to the job; False: no job waits
        for it any more (it ended meanwhile)."""
        asked = self._open.get(nonce)
        if asked is None or asked.answered.done():
            return False
        asked.answered.set_result(answer)
        return True

    async def ask(self, view: JobView, command: c.BaseCommand, question: Question) -> Answer:
        """Ask in the job's thread and wait for the requester's answer, for `within` at most
        (a cancel of the job ends the wait too)."""
        try:
            nonce = await retried(
                lambda: self.store.ask(
                    self.cluster,
                    view.requester,
                    view.channel,
                    command.text(),
                    question.text,
                    question.consent.replace_foreign,
                    self.within,
                )
            )
        except sqlite3.Error as error:  # no button could be taken: asking would be a dead end
            log.error("job %s's question not recorded: %s", view.job_id, error)
            return Answer(False, why=f"the question could not be recorded ({error})")
        asked = _Open(command, asyncio.get_running_loop().create_future())
        self._open[nonce] = asked
        answer: Answer | None = None
        posted: Posted | None = None
        try:
            await view.delivered()  # after the checkpoints the job has shown so far
            posted = await self.deliver(
                f"job {view.job_id}'s question",
                self.chat.post(
                    view.channel,
                    self._asking(view.requester, question, nonce),
                    thread=view.thread,
                    broadcast=True,  # a job that waits on someone says so in the channel too
                ),
            )
            if posted is None:
                answer = Answer(False, why="the question could not be posted in the thread")
                return answer
            try:
                async with asyncio.timeout(self.within):
                    answer = await asked.answered
            except TimeoutError:
                answer = Answer(False, why=f"no answer in {self.within / 60:g} min")
            return answer
        finally:
            del self._open[nonce]
            if posted is not None:
                closed = self._closed(view.requester, question, answer)
                what = f"job {view.job_id}'s answered question"
                self.deliveries.start(self.deliver(what, self.chat.update(posted, closed)), what)

    def _asking(self, requester: str, question: Question, nonce: str) -> Message:
        return Message(
            title="Confirm",
            tone="warning",
            mention=requester,
            text=f"<@{requester}> {question.text}\n(the buttons are yours for "
            f"{self.within / 60:g} min; no answer leaves it as it is)",
            buttons=[
                yes_button(question, REPLACE_ACTION, nonce, deny="Back"),
                Button(label="Keep it", action=KEEP_ACTION, value=nonce),
            ],
        )

    @staticmethod
    def _closed(requester: str, question: Question, answer: Answer | None) -> Message:
        if answer is None:
            said = "not answered: the job was stopped"
        elif answer.by is None:
            said = f"not answered: {answer.why}; nothing was changed"
        elif answer.yes:
            said = f"*{question.label}*, answered by <@{answer.by}>"
        else:
            said = f"*Keep it*, answered by <@{answer.by}>: nothing was changed"
        return Message(title="Confirm", text=f"<@{requester}> {question.text}", footer=f"→ {said}")
