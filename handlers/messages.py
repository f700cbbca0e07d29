"""A chat-neutral message: what handlers say, before any adapter turns it into Block Kit or text.

Which fields are markup: `text`, `footer` and a checklist item's `title` and `note` use the small
markup every adapter understands (*bold*, `code`, <@USER>, <#CHANNEL>, <URL|label>); any untrusted
piece (a log line, an error, a failure's summary, model output) goes in through `escape()`, so a
`<!channel>` in a log cannot ping a channel nor `<http://x|y>` spoof a link, and a token quoted
in an error is masked. `code` and `evidence` are raw text: the adapter escapes them and keeps
them inside their code block. `title` is plain text.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from cluster.redact import redact

Tone = Literal["neutral", "running", "success", "failure", "warning"]
# "not_checked": the check could not run (neither done nor failed; its note says why)
ItemState = Literal["pending", "running", "done", "failed", "skipped", "not_checked"]

CONFIRM_ACTION = "spark_confirm"
CANCEL_ACTION = "spark_cancel"
# the answers to a question a running job asks in its thread (handlers/thread_questions.py)
REPLACE_ACTION = "spark_replace"
KEEP_ACTION = "spark_keep"


def escape(text: object) -> str:
    """Untrusted text -> markup that shows it literally (Slack's rule: & < > as entities), with
    anything shaped like a secret masked (a Docker or SSH error may quote one)."""
    return redact(str(text)).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def unescape(text: str) -> str:
    """The inverse of `escape()`, for adapters that print plain text."""
    return text.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")


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
    code: list[str] = Field(
        default_factory=list, description="log lines, shown as a code block (tail kept)"
    )
    code_title: str | None = None
    buttons: list[Button] = Field(default_factory=list)
    mention: str | None = Field(None, description="user id to notify")
    footer: str | None = None
    attachment: Attachment | None = None

    def summary(self, title: Callable[[str], str] = str) -> str:
        """One line for notifications and fallbacks (`title`: how to turn the plain title into markup)."""
        return (
            f"{title(self.title)}: {self.text.splitlines()[0]}" if self.text else title(self.title)
        )
