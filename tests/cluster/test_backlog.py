"""Bounded buffers while the reader is busy: the backlog sheds plain lines, never the ones that
matter, and the monitor cuts an endless line while reading (no lab: the demo's emulated engine)."""

from __future__ import annotations

import asyncio
import collections
import json
import sys

import aiodocker
import pytest

from cluster.config import Secrets
from cluster.logs.backlog import KEEP, MATTERS, PLAIN, Backlog, Shed
from cluster.logs.container_stream import ClusterMonitor, ContainerExited, LogLine
from cluster.logs.logtext import MAX_LINE_CHARS
from cluster.nodes import connect_cluster
from demo.cluster import embedded_cluster
from demo.machine import DEMO_IMAGE

# a hang guard: the flood takes ~10 s alone, ~2 min at load 15
pytestmark = pytest.mark.timeout(300)


def rank(item: str) -> int:
    return KEEP if item.startswith("died") else MATTERS if item.startswith("checkpoint") else PLAIN


async def drain(backlog: Backlog) -> list:
    items = []
    while len(backlog):
        items.append(await backlog.get())
    if backlog._shed_since_read:  # a shed after the last item is still reported
        items.append(await backlog.get())
    return items


async def test_the_backlog_keeps_the_newest_and_everything_that_matters():
    backlog: Backlog[str] = Backlog(100, rank=rank)
    for n in range(10_000):
        backlog.put(f"checkpoint {n}" if n % 1000 == 0 else "died" if n == 5001 else f"line {n}")
        assert len(backlog) <= 100
    items = await drain(backlog)
    assert isinstance(items[0], Shed) and items[0].count == backlog.shed_total == 10_000 - 100
    kept = items[1:]
    assert [i for i in kept if i.startswith("checkpoint")] == [
        f"checkpoint {n}" for n in range(0, 10_000, 1000)
    ]
    assert "died" in kept and kept[-1] == "line 9999"
    assert kept[-89:] == [f"line {n}" for n in range(9911, 10_000)], "the newest plain lines stay"


async def test_lines_that_matter_go_last_and_deaths_never():
    backlog: Backlog[str] = Backlog(3, rank=rank)
    for item in ["died", "checkpoint a", "checkpoint b", "checkpoint c", "checkpoint d"]:
        backlog.put(item)
    assert await drain(backlog) == [Shed(2), "died", "checkpoint c", "checkpoint d"]


async def test_shedding_is_told_at_once_then_at_most_every_interval_and_when_caught_up():
    backlog: Backlog[str] = Backlog(10, rank=rank, tell_every_s=3600)
    for n in range(15):
        backlog.put(f"line {n}")
    assert await backlog.get() == Shed(5), "the first shed is told at once"
    read = []
    for n in range(15, 45, 2):  # the reader stays behind: two lines come for each it reads
        backlog.put(f"line {n}")
        backlog.put(f"line {n + 1}")
        read.append(await backlog.get())
    read += await drain(backlog)
    assert backlog.shed_total == 5 + 16  # two at the first read, then one a read
    assert not any(isinstance(i, Shed) for i in read[:-1]), "not again within the interval"
    assert read[-1] == Shed(16), "told, in one, once caught up: nothing shed goes untold"
    assert read[-11:-1] == [f"line {n}" for n in range(35, 45)]


async def test_a_pending_shed_is_told_before_a_line_that_matters_or_a_death():
    backlog: Backlog[str] = Backlog(3, rank=rank, tell_every_s=3600)
    for n in range(4):
        backlog.put(f"line {n}")
    assert await backlog.get() == Shed(1)
    for item in ("line 4", "line 5", "died"):  # three more shed: the oldest plain lines
        backlog.put(item)
    assert [await backlog.get(), await backlog.get()] == ["line 4", "line 5"], "not yet told"
    assert await backlog.get() == Shed(3), "told before the death, which may end the reading"
    assert await drain(backlog) == ["died"]


async def test_with_no_interval_every_shed_is_told_before_the_next_item():
    backlog: Backlog[str] = Backlog(2, rank=rank, tell_every_s=0)
    for n in range(3):
        backlog.put(f"line {n}")
    assert await backlog.get() == Shed(1)
    assert await backlog.get() == "line 1"
    backlog.put("line 3")
    backlog.put("line 4")
    assert await backlog.get() == Shed(1)
    assert await drain(backlog) == ["line 3", "line 4"]


async def test_a_reader_of_a_full_backlog_lets_the_loop_run_others():
    """With items waiting `get` would never suspend: it gives the loop a turn every `turn_s`
    (here every call), so a flood read in one loop does not stall the bot's other tasks."""
    backlog: Backlog[str] = Backlog(100, rank=rank, turn_s=0.0)
    for n in range(3):
        backlog.put(f"line {n}")
    seen: list[str] = []

    async def other() -> None:
        seen.append("other task")

    task = asyncio.create_task(other())
    while len(backlog):
        seen.append(await backlog.get())
    await task
    assert seen.index("other task") < len(seen) - 1, seen


def test_log_lines_are_redacted_when_read_not_when_queued():
    """Lines are stored as read (most of a flood is shed unread) and masked on the way out:
    the reader's line and the tail never show a secret."""
    secret = "sekrit-value-0123"
    monitor = ClusterMonitor("c", Secrets({"HF_TOKEN": secret}), 10)
    monitor._tails["n1"] = collections.deque(maxlen=10)
    monitor._publish_line("n1", f"2026-12-01T10:00:00.000000000Z token {secret} in a log line")

    async def read() -> object:
        return await monitor.next(timeout=1)

    item = asyncio.run(read())
    assert isinstance(item, LogLine) and item.text == "token *** in a log line"
    assert monitor.tail("n1") == ["token *** in a log line"]


FLOOD = """
import sys
LONG = 10_000_000
w = sys.stdout.write
w("checkpoint early\\n")
for n in range(100_000):
    w(f"line {n}\\n")
w("x" * LONG)
w("\\nafter the long line\\n")
sys.stdout.flush()
sys.stdout.buffer.write(b"\\xff\\xfe\\x00 binary \\x1b[31mred\\x1b[0m \\xc3\\n")
sys.stdout.buffer.flush()
w("checkpoint late\\nthe end\\n")
sys.stdout.flush()
"""


async def test_a_flood_and_an_endless_line_stay_bounded_while_nobody_reads():
    async with embedded_cluster(nodes=1) as cluster:
        config = cluster.config
        async with aiodocker.Docker(url=f"unix://{config.nodes[0].docker_socket}") as docker:
            container = await docker.containers.create(
                {"Image": DEMO_IMAGE, "Cmd": [sys.executable, "-c", FLOOD]}, name="flood"
            )
            async with connect_cluster(config) as connection:
                monitor = ClusterMonitor(
                    "flood",
                    Secrets({}),
                    10,
                    queued_lines=500,
                    matters=lambda text: text.startswith("checkpoint"),
                )
                try:
                    events = docker.events.subscribe(
                        filters=json.dumps({"container": ["flood"], "event": ["die"]})
                    )
                    await container.start()
                    monitor.follow(connection.nodes[config.nodes[0].name])
                    async with asyncio.timeout(60):
                        while (event := await events.get()) is not None and event.get(
                            "Action"
                        ) != "die":
                            pass
                    await docker.events.stop()
                    # the `die` event can come before the log is read to its end (a busy
                    # machine): read until both, the flood's last line and the exit, are here
                    items = []
                    while not (
                        any(isinstance(i, ContainerExited) for i in items)
                        and any(isinstance(i, LogLine) and i.text == "the end" for i in items)
                    ):
                        items.append(await monitor.next(timeout=30))
                        assert monitor.queued <= 500 + 2, "bounded while the reader was away"
                    while monitor.queued or monitor._queue._shed_since_read:  # the last told
                        items.append(await monitor.next(timeout=30))
                finally:
                    await monitor.aclose()
                    await container.delete(force=True)
    lines = [i.text for i in items if isinstance(i, LogLine)]
    shed = sum(i.count for i in items if isinstance(i, Shed))
    assert shed > 50_000 and len(lines) + shed >= 100_004
    assert {"checkpoint early", "checkpoint late", "the end", "after the long line"} <= set(lines)
    assert [line.strip() for line in lines if "binary" in line] == ["binary red"], (
        "bad bytes, NUL, colours cleaned"
    )
    long = [line for line in lines if line.startswith("xxx")]
    assert long and all(len(line) <= MAX_LINE_CHARS for line in long)
