"""The kinds of Slack conversation, who is in each, and what the bot may see and do there.

Slack's four kinds (https://docs.slack.dev/reference/objects/conversation-object):

- PUBLIC: a public channel (`C…`). The bot sees it whether it is a member or not (`channels:read`).
- PRIVATE: a private channel (`C…`/`G…`). The bot sees it only as a member.
- IM: a direct message between two (`D…`): the bot's own DM with a user, or a DM between two
  people, where the bot is not a member and sees nothing (`channel_not_found`).
- MPIM: a group DM (`G…`/`C…`). The bot sees it only as a member.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

PUBLIC = "public"
PRIVATE = "private"
IM = "im"
MPIM = "mpim"
KINDS = (PUBLIC, PRIVATE, IM, MPIM)

CREATED = 1_700_000_000


@dataclass
class Conversation:
    id: str
    kind: str
    name: str | None
    members: set[str] = field(default_factory=set)
    archived: bool = False

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"conversation kind {self.kind!r}: one of {KINDS}")
        if self.kind == IM and len(self.members) != 2:
            raise ValueError(f"a DM is between exactly two: {sorted(self.members)}")

    def visible_to(self, user_id: str) -> bool:
        return self.kind == PUBLIC or user_id in self.members

    def other_member(self, user_id: str) -> str | None:
        """In a DM, the member who is not `user_id`."""
        others = sorted(self.members - {user_id})
        return others[0] if self.kind == IM and len(others) == 1 else None

    @property
    def slash_command_channel_name(self) -> str:
        """The `channel_name` of a slash command typed here, as Slack sends it: `directmessage` in
        any DM (the bot's own or between two people), `privategroup` in private channels and
        group DMs, the name elsewhere."""
        if self.kind == IM:
            return "directmessage"
        if self.kind in (PRIVATE, MPIM):
            return "privategroup"
        return self.name or self.id.lower()

    def info(self, viewer: str) -> dict[str, Any]:
        """The conversation object `conversations.info` gives `viewer`."""
        info: dict[str, Any] = {
            "id": self.id,
            "created": CREATED,
            "is_archived": self.archived,
            "is_channel": self.kind in (PUBLIC, PRIVATE),
            "is_group": self.kind == PRIVATE,
            "is_im": self.kind == IM,
            "is_mpim": self.kind == MPIM,
            "is_private": self.kind != PUBLIC,
            "is_general": False,
            "is_shared": False,
            "is_ext_shared": False,
            "is_org_shared": False,
        }
        if self.kind == IM:
            info["user"] = self.other_member(viewer)
            info["is_user_deleted"] = False
            info["is_open"] = True
        else:
            info["name"] = self.name
            info["name_normalized"] = self.name
            info["is_member"] = viewer in self.members
        return info


__all__ = ["IM", "KINDS", "MPIM", "PRIVATE", "PUBLIC", "Conversation"]
