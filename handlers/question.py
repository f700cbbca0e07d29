"""What a command asks before it acts: the question, its button, what a yes does and consents to.

Asked privately before a job (handlers/dispatch.py: `down`, the syncs, a failure's fix), or by a
running job in its thread (handlers/thread_questions.py: `up`, before it replaces what runs).
"""

from __future__ import annotations

from dataclasses import dataclass

from handlers.messages import Button, Confirm


@dataclass(frozen=True)
class Consent:
    """What a user confirmed beyond the command itself: the nodes whose same-named container
    spark-bot did not start, named in the question (a replace removes those too)."""

    replace_foreign: tuple[str, ...] = ()


@dataclass(frozen=True)
class Question:
    """A confirmation: the question, the button's label, what a yes does, and what it consents to."""

    text: str
    label: str
    consequence: str
    consent: Consent = Consent()


def yes_button(question: Question, action: str, nonce: str, *, deny: str) -> Button:
    """The button that says yes to `question` (its nonce its value), behind a dialog that says
    what a yes does; `deny` closes the dialog."""
    label = question.label
    return Button(
        label=label,
        action=action,
        value=nonce,
        style="danger",
        confirm=Confirm(title=f"{label}?", text=question.consequence, confirm=label, deny=deny),
    )
