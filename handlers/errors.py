"""The chat side's exceptions, in the one tree of errors spark-bot raises on purpose
(`cluster.errors.SparkBotError`): each message says what went wrong and what to do."""

from __future__ import annotations

from typing import TYPE_CHECKING

from cluster.errors import SparkBotError

if TYPE_CHECKING:
    from handlers.store import LockRecord


class CommandError(SparkBotError, ValueError):
    """The text is not a valid command: `str(error)` says why; the usage says what is."""


class Busy(SparkBotError):
    """Another job holds the cluster lock: `holder` names it (who, what, since when)."""

    def __init__(self, holder: LockRecord):
        super().__init__(f"job {holder.job.id} holds the lock; `/spark cancel` stops it")
        self.holder = holder


class ChatError(SparkBotError):
    """A message could not be delivered (after the adapter's retries)."""


class ChatUnavailable(ChatError):
    """The chat could not be reached, or its server failed (a 5xx, a dropped connection, a
    timeout): the same call may succeed later."""


class ChatRefused(ChatError):
    """The chat refuses this call whatever the timing (the bot is not in the conversation, it is
    archived or gone): trying again changes nothing. `fix` says what a person can do about it."""

    def __init__(self, what: str, code: str, fix: str):
        super().__init__(f"{what}: the chat answered {code}")
        self.code = code
        self.fix = fix


class RateLimited(ChatError):
    """The chat takes no more of these calls for now (Slack's 429): try again in `retry_after` seconds."""

    def __init__(self, what: str, retry_after: float):
        super().__init__(f"{what}: rate limited, retry after {retry_after:g} s")
        self.retry_after = retry_after


class StoreUnavailable(SparkBotError):
    """The bot's database cannot record a job now (another program holds it, the disk is full or
    failing), so the job is not started: its lock could not be taken."""


class AnotherInstance(SparkBotError):
    """Another spark-bot runs on the same database: two would run two jobs at once on one cluster."""
