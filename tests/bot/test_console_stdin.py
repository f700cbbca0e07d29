"""The console's standard input: a pipe, a terminal's stand-in (a pipe kept open), a regular
file and /dev/null each give their lines and then end, without blocking the loop (`spark-bot demo
< /dev/null` once waited forever: epoll refuses /dev/null, and the loop's reader never started)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# A guard against a reader that never ends, not a speed: on a loaded machine the interpreter and
# its imports alone can take tens of seconds to start.
HANG = 120
# Prints each line it reads; a ticker on the same loop proves the reads never block it.
READER = """
import asyncio
from bot.console import stdin_lines

async def main():
    ticks = 0
    async def tick():
        nonlocal ticks
        while True:
            ticks += 1
            await asyncio.sleep(0)
    ticker = asyncio.create_task(tick())
    async for line in stdin_lines():
        print(repr(line), flush=True)
    ticker.cancel()
    print("END", ticks > 0, flush=True)

asyncio.run(main())
"""


def read_with(stdin) -> list[str]:
    done = subprocess.run(
        [sys.executable, "-c", READER], stdin=stdin, capture_output=True, text=True,
        cwd=ROOT, timeout=HANG, check=True,
    )  # fmt: skip
    assert done.stderr == "", done.stderr
    return done.stdout.splitlines()


def test_dev_null_ends_at_once():
    with open("/dev/null") as devnull:
        assert read_with(devnull) == ["END True"]


def test_a_regular_file_gives_its_lines_then_ends(tmp_path):
    commands = tmp_path / "commands.txt"
    commands.write_text("/spark status\n\n/spark logs worker\n")
    with commands.open() as stdin:
        assert read_with(stdin) == ["'/spark status'", "''", "'/spark logs worker'", "END True"]


@pytest.mark.parametrize("text", ["/spark help\n/spark up\n", "no newline at the end"])
def test_a_pipe_gives_its_lines_then_ends_at_eof(text):
    process = subprocess.Popen(
        [sys.executable, "-c", READER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        cwd=ROOT,
    )  # fmt: skip
    out, _ = process.communicate(text, timeout=HANG)
    assert out.splitlines() == [repr(line) for line in text.splitlines()] + ["END True"]
