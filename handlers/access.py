"""Authorization by Slack user and channel IDs, per level; operate implies read."""

from __future__ import annotations

from dataclasses import dataclass

from handlers.settings import AccessConfig, AccessLevel, Level

DIRECT_MESSAGE = "D"  # Slack's IDs of direct-message conversations begin so


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

    def check(self, level: Level, user: str, channel: str, command: str) -> Decision:
        if self.local:
            return Decision(True)
        levels = (
            [self.config.operate] if level == "operate" else [self.config.read, self.config.operate]
        )
        if any(_matches(rule, user, channel) for rule in levels):
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


def _matches(rule: AccessLevel, user: str, channel: str) -> bool:
    if channel in rule.channels:
        where = True
    elif channel.startswith(DIRECT_MESSAGE):
        where = rule.direct_messages
    else:
        where = "*" in rule.channels
    return where and ("*" in rule.users or user in rule.users)
