"""A chat-neutral message: what handlers say, before any adapter turns it into Block Kit or text."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

Tone = Literal["neutral", "running", "success", "failure", "warning"]
ItemState = Literal["pending", "running", "done", "failed", "skipped"]

CONFIRM_ACTION = "spark_confirm"
CANCEL_ACTION = "spark_cancel"


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True)


class ChecklistItem(_Model):
    title: str
    state: ItemState = "pending"
    elapsed_s: float | None = None
    note: str | None = None


class Confirm(_Model):
    """A confirm dialog shown before the button's action is sent."""

    title: str
    text: str
    confirm: str = "Yes"
    deny: str = "No"


class Button(_Model):
    label: str
    action: str = Field(description="action id the adapter hands back to handlers")
    value: str
    style: Literal["primary", "danger"] | None = None
    confirm: Confirm | None = None


class Attachment(_Model):
    """A file for the thread: text too long for a message, or a picture (PNG bytes)."""

    filename: str
    title: str
    content: str | bytes


class Message(_Model):
    title: str
    text: str = ""
    tone: Tone = "neutral"
    checklist: list[ChecklistItem] = Field(default_factory=list)
    evidence: str | None = None
    code: list[str] = Field(default_factory=list, description="log lines, shown as a code block (tail kept)")
    code_title: str | None = None
    buttons: list[Button] = Field(default_factory=list)
    mention: str | None = Field(None, description="user id to notify")
    footer: str | None = None
    attachment: Attachment | None = None

    def summary(self) -> str:
        """One line for notifications and plain-text fallbacks."""
        return f"{self.title}: {self.text.splitlines()[0]}" if self.text else self.title
