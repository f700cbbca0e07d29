"""What the chat and the CLI show of the cluster's words (errors, summaries) has tokens masked."""

from __future__ import annotations

import asyncio
import json

import pytest

from bot.cli import _print_events
from bot.console import render_message
from cluster.events import Failed
from handlers.render import failure_message

TOKEN = "hf_AbCdEfGhIjKlMnOpQrStUvWxYz01234567"


def failure() -> Failed:
    return Failed(
        elapsed_s=1.0,
        checkpoint="containers",
        title="Containers",
        node="spark-a",
        summary=f"create failed: invalid env HF_TOKEN={TOKEN}",
        cause=f"Docker quoted {TOKEN}",
        fix="check secret_env",
    )


def test_a_token_in_an_error_is_masked_in_the_chat_message():
    message = failure_message(failure(), "U0ALICE")
    assert TOKEN not in message.text and "invalid env HF_TOKEN=***" in message.text
    assert TOKEN not in render_message(message)


@pytest.mark.parametrize("as_json", [False, True])
def test_a_token_in_an_event_is_masked_on_the_command_line(capsys, as_json):
    async def events():
        yield failure()

    assert asyncio.run(_print_events(events(), as_json)) == 1
    printed = capsys.readouterr()
    assert TOKEN not in printed.out + printed.err and "HF_TOKEN=***" in printed.out
    if as_json:
        assert json.loads(printed.out)["summary"] == "create failed: invalid env HF_TOKEN=***"
