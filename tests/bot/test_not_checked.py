"""A check that could not run is its own state: in the event and its JSON, the CLI's text, the
Slack checklist, the console, and `Ready`'s list of what was not verified."""

from __future__ import annotations

from bot.render_text import render
from bot.slack_blocks import checklist_lines
from cluster.events import Ready, parse_event
from cluster.progress.checkpoints import BY_ID
from cluster.progress.reporter import Reporter
from handlers.messages import ChecklistItem, Message
from handlers.render import ready_message

WHY = "no container mount holds the Hugging Face cache (/root/.cache/huggingface)"


def test_the_event_says_not_checked_and_why_and_survives_json():
    reporter = Reporter()
    event = reporter.unchecked(BY_ID["model"], WHY, f"spark-a: not checked: {WHY}")
    assert event.state == "not_checked" and event.not_checked == WHY
    again = parse_event(event.to_json())
    assert again == event and again.state == "not_checked"  # type: ignore[union-attr]
    assert reporter.not_checked == [f"The model complete on every node: {WHY}"]
    passed = reporter.passed(BY_ID["memory"], "MemAvailable 100 GiB")
    assert passed.state == "passed" and reporter.not_checked == [
        f"The model complete on every node: {WHY}"
    ]


def test_the_cli_shows_it_apart_from_a_pass():
    event = Reporter().unchecked(BY_ID["fit"], WHY, "cannot estimate")
    first = render(event).splitlines()[0]
    assert "➖ The model fits" in first and f"not checked: {WHY}" in first and "✔" not in first


def test_slack_and_the_console_show_a_third_state():
    message = Message(
        title="up",
        text="",
        checklist=[
            ChecklistItem(title="Free memory for the model", state="done"),
            ChecklistItem(
                title="The model complete on every node",
                state="not_checked",
                note=f"not checked: {WHY}",
            ),
        ],
    )
    done, unchecked = checklist_lines(message)
    assert done.startswith("✅") and unchecked.startswith("➖")
    assert f"not checked: {WHY}" in unchecked


def test_ready_lists_what_was_not_verified():
    ready = Ready(
        elapsed_s=1.0,
        model="m",
        api_url="http://h:8000",
        not_verified=[f"The model complete on every node: {WHY}"],
    )
    assert f"➖ Not verified: The model complete on every node: {WHY}" in ready_message(ready).text
    assert f"➖ not verified: The model complete on every node: {WHY}" in render(ready)
