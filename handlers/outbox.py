"""One job's messages, delivered in the background: the job never waits for the chat.

`JobView` says what the job's messages should read; its outbox gets them into the chat when the
chat takes them, in one task per outbox that runs while there is something to deliver:

- replies go in the order they came, each as soon as it is queued (a reply never waits out the
  interval between two edits); the parent message keeps only its latest state: a newer state
  replaces one not yet delivered, and edits are `jobs.update_interval` apart unless urgent (a
  failure, the job's end); an edit is not held behind replies the chat refuses for now;
- thread replies wait for the parent that holds the thread; at most MAX_REPLIES wait, beyond
  that the oldest plain ones are merged into one;
- a call the chat refuses whatever the timing (`ChatRefused`: the bot is not in the channel) is
  given up at once; a parent refused so is what `first_post` answers;
- a call the chat refuses for now (`RateLimited`) is tried again after its Retry-After, and one
  it cannot take at all for now (`ChatUnavailable`: an outage, a 5xx) after a growing wait (up to
  OUTAGE_MAX_DELAY), as often as it takes; any other error is tried len(ERROR_DELAYS) + 1 times,
  then that message is given up; edits and replies are retried apart;
- when the chat has refused the parent's edits, or the replies, for `jobs.delivery_timeout`
  seconds, what they hold is given up; a job's final state given up goes to its requester
  privately (`on_undelivered`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from typing import Any

from cluster.aio import log_failure
from handlers.chat import Chat, Posted
from handlers.errors import ChatRefused, ChatUnavailable, RateLimited
from handlers.messages import Message, escape
from handlers.settings import JobsConfig

log = logging.getLogger(__name__)

MAX_REPLIES = 50  # replies waiting for one thread
MERGED_LINES = (
    20  # replies one merged reply shows (the newest, when every pair is full); its title counts all
)
ERROR_DELAYS = (
    1.0,
    2.0,
)  # seconds before each new try of a message the chat answered with an error
OUTAGE_MAX_DELAY = 30.0  # the longest wait between tries while the chat is down
SHUTDOWN_FLUSH = (
    10.0  # seconds a stopping bot gives its outboxes: a service manager kills it soon after
)


@dataclass(frozen=True)
class Timing:
    """The time outboxes wait by; tests give one that moves only when waited on."""

    now: Callable[[], float] = time.monotonic
    sleep: Callable[[float], Awaitable[Any]] = asyncio.sleep


class Deliveries:
    """The delivery tasks of every outbox: what the job manager's `idle` waits for, and what it
    lets finish, for a while, when it stops."""

    def __init__(self, timing: Timing | None = None):
        self.timing = timing or Timing()
        self.tasks: set[asyncio.Task[None]] = set()

    def start(self, coro: Coroutine[Any, Any, None], name: str) -> asyncio.Task[None]:
        task = asyncio.create_task(coro, name=name)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)
        task.add_done_callback(log_failure)
        return task

    async def close(self, within: float = SHUTDOWN_FLUSH) -> None:
        """Let the outboxes deliver what they hold for up to `within` seconds, then stop them."""
        if self.tasks:
            await asyncio.wait(self.tasks, timeout=within)
        for task in list(self.tasks):
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)


@dataclass
class _Reply:
    message: Message
    broadcast: bool
    seq: int  # its place among the replies queued
    posted: bool = False  # in the thread; its file is still to go up
    count: int = 1  # the replies it stands for (more than one once merged)
    on_posted: tuple[Callable[[], None], ...] = ()  # called once the chat has it in the thread

    @property
    def mergeable(self) -> bool:
        return not (self.posted or self.broadcast or self.message.tone == "failure")

    def lines(self) -> list[str]:
        if self.count > 1:
            return self.message.text.splitlines()
        return [self.message.summary(lambda title: f"*{escape(title)}*")]


def _merged(first: _Reply, second: _Reply) -> _Reply:
    count = first.count + second.count
    text = "\n".join((first.lines() + second.lines())[-MERGED_LINES:])
    return _Reply(
        Message(title=f"{count} updates, held back while the chat refused messages", text=text),
        broadcast=False,
        seq=first.seq,
        count=count,
        on_posted=first.on_posted + second.on_posted,
    )


@dataclass
class _Lane:
    """The parent's edits, or the thread's replies: retried apart, since Slack limits each call
    on its own (a refused edit does not hold back a failure's reply)."""

    ready_at: float = 0.0  # not tried again before (Retry-After, or the wait after an error)
    failing_since: float | None = None
    errors: int = 0  # in a row

    def delivered(self) -> None:
        self.failing_since, self.errors = None, 0


class Outbox:
    """The messages of one job (and its watch) on their way to the chat."""

    def __init__(
        self,
        chat: Chat,
        channel: str,
        *,
        name: str,
        settings: JobsConfig,
        deliveries: Deliveries,
        posted: Posted | None = None,
        on_posted: Callable[[Posted], Awaitable[None]] | None = None,
        on_undelivered: Callable[[Message, int], Awaitable[None]] | None = None,
        thread: str | None = None,
    ):
        self.chat = chat.without_waiting()
        self.channel = channel
        self.thread = thread  # the parent posted as a reply there (a restart), and the replies
        self.name = name
        self.settings = settings
        self.deliveries = deliveries
        self.posted = posted
        self.on_posted = on_posted
        self.on_undelivered = on_undelivered  # (the final parent state, replies lost)
        self.lost = 0  # replies given up
        self._opened = (
            False  # the parent is to be posted (a view from before a restart may have none)
        )
        self._parent: Message | None = None  # the parent's latest state, until the chat has it
        self._urgent = False
        self._final = False  # the job has ended: its last state must reach the requester somehow
        self._next_edit = 0.0
        self._replies: deque[_Reply] = deque()
        self._queued = 0
        self._edits, self._posts = _Lane(), _Lane()
        self._task: asyncio.Task[None] | None = None
        self._news = asyncio.Event()  # something was queued since the delivery task last looked
        self._first_post = asyncio.Event()  # the parent was posted, or given up
        if posted is not None:
            self._first_post.set()
        self.refusal: ChatRefused | None = None  # why the chat would not take the parent at all

    # -- what the job asks for: none of it waits -------------------------------------------

    def open(self, parent: Message) -> None:
        """Post the parent message; replies go to its thread."""
        self._opened = True
        self.parent(parent, urgent=True)

    def parent(self, message: Message, *, urgent: bool = False, final: bool = False) -> None:
        """The parent's new state: edited now if `urgent`, else once the update interval has passed."""
        if self.posted is None and not self._opened:
            return  # nothing to edit: a job whose message was never posted before a restart
        self._parent = message
        self._urgent |= urgent
        self._final |= final
        self._wake()

    def reply(
        self,
        message: Message,
        *,
        broadcast: bool = False,
        on_posted: Callable[[], None] | None = None,
    ) -> None:
        self._queued += 1
        self._replies.append(
            _Reply(message, broadcast, self._queued, on_posted=(on_posted,) if on_posted else ())
        )
        if len(self._replies) > MAX_REPLIES:
            self._merge()
        self._wake()

    async def first_post(self) -> Posted | None:
        """Once the chat has the parent message: where it is; None when it was given up (refused,
        or refused for `delivery_timeout`): then the job has nowhere to show itself."""
        await self._first_post.wait()
        return self.posted

    async def drained(self) -> None:
        """Until nothing is left to deliver (or what is left was given up)."""
        while (task := self._task) is not None:
            await asyncio.wait([task])

    # -- delivery ---------------------------------------------------------------------------

    def _wake(self) -> None:
        self._news.set()
        if self._task is None:
            self._task = self.deliveries.start(self._deliver(), f"deliver {self.name}")

    async def _pause(self, seconds: float) -> None:
        """Wait until the next send may go, or less if something new is queued meanwhile: a
        reply must not wait out the interval between two edits of the parent."""
        sleep = asyncio.ensure_future(self.deliveries.timing.sleep(seconds))
        news = asyncio.ensure_future(self._news.wait())
        try:
            await asyncio.wait({sleep, news}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiter in (sleep, news):
                waiter.cancel()
            await asyncio.gather(sleep, news, return_exceptions=True)

    def _merge(self) -> None:
        """Merge two neighbouring plain replies (never the one being sent, never a failure or a
        broadcast), the first pair that fits in MERGED_LINES if any: the order stays, the queue
        stays bounded; their code and files are dropped."""
        replies = self._replies
        pairs = [
            i
            for i in range(1, len(replies) - 1)
            if replies[i].mergeable and replies[i + 1].mergeable
        ]
        if pairs:
            i = next(
                (i for i in pairs if replies[i].count + replies[i + 1].count <= MERGED_LINES),
                pairs[0],
            )
            replies[i] = _merged(replies[i], replies[i + 1])
            del replies[i + 1]

    def _next(self) -> tuple[Callable[[], Awaitable[None]], _Lane] | float | None:
        """The next send and its lane, or seconds to wait until one may go, or None: all done."""
        now = self.deliveries.timing.now()
        waits = []
        replies = bool(self._replies) and (self.posted is not None or not self._opened)
        if replies:
            if now >= self._posts.ready_at:
                return self._send_reply, self._posts
            waits.append(self._posts.ready_at)
        # Not held behind replies the chat refuses for now: the parent shows the latest state
        # as soon as its own lane may send, whatever Retry-After the replies wait out.
        if self._parent is not None:
            edit_at = max(
                self._edits.ready_at,
                0.0 if self._urgent or self.posted is None else self._next_edit,
            )
            if now >= edit_at:
                return self._send_parent, self._edits
            waits.append(edit_at)
        return max(0.0, min(waits) - now) if waits else None

    async def _deliver(self) -> None:
        timing = self.deliveries.timing
        try:
            while True:
                self._news.clear()
                if (step := self._next()) is None:
                    break
                if isinstance(step, float):
                    await self._pause(step)
                    continue
                send, lane = step
                try:
                    await send()
                except asyncio.CancelledError:
                    raise
                except RateLimited as refused:
                    wait = refused.retry_after
                    log.warning("%s: %s", self.name, refused)
                except ChatRefused as refused:
                    lane.delivered()
                    if lane is self._edits and self.posted is None:
                        self.refusal = refused
                    await self._give_up(lane, f"{refused}", everything=False)
                    continue
                except ChatUnavailable as down:
                    lane.errors += 1
                    wait = min(OUTAGE_MAX_DELAY, 2.0 ** (lane.errors - 1))
                    log.warning("%s: %s; trying again in %g s", self.name, down, wait)
                except Exception as error:
                    lane.errors += 1
                    if lane.errors > len(ERROR_DELAYS):
                        lane.delivered()
                        await self._give_up(lane, f"{error}", everything=False)
                        continue
                    wait = ERROR_DELAYS[lane.errors - 1]
                    log.warning("%s: %s; trying again in %g s", self.name, error, wait)
                else:
                    lane.delivered()
                    continue
                now = timing.now()
                lane.failing_since = now if lane.failing_since is None else lane.failing_since
                if now + wait - lane.failing_since > self.settings.delivery_timeout:
                    lane.delivered()
                    await self._give_up(
                        lane, f"refused for {self.settings.delivery_timeout:g} s", everything=True
                    )
                else:
                    lane.ready_at = now + wait
        finally:
            self._task = None
            if self.posted is None:  # no post comes of this task (given up, failed, cancelled)
                self._first_post.set()

    async def _send_parent(self) -> None:
        message = self._parent
        assert message is not None
        if self.posted is None:
            posted = await self.chat.post(self.channel, message, thread=self.thread)
            self.posted = posted
            self._sent(message)
            self._first_post.set()
            if self.on_posted is not None:
                try:
                    await self.on_posted(posted)
                except Exception:
                    log.exception("%s: after the parent was posted", self.name)
        else:
            await self.chat.update(self.posted, message)
            self._sent(message)

    def _sent(self, message: Message) -> None:
        if self._parent is message:  # else a newer state came meanwhile, still to send
            self._parent = None
            self._urgent = False
        self._next_edit = self.deliveries.timing.now() + self.settings.update_interval

    async def _send_reply(self) -> None:
        reply = self._replies[0]
        thread = self.thread or (self.posted.ts if self.posted else None)
        if not reply.posted:
            await self.chat.post(
                self.channel, reply.message, thread=thread, broadcast=reply.broadcast
            )
            reply.posted = True
            for posted in reply.on_posted:
                posted()
        attachment = reply.message.attachment
        if attachment is not None and thread is not None:
            await self.chat.upload(self.channel, thread, attachment, attachment.title)
        self._replies.popleft()

    # -- giving up --------------------------------------------------------------------------

    async def _give_up(self, lane: _Lane, why: str, *, everything: bool) -> None:
        """Give up the lane's next message (`everything`: all it holds)."""
        if lane is self._posts:
            self._drop_replies(len(self._replies) if everything else 1, why)
            return
        message, self._parent, self._urgent = self._parent, None, False
        assert message is not None
        log.error("%s: gave up the parent message's state: %s", self.name, why)
        if self.posted is None:  # no thread for the replies either
            self._drop_replies(len(self._replies), "the parent message could not be posted")
            self._first_post.set()
        if self._final and self.on_undelivered is not None:
            await self.on_undelivered(message, self.lost)

    def _drop_replies(self, count: int, why: str) -> None:
        for _ in range(count):
            reply = self._replies.popleft()
            self.lost += reply.count
            log.error("%s: gave up the reply %r: %s", self.name, reply.message.title, why)
