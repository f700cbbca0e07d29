"""The bot moves what it was built from out of the garbage collector's way once it is up
(bot.app.settle_heap; why: docs/performance.md, the log flood)."""

from __future__ import annotations

import gc
import io

import pytest

import bot.app
from tests.handlers.helpers import bot_config, lines

pytestmark = pytest.mark.timeout(60)


def test_settling_freezes_what_exists():
    made = [object() for _ in range(3)] + [[] for _ in range(1000)]
    before = gc.get_freeze_count()
    bot.app.settle_heap()
    assert gc.get_freeze_count() >= before + 1000, "the lists made above are frozen"
    assert made


async def test_the_console_settles_its_heap_once_up(tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(bot.app, "settle_heap", lambda: calls.append("settled"))
    await bot.app.run_console(
        bot_config(tmp_path, {}), {}, lines=lines("/spark help"), out=io.StringIO()
    )
    assert calls == ["settled"]
