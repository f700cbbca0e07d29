"""Neutral messages -> Slack payloads (text, Block Kit blocks, a colour bar) within Slack's limits:
sections at most 3,000 characters, at most 50 blocks, the whole blocks payload well under the
~12k characters where Slack answers msg_blocks_too_long (a log tail shrinks first, keeping its end).
"""

from __future__ import annotations

import json
from typing import Any

from slack_sdk.models.blocks import (
    ActionsBlock,
    ButtonElement,
    ConfirmObject,
    ContextBlock,
    HeaderBlock,
    MarkdownTextObject,
    PlainTextObject,
    SectionBlock,
)

from handlers.messages import Button, Message, escape

SECTION_MAX = 3000
HEADER_MAX = 150
MAX_BLOCKS = 50
BLOCKS_BUDGET = 10_000  # characters of JSON: Slack refuses near 12-13k
TEXT_MAX = 3000  # the notification / fallback text

COLORS = {
    "neutral": "#8d8d8d",
    "running": "#1d9bd1",
    "success": "#2eb67d",
    "failure": "#e01e5a",
    "warning": "#ecb22e",
}
ICONS = {
    "pending": "⬜",
    "running": "⏳",
    "done": "✅",
    "failed": "❌",
    "skipped": "➖",
    "not_checked": "➖",
}


def _cut(text: str, limit: int, *, keep_end: bool = False) -> str:
    if len(text) <= limit:
        return text
    marker = "…"
    return marker + text[-(limit - 1) :] if keep_end else text[: limit - 1] + marker


def _chunks(lines: list[str], limit: int = SECTION_MAX) -> list[str]:
    """Join lines into texts of at most `limit` characters (a too-long line is cut)."""
    chunks: list[str] = []
    current = ""
    for line in lines:
        line = _cut(line, limit)
        if current and len(current) + 1 + len(line) > limit:
            chunks.append(current)
            current = line
        else:
            current = f"{current}\n{line}" if current else line
    if current:
        chunks.append(current)
    return chunks


def code_block(raw: str) -> str:
    """Raw text (a log, evidence) as a code block it cannot break out of: & < > escaped (Slack
    parses mentions and links even inside code), no ``` inside, and no backtick touching the fences."""
    body = escape(raw)
    while "```" in body:
        body = body.replace("```", "ˋˋˋ")
    if body.startswith("`"):
        body = "\n" + body
    if body.endswith("`"):
        body += "\n"
    return f"```{body}```"


def _fitted_code(raw: str, room: int, *, keep_end: bool) -> str:
    """`code_block()` of as much of `raw` as fits in `room` characters. Escaping lengthens text
    by a factor that varies along it, so the cut is searched for (the block grows with the cut)."""

    def block_of(length: int) -> str:
        return code_block(_cut(raw, length, keep_end=keep_end))

    if len(block := block_of(len(raw))) <= room:
        return block
    shortest, longest = 20, len(raw) - 1  # the longest cut whose block fits lies between
    while shortest < longest:
        middle = (shortest + longest + 1) // 2
        if len(block_of(middle)) <= room:
            shortest = middle
        else:
            longest = middle - 1
    return block_of(shortest)


def _code(title: str | None, lines: list[str], budget: int) -> str:
    """A code block holding as many of the last lines as fit in `budget` characters."""
    head = f"*{escape(title)}*\n" if title else ""
    return head + _fitted_code("\n".join(lines), max(budget - len(head), 30), keep_end=True)


def _button(button: Button) -> ButtonElement:
    confirm = None
    if button.confirm:
        c = button.confirm
        confirm = ConfirmObject(
            title=_cut(c.title, 100),
            text=_cut(c.text, 300),
            confirm=_cut(c.confirm, 30),
            deny=_cut(c.deny, 30),
        )
    return ButtonElement(
        text=_cut(button.label, 75),
        action_id=button.action,
        value=_cut(button.value, 2000),
        style=button.style,
        confirm=confirm,
    )


def checklist_lines(message: Message) -> list[str]:
    lines = []
    for item in message.checklist:
        took = f" _{item.elapsed_s:.1f}s_" if item.elapsed_s is not None else ""
        note = f" — {item.note}" if item.note else ""
        lines.append(f"{ICONS[item.state]} {item.title}{took}{note}")
    return lines


def _fit_lines(lines: list[str], budget: int) -> list[str]:
    kept: list[str] = []
    used = 0
    for line in lines:
        if used + len(line) + 1 > budget:
            return [*kept, f"… and {len(lines) - len(kept)} more"]
        kept.append(line)
        used += len(line) + 1
    return kept


def render_blocks(
    message: Message,
    *,
    code_budget: int = 2900,
    evidence_budget: int = 1500,
    text_budget: int = SECTION_MAX * 2,
    checklist_budget: int = 6000,
) -> list[dict[str, Any]]:
    blocks: list[Any] = [
        HeaderBlock(text=PlainTextObject(text=_cut(message.title, HEADER_MAX), emoji=True))
    ]
    if message.text:
        blocks += [
            SectionBlock(text=MarkdownTextObject(text=t))
            for t in _chunks(_cut(message.text, text_budget).splitlines())
        ]
    if message.checklist:
        blocks += [
            SectionBlock(text=MarkdownTextObject(text=t))
            for t in _chunks(_fit_lines(checklist_lines(message), checklist_budget))
        ]
    if message.evidence:
        evidence = _fitted_code(
            message.evidence, min(evidence_budget, SECTION_MAX - 20), keep_end=False
        )
        blocks.append(SectionBlock(text=MarkdownTextObject(text=f"*Evidence*\n{evidence}")))
    if message.code:
        blocks.append(
            SectionBlock(
                text=MarkdownTextObject(
                    text=_code(message.code_title, message.code, min(code_budget, SECTION_MAX))
                )
            )
        )
    if message.attachment:
        blocks.append(
            ContextBlock(
                elements=[
                    MarkdownTextObject(
                        text=_cut(
                            f"📎 The whole log is attached below: {message.attachment.filename}",
                            3000,
                        )
                    )
                ]
            )
        )
    if message.buttons:
        blocks.append(ActionsBlock(elements=[_button(b) for b in message.buttons[:25]]))
    dicts = [b.to_dict() for b in blocks]
    if len(dicts) > MAX_BLOCKS:
        dicts = [
            *dicts[: MAX_BLOCKS - 1],
            ContextBlock(
                elements=[MarkdownTextObject(text="… (trimmed: Slack shows at most 50 blocks)")]
            ).to_dict(),
        ]
    return dicts


def to_slack(message: Message) -> dict[str, Any]:
    """kwargs for chat.postMessage / chat.update / chat.postEphemeral."""
    budgets = {
        "code_budget": 2900,
        "evidence_budget": 1500,
        "text_budget": SECTION_MAX * 2,
        "checklist_budget": 6000,
    }
    blocks = render_blocks(message, **budgets)
    while len(json.dumps(blocks)) > BLOCKS_BUDGET and budgets["code_budget"] > 50:
        budgets = {k: v // 2 for k, v in budgets.items()}
        blocks = render_blocks(message, **budgets)
    # the notification text is mrkdwn too: the (plain) title is escaped, the text is markup already
    text = message.summary(escape)
    if message.mention and f"<@{message.mention}>" not in text:
        text = f"<@{message.mention}> {text}"
    payload: dict[str, Any] = {"text": _cut(text, TEXT_MAX), "blocks": blocks}
    if message.checklist or message.footer:
        payload["attachments"] = [
            {
                "color": COLORS[message.tone],
                "fallback": _cut(message.summary(escape), 300),
                "text": _cut(message.footer or "", 3000),
                "mrkdwn_in": ["text"],
            }
        ]
    return payload
