"""What became of a job: one explicit state, stored with it; the colour of its messages follows
from the state, never the other way round."""

from __future__ import annotations

from enum import StrEnum

from handlers.messages import Tone


class JobState(StrEnum):
    STARTING = "starting"  # holds the cluster lock; nothing posted yet
    RUNNING = "running"  # its message is posted; it follows the controller's events
    SUCCEEDED = "succeeded"
    FAILED = "failed"  # the controller reported a failure, or the job could not start
    CANCELLED = "cancelled"  # by a user: `/spark cancel` or the Cancel button
    SHUTDOWN = "shutdown"  # the bot was stopped during the job; the controller cleaned up
    CRASHED = "crashed"  # an exception the controller did not turn into a failure
    INTERRUPTED = "interrupted"  # the bot died during the job: closed when it started again
    REFUSED = "refused"  # another job held the lock
    # the user was asked to confirm: before a job, the confirmed command is a new job; in a job's
    # thread (`up` over what runs), "keep it" or no answer ended it with nothing changed
    UNCONFIRMED = "unconfirmed"

    @property
    def ended(self) -> bool:
        return self not in {JobState.STARTING, JobState.RUNNING}

    @property
    def tone(self) -> Tone:
        return _TONES[self]


_TONES: dict[JobState, Tone] = {
    JobState.STARTING: "running",
    JobState.RUNNING: "running",
    JobState.SUCCEEDED: "success",
    JobState.FAILED: "failure",
    JobState.CRASHED: "failure",
    JobState.CANCELLED: "warning",
    JobState.SHUTDOWN: "warning",
    JobState.INTERRUPTED: "warning",
    JobState.REFUSED: "neutral",
    JobState.UNCONFIRMED: "neutral",
}
