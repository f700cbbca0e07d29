"""A bounded queue for log lines that arrive faster than they are read.

Beyond its capacity it sheds the oldest lines that do not matter, keeping the newest and every
line the reader must see (a checkpoint's line, a failure's line) and every non-line item (a
container's death); the reader is told how many lines were shed: at once the first time, then at
most every `tell_every_s` while it stays behind (a flood sheds on nearly every read, and a
report per read would be a flood of its own in the bot's log and the job's progress), and as
soon as it has caught up or a line that matters (or a death) is next.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

from cluster.aio import TURN_S, Turns

T = TypeVar("T")

PLAIN, MATTERS, KEEP = 0, 1, 2  # how readily an item may be shed: first, if it must, never
_SCAN = 256  # items looked at for a plain one before a line that matters is shed instead
TELL_EVERY_S = 10.0


@dataclass(frozen=True)
class Shed:
    """`count` lines were dropped here: they came faster than they could be read."""

    count: int


class Backlog(Generic[T]):
    def __init__(
        self,
        capacity: int,
        *,
        rank: Callable[[T], int],
        turn_s: float = TURN_S,
        tell_every_s: float = TELL_EVERY_S,
    ):
        self.capacity = capacity
        self.tell_every_s = tell_every_s
        self.shed_total = 0
        self._rank = rank
        # (item, rank or None until the backlog sheds and asks): tuples of untracked items are
        # untracked by the garbage collector, which a flood's backlog would otherwise feed
        self._items: deque[tuple[T, int | None]] = deque()
        self._shed_since_read = 0  # shed and not yet told
        self._told_at = -float("inf")
        self._ready = asyncio.Event()
        self._turns = Turns(turn_s)

    def __len__(self) -> int:
        return len(self._items)

    def put(self, item: T) -> None:
        self._items.append((item, None))
        if len(self._items) > self.capacity:
            self._shed_one()
        self._ready.set()

    async def get(self) -> T | Shed:
        """The oldest item (after a turn for the loop's others, when the reader has held it
        long: with items waiting, `get` would never suspend)."""
        await self._turns.give()
        while not self._items and not self._shed_since_read:
            self._ready.clear()
            await self._ready.wait()
        if self._shed_since_read and (
            not self._items
            or time.monotonic() - self._told_at >= self.tell_every_s
            or self._front_matters()  # it may end the reading: the count comes first
        ):
            shed, self._shed_since_read = Shed(self._shed_since_read), 0
            self._told_at = time.monotonic()
            return shed
        return self._items.popleft()[0]

    def _front_matters(self) -> bool:
        item, rank = self._items[0]
        return (self._rank(item) if rank is None else rank) != PLAIN

    def _shed_one(self) -> None:
        """The oldest PLAIN item goes; with none near the front, the oldest that MATTERS; KEEP
        items (few: deaths, lost streams) stay even beyond the capacity."""
        fallback = None
        for index, (item, rank) in enumerate(self._items):
            if rank is None:
                rank = self._rank(item)
                self._items[index] = (item, rank)
            if rank == PLAIN:
                break
            if rank == MATTERS and fallback is None:
                fallback = index
            if index >= _SCAN and fallback is not None:
                index = fallback
                break
        else:
            if fallback is None:
                return
            index = fallback
        del self._items[index]
        self._shed_since_read += 1
        self.shed_total += 1
