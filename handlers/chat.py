"""The Chat port: everything handlers need from a chat, and nothing chat-specific.

Adapters (bot/slack.py, bot/console.py) implement it. A call that cannot be delivered raises
`handlers.errors.ChatError` after the adapter's own retries; handlers log it and carry on: a chat outage never
stops a job. A chat that limits its callers' rate waits inside the call and tries again, except
on the chat `without_waiting()` returns, which raises `RateLimited` at once: for a caller that
schedules its own retries (a job's outbox, handlers/outbox.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Protocol

from handlers.messages import Attachment, Message

# Where a command was typed, as the adapter tells it: a channel (public, private, a group DM),
# the asker's own direct message with the bot, or a direct message between people (the bot is
# no member there: it can answer the asker privately, never post), or a direct message the
# adapter could not tell (the chat did not answer in time).
ConversationKind = Literal["channel", "bot_dm", "people_dm", "unknown_dm"]


@dataclass(frozen=True)
class Posted:
    channel: str
    ts: str


class Chat(Protocol):
    async def post(
        self, channel: str, message: Message, *, thread: str | None = None, broadcast: bool = False
    ) -> Posted:
        """A message in the channel, or a reply in `thread` (also shown in the channel with `broadcast`)."""

    async def update(self, posted: Posted, message: Message) -> None:
        """Replace a message posted earlier."""

    async def upload(self, channel: str, thread: str, attachment: Attachment, comment: str) -> None:
        """A file in a thread."""

    async def reply_private(
        self, channel: str, user: str, message: Message, *, reply_to: str | None = None
    ) -> None:
        """Only `user` sees it, wherever they asked. `reply_to` is the adapter's own way back to
        the interaction that asked (Slack: its response_url), tried first."""

    async def upload_private(self, user: str, attachment: Attachment, comment: str) -> None:
        """A file only `user` sees (Slack: in the bot's direct message with them)."""

    async def permalink(self, posted: Posted) -> str | None:
        """A link to the message, or None when the chat has none."""

    def without_waiting(self) -> Chat:
        """The same chat, raising `RateLimited` instead of waiting when it refuses a call for now
        (a chat without rate limits returns itself)."""
