"""A copy's progress as figures: bytes moved, the recent rate, the time left, and when to tell.

The rate is measured over the last `window_s` seconds (a copy slows and speeds up; its average
since the start would hide that), from a few samples kept at most every `window_s / 20`: the
meter holds a bounded handful of numbers however many chunks pass.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable

from cluster.events import Transfer


class TransferMeter:
    def __init__(
        self,
        total_bytes: int | None,
        *,
        every_s: float = 1.0,
        window_s: float = 5.0,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.total_bytes = total_bytes if total_bytes and total_bytes > 0 else None
        self.every_s = every_s
        self.window_s = window_s
        self.clock = clock
        self.done = 0
        self.started = clock()
        self._samples: deque[tuple[float, int]] = deque([(self.started, 0)])
        self._told = self.started

    def add(self, count: int) -> bool:
        """Count `count` more bytes moved; True when a report is due (at most every `every_s`)."""
        now = self.clock()
        if not self.done:  # the clock starts at the first byte: the engine's start-up is no rate
            self.started = self._told = now
            self._samples = deque([(now, 0)])
        self.done += count
        if now - self._samples[-1][0] >= self.window_s / 20:
            self._samples.append((now, self.done))
        while len(self._samples) > 2 and now - self._samples[1][0] >= self.window_s:
            self._samples.popleft()
        if now - self._told >= self.every_s:
            self._told = now
            return True
        return False

    def figures(self) -> Transfer:
        now = self.clock()
        since, then = self._samples[0]
        rate = (self.done - then) / (now - since) if now > since else None
        eta = None
        if rate and self.total_bytes is not None and self.done < self.total_bytes:
            eta = (self.total_bytes - self.done) / rate
        return Transfer(
            bytes_done=self.done, bytes_total=self.total_bytes, rate_bps=rate, eta_s=eta
        )

    def final(self) -> Transfer:
        """The whole copy's figures once it is over: its size, and its average rate."""
        took = self.clock() - self.started
        return Transfer(
            bytes_done=self.done,
            bytes_total=self.done,
            rate_bps=self.done / took if took > 0 else None,
        )


def describe(figures: Transfer) -> str:
    """`1.2 GiB of ~3.4 GiB (35%), 112.0 MiB/s, about 20 s left`."""
    text = size(figures.bytes_done)
    total = figures.bytes_total
    if total is not None:
        # the total is the image's size, an estimate of its tarball's: never past 99% before the end
        done = figures.bytes_done == total
        percent = 100 if done else min(99, int(100 * figures.bytes_done / total))
        text += f" of ~{size(total)} ({percent}%)"
    if figures.rate_bps is not None:
        text += f", {size(figures.rate_bps)}/s"
    if figures.eta_s is not None:
        text += f", about {duration(figures.eta_s)} left"
    return text


def size(count: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if count < 1024 or unit == "GiB":
            return f"{count:.0f} {unit}" if unit == "B" else f"{count:.1f} {unit}"
        count /= 1024
    raise AssertionError("unreachable")


def duration(seconds: float) -> str:
    seconds = round(seconds)
    if seconds < 60:
        return f"{seconds} s"
    minutes, seconds = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes} min {seconds:02d} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min"
