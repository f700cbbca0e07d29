"""Authorization by Slack user and channel IDs, per level; operate implies read."""

from __future__ import annotations

from dataclasses import dataclass

from handlers.chat import ConversationKind
from handlers.settings import AccessConfig, AccessLevel, Level

# A direct message between people is no place for the bot: it is no member there, so it could
# answer the asker privately but never post a job, its thread or a failure.
PEOPLE_DM_REFUSAL = (
    "This is a direct message between people, where the bot cannot post. Run `/spark {command}` "
    "in a channel the bot is in, or in your direct message with the bot."
)


UNKNOWN_DM_REFUSAL = (
    "The bot could not tell in time whether this is your direct message with it (the chat did "
    "not answer): nothing was done. Run `/spark {command}` again."
)


@dataclass(frozen=True)
class Decision:
    allowed: bool
    reason: str = ""


class Access:
    def __init__(self, config: AccessConfig, *, local: bool = False):
        self.config = config
        self.local = local  # the console: the operator already holds the machine's keys

    @classmethod
    def for_console(cls) -> Access:
        return cls(AccessConfig(), local=True)

    def check(
        self,
        level: Level,
        user: str,
        channel: str,
        command: str,
        kind: ConversationKind = "channel",
    ) -> Decision:
        """May `user` run `command` (of `level`) in `channel`, a conversation of `kind`?"""
        if self.local:
            return Decision(True)
        if kind == "people_dm":
            return Decision(False, PEOPLE_DM_REFUSAL.format(command=command))
        if kind == "unknown_dm":
            return Decision(False, UNKNOWN_DM_REFUSAL.format(command=command))
        levels = (
            [self.config.operate] if level == "operate" else [self.config.read, self.config.operate]
        )
        if any(_matches(rule, user, channel, kind) for rule in levels):
            return Decision(True)
        return Decision(False, self._denial(level, command))

    def _denial(self, level: Level, command: str) -> str:
        rule = self.config.operate if level == "operate" else self.config.read
        if not rule.users or not (rule.channels or rule.direct_messages):
            return (
                f"`/spark {command}` needs {level} access, and nobody has it: "
                f"an admin lists user and channel IDs under `access.{level}` in the bot's config."
            )
        users = "anyone" if "*" in rule.users else ", ".join(f"<@{u}>" for u in rule.users)
        places = ["any channel"] if "*" in rule.channels else [f"<#{c}>" for c in rule.channels]
        if rule.direct_messages:
            places.append("a direct message with the bot")
        return f"`/spark {command}` needs {level} access: {users}, in {', '.join(places)}."


def _matches(rule: AccessLevel, user: str, channel: str, kind: ConversationKind) -> bool:
    if channel in rule.channels:
        where = True
    elif kind == "bot_dm":
        where = rule.direct_messages
    else:
        where = "*" in rule.channels
    return where and ("*" in rule.users or user in rule.users)
