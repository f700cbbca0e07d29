"""Checks as steps: small named async generators of events, run in order by one runner that
stops at the first failure.

A node error raised inside a step (a hung engine, a broken connection) becomes the failure of
the checkpoint the step proves, naming the node, what was seen and what to try.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Callable, Iterable
from contextlib import aclosing
from dataclasses import dataclass

from cluster.errors import NodeError
from cluster.events import Event, Failed
from cluster.progress.checkpoints import Checkpoint
from cluster.progress.reporter import Reporter


@dataclass(frozen=True)
class Step:
    checkpoint: Checkpoint  # what the step proves; it fails if a node errs during the step
    run: Callable[[], AsyncGenerator[Event, None]]


async def run_steps(steps: Iterable[Step], reporter: Reporter) -> AsyncGenerator[Event, None]:
    """Every step's events in order; nothing after the first Failed."""
    for step in steps:
        try:
            async with aclosing(step.run()) as events:
                async for event in events:
                    yield event
                    if isinstance(event, Failed):
                        return
        except NodeError as error:
            yield reporter.unreachable(error, step.checkpoint)
            return
