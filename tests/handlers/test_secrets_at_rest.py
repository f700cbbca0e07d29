"""A token pasted into a chat command is neither stored nor shown back.

Driven through the console adapter (the same dispatcher and store as Slack); the commands are
refused before anything would reach a node.
"""

from __future__ import annotations

import io
import sqlite3
from pathlib import Path

import pytest

from bot.app import run_console
from handlers.store import Store
from tests.handlers.helpers import bot_config, lines

pytestmark = pytest.mark.timeout(60)

SLACK = "xoxb-1234567890-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx"
HF = "hf_AbCdEfGhIjKlMnOpQrStUvWxYz01234567"
OPENAI = "sk-proj-Ab3dEf6hIj9kLm2nOp5qRs8tUv1wXy4zAb3dEf6hIj9k"
GITHUB = "ghp_Ab3dEf6hIj9kLm2nOp5qRs8tUv1wXy4zAb3d"
TOKENS = [SLACK, HF, OPENAI, GITHUB]


def fragments(token: str, size: int = 10) -> list[str]:
    """Every piece of `token` long enough to matter if it leaked."""
    return [token[i : i + size] for i in range(len(token) - size + 1)]


def every_stored_value(db_path: Path) -> list[str]:
    with sqlite3.connect(db_path) as db:
        tables = [row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        return [
            str(value)
            for table in tables
            for row in db.execute(f"SELECT * FROM {table}")
            for value in row
            if value is not None
        ]


async def test_tokens_pasted_into_commands_are_neither_stored_nor_shown(tmp_path):
    out = io.StringIO()
    commands = [
        f"/spark up {SLACK}",
        f"/spark bench {HF}",
        f"/spark bench max_tokens={OPENAI}",
        f"/spark up max_model_len={GITHUB}",
        f"/spark up {'x' * 185} {HF}",  # the audit keeps 200 characters: the cut falls inside the token
    ]
    assert await run_console(bot_config(tmp_path), {}, lines=lines(*commands), out=out) == 0
    stored = every_stored_value(tmp_path / "spark-bot.db")
    with sqlite3.connect(tmp_path / "spark-bot.db") as db:
        audited = [
            row[0] for row in db.execute("SELECT command FROM audit WHERE outcome LIKE 'invalid:%'")
        ]
    assert len(audited) == len(commands) and all("***" in text for text in audited), audited
    shown = out.getvalue()
    assert shown.count("That is not a /spark command I can run") == len(commands)
    for token in TOKENS:
        for piece in fragments(token):
            assert not any(piece in value for value in stored), (piece, stored)
            assert piece not in shown, (piece, shown)


async def test_the_store_masks_command_text_and_outcomes_whoever_writes_them(tmp_path):
    store = Store(tmp_path / "db.sqlite")
    await store.open()
    try:
        record = await store.create_job("lab", f"up {SLACK}", "U0ALICE", "C0SPARKOPS")
        await store.finish_job(record.id, "failed", f"the node said {HF}")
        await store.audit("U0ALICE", "C0SPARKOPS", f"bench {OPENAI}", f"error: {GITHUB}", record.id)
        job, [audit] = await store.job(record.id), await store.audit_trail()
    finally:
        await store.close()
    assert (job.command, job.outcome) == ("up ***", "the node said ***")
    assert (audit["command"], audit["outcome"]) == ("bench ***", "error: ***")
