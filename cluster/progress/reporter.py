"""How an operation speaks: its clock, and the two events it reports about a checkpoint."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from datetime import datetime

from cluster.diagnosis.failures import KnownFailure
from cluster.errors import NodeError
from cluster.events import CheckpointPassed, Failed, Remedy
from cluster.progress.checkpoints import Checkpoint


class Reporter:
    """Started with the operation; every event it makes carries the seconds since then."""

    def __init__(self) -> None:
        self.started = time.monotonic()
        self.not_checked: list[str] = []  # `title: why` of each check that could not run

    def unchecked(
        self, checkpoint: Checkpoint, why: str, evidence: str, *, node: str | None = None
    ) -> CheckpointPassed:
        """A check that could not run: its own state, remembered for `Ready`."""
        self.not_checked.append(f"{checkpoint.title}: {why}")
        return CheckpointPassed(
            elapsed_s=self.elapsed(),
            checkpoint=checkpoint.id,
            title=checkpoint.title,
            node=node,
            evidence=evidence,
            not_checked=why,
        )

    def elapsed(self) -> float:
        return round(time.monotonic() - self.started, 3)

    def passed(
        self,
        checkpoint: Checkpoint,
        evidence: str,
        *,
        node: str | None = None,
        log_tail: Sequence[str] = (),
        warning: str | None = None,
        logged_at: datetime | None = None,
    ) -> CheckpointPassed:
        return CheckpointPassed(
            elapsed_s=self.elapsed(),
            checkpoint=checkpoint.id,
            title=checkpoint.title,
            node=node,
            evidence=evidence,
            log_tail=list(log_tail),
            warning=warning,
            logged_at=logged_at,
        )

    def failed(
        self,
        checkpoint: Checkpoint,
        summary: str,
        *,
        cause: str,
        fix: str,
        node: str | None = None,
        evidence: str | None = None,
        context: Sequence[str] = (),
        signature: str | None = None,
        log_tail: Sequence[str] = (),
        remedy: Remedy | None = None,
    ) -> Failed:
        """`evidence` defaults to the summary: a failure always shows what was seen."""
        return Failed(
            elapsed_s=self.elapsed(),
            checkpoint=checkpoint.id,
            title=checkpoint.title,
            node=node,
            summary=summary,
            evidence=summary if evidence is None else evidence,
            context=list(context),
            cause=cause,
            fix=fix,
            signature=signature,
            log_tail=list(log_tail),
            remedy=remedy,
        )

    def known(
        self,
        checkpoint: Checkpoint,
        failure: KnownFailure,
        values: Mapping[str, str] | None = None,
        *,
        node: str | None = None,
        evidence: str | None = None,
        context: Sequence[str] = (),
        log_tail: Sequence[str] = (),
    ) -> Failed:
        """A known failure of `checkpoint`, its texts filled from `values`: the title is the
        summary, the row's id the signature."""
        summary, cause, fix = failure.render(values or {})
        return self.failed(
            checkpoint,
            summary,
            cause=cause,
            fix=fix,
            node=node,
            evidence=evidence,
            context=context,
            signature=failure.id,
            log_tail=log_tail,
            remedy=failure.remedy,
        )

    def unreachable(self, error: NodeError, checkpoint: Checkpoint) -> Failed:
        """A node that could not be reached or driven, as the failure of `checkpoint`."""
        return self.failed(
            checkpoint,
            str(error),
            cause=error.cause,
            fix=error.fix,
            node=error.node,
            evidence=error.problem,
        )
