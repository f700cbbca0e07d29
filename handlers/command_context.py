"""What a command's code may use, and the command as typed.

The dispatcher builds one `CommandContext` and hands it to every command (handlers/specs.py):
the bot's cluster and settings, its chat, store, jobs and watch, the controller, the audit trail,
the questions jobs ask in their threads; never the dispatcher itself, so the commands and the
dispatcher do not import each other.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from cluster.config import ClusterConfig
from handlers.chat import Chat, ConversationKind
from handlers.jobs import ControllerFactory, JobManager
from handlers.serving_watch import ServingWatch
from handlers.settings import BotSettings
from handlers.store import Store
from handlers.thread_questions import ThreadQuestions


@dataclass(frozen=True)
class Invocation:
    """A command as typed: by whom, where (and what kind of conversation that is), and the
    adapter's way back to the asker for private answers (Slack: the command's response_url)."""

    user: str
    channel: str
    text: str
    kind: ConversationKind = "channel"
    reply_to: str | None = field(default=None, repr=False)  # a capability: never logged


class Audit(Protocol):
    def __call__(
        self,
        user: str,
        channel: str,
        command: str,
        outcome: str,
        job_id: int | None = None,
        link: str | None = None,
    ) -> None:
        """Add to the audit trail without waiting for it."""


@dataclass(frozen=True)
class CommandContext:
    cluster: ClusterConfig
    settings: BotSettings
    chat: Chat
    store: Store
    jobs: JobManager
    watch: ServingWatch
    controller_for: ControllerFactory
    audit: Audit
    questions: ThreadQuestions  # what a running job asks in its thread
