"""Block Kit rendering stays inside Slack's limits (checked by the stand-in's validator)."""

from __future__ import annotations

import json

from bot.slack_blocks import to_slack
from handlers.messages import Attachment, Button, ChecklistItem, Confirm, Message
from testkit.slack_standin import validate_blocks


def assert_valid(payload):
    error, details = validate_blocks(payload["blocks"])
    assert error is None, details
    assert len(json.dumps(payload["blocks"])) < 11_000
    assert len(payload["blocks"]) <= 50


def test_huge_message_is_trimmed_within_limits_and_keeps_the_log_end():
    lines = [f"line {i} " + "x" * 200 for i in range(500)]
    message = Message(
        title="T" * 400,
        text="word " * 3000,
        evidence="e" * 9000,
        code=lines,
        code_title="log",
        checklist=[
            ChecklistItem(title=f"step {i} " + "y" * 100, state="done", elapsed_s=i)
            for i in range(80)
        ],
        buttons=[
            Button(
                label="L" * 100,
                action="spark_cancel",
                value="v" * 3000,
                style="danger",
                confirm=Confirm(title="c" * 200, text="t" * 500, confirm="y" * 50, deny="n" * 50),
            )
        ],
        mention="U0ALICE",
        footer="f" * 5000,
        attachment=Attachment(filename="a.log", title="a", content="x"),
    )
    payload = to_slack(message)
    assert_valid(payload)
    assert "line 499" in json.dumps(payload["blocks"])
    assert payload["text"].startswith("<@U0ALICE>") and len(payload["text"]) <= 3000
    assert payload["attachments"][0]["color"] == "#2eb67d" or payload["attachments"][0]["color"]


def test_checklist_states_and_tone_colour():
    message = Message(
        title="Launch",
        tone="failure",
        footer="failed",
        checklist=[
            ChecklistItem(title="a", state="done", elapsed_s=1.25),
            ChecklistItem(title="b", state="failed"),
            ChecklistItem(title="c", state="pending"),
        ],
    )
    payload = to_slack(message)
    assert_valid(payload)
    section = payload["blocks"][1]["text"]["text"]
    assert section == "✅ a _1.2s_\n❌ b\n⬜ c"
    assert payload["attachments"][0]["color"] == "#e01e5a"


def test_a_plain_reply_has_no_colour_bar():
    payload = to_slack(Message(title="Status", text="ok"))
    assert "attachments" not in payload
    assert_valid(payload)


def test_a_log_whose_escaping_more_than_doubles_still_fills_its_section():
    # every character escapes to 4-5 (`<` -> `&lt;`, `&` -> `&amp;`): shrinking by the escaped
    # overflow measured against the raw length once left a few dozen characters of ~2,900
    shell = "cmd <in >out 2>&1 && echo <&3 >&2 " * 400
    payload = to_slack(Message(title="redirections", evidence=shell, code=[shell] * 3))
    assert_valid(payload)
    sections = [b["text"]["text"] for b in payload["blocks"] if b.get("type") == "section"]
    evidence = next(s for s in sections if s.startswith("*Evidence*"))
    log = next(s for s in sections if s.startswith("```"))
    assert len(evidence) > 1_400, len(evidence)  # its budget is 1,500
    assert len(log) > 2_700, len(log)  # its budget is 2,900
    assert all(len(s) <= 3_000 for s in sections)
