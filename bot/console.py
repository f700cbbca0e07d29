"""The console adapter: the same handlers in a terminal. Type `/spark up`; parent messages,
their edits and thread replies are printed; a confirmation (before a job, or a job's question in
its thread) is a y/N prompt (or `--yes`)."""

from __future__ import annotations

import asyncio
import itertools
import re
import selectors
import sys
from collections.abc import AsyncGenerator, AsyncIterator
from pathlib import Path
from typing import TextIO

from bot.slack_blocks import ICONS
from handlers.chat import Posted
from handlers.command_context import Invocation
from handlers.dispatch import Action, Dispatcher
from handlers.messages import (
    CONFIRM_ACTION,
    KEEP_ACTION,
    REPLACE_ACTION,
    Attachment,
    Button,
    Message,
    unescape,
)

CONSOLE_USER = "console"
CONSOLE_CHANNEL = "console"

_MARKUP = [
    (re.compile(r"<@([A-Za-z0-9]+)>"), r"@\1"),
    (re.compile(r"<#([A-Za-z0-9]+)>"), r"#\1"),
    (re.compile(r"<([^|>]+)\|([^>]+)>"), r"\2 (\1)"),
]


def plain(text: str) -> str:
    """Markup -> terminal text: mentions and links spelled out, escaped text shown as it was."""
    for pattern, replacement in _MARKUP:
        text = pattern.sub(replacement, text)
    return unescape(text)


def render_message(message: Message, *, prefix: str = "") -> str:
    lines = [f"{prefix}┌ {plain(message.title)}"]
    lines += [f"{prefix}│ {plain(x)}" for x in message.text.splitlines()]
    for item in message.checklist:
        took = f" ({item.elapsed_s:.1f}s)" if item.elapsed_s is not None else ""
        note = f" — {plain(item.note)}" if item.note else ""
        lines.append(f"{prefix}│ {ICONS[item.state]} {plain(item.title)}{took}{note}")
    if message.evidence:
        lines += [f"{prefix}│ evidence: {x}" for x in message.evidence.splitlines()]
    if message.code:
        if message.code_title:
            lines.append(f"{prefix}│ {message.code_title}:")
        lines += [f"{prefix}│   | {x}" for x in message.code]
    for button in message.buttons:
        lines.append(f"{prefix}│ [{button.label}]")
    lines.append(f"{prefix}└ {plain(message.footer or '')}".rstrip())
    return "\n".join(lines)


class ConsoleChat:
    """The Chat port on a terminal. Files are written to `files_dir`."""

    def __init__(self, out: TextIO, files_dir: Path):
        self.out = out
        self.files_dir = files_dir
        self._ids = itertools.count(1)
        self.pending_confirmations: asyncio.Queue[Message] = asyncio.Queue()

    def _print(self, text: str) -> None:
        print(text, file=self.out, flush=True)

    async def post(
        self, channel: str, message: Message, *, thread: str | None = None, broadcast: bool = False
    ) -> Posted:
        ts = str(next(self._ids))
        if thread is None:
            self._print(render_message(message) + f"  [#{ts}]")
        else:
            loud = " (also in the channel)" if broadcast else ""
            self._print(render_message(message, prefix=f"  #{thread} ↳ ") + loud)
            if any(b.action == REPLACE_ACTION for b in message.buttons):  # a job's question
                await self.pending_confirmations.put(message)
        return Posted(channel, ts)

    async def update(self, posted: Posted, message: Message) -> None:
        done = sum(1 for i in message.checklist if i.state == "done")
        unchecked = sum(1 for i in message.checklist if i.state == "not_checked")
        status = (
            f"{done}/{len(message.checklist)} done"
            + (f", {unchecked} not checked" if unchecked else "")
            if message.checklist
            else message.tone
        )
        self._print(f"  #{posted.ts} ↻ {status}  {plain(message.footer or '')}".rstrip())

    async def upload(self, channel: str, thread: str, attachment: Attachment, comment: str) -> None:
        path = await self._save(f"{thread}-{attachment.filename}", attachment)
        self._print(f"  #{thread} ↳ 📎 {attachment.title}: {path}")

    async def upload_private(self, user: str, attachment: Attachment, comment: str) -> None:
        path = await self._save(attachment.filename, attachment)
        self._print(f"📎 {comment}: {path}")

    async def _save(self, name: str, attachment: Attachment) -> Path:
        await asyncio.to_thread(self.files_dir.mkdir, parents=True, exist_ok=True)
        path = self.files_dir / name
        # a log file can be megabytes: written in a thread, not on the event loop
        if isinstance(attachment.content, bytes):
            await asyncio.to_thread(path.write_bytes, attachment.content)
        else:
            await asyncio.to_thread(path.write_text, attachment.content)
        return path

    async def reply_private(
        self, channel: str, user: str, message: Message, *, reply_to: str | None = None
    ) -> None:
        self._print(render_message(message))
        if any(b.action == CONFIRM_ACTION for b in message.buttons):
            await self.pending_confirmations.put(message)

    async def permalink(self, posted: Posted) -> str | None:
        return None

    def without_waiting(self) -> ConsoleChat:
        return self


async def stdin_lines() -> AsyncGenerator[str, None]:
    """Standard input's lines (without the newline), never blocking the loop: a pipe or a
    terminal is read through the loop; what the loop cannot poll (a regular file, /dev/null)
    never blocks a read, so it is read line by line in a thread."""
    if not _pollable(sys.stdin.fileno()):
        while line := await asyncio.to_thread(sys.stdin.readline):
            yield line.rstrip("\n")
        return
    reader = asyncio.StreamReader()
    transport, _ = await asyncio.get_running_loop().connect_read_pipe(
        lambda: asyncio.StreamReaderProtocol(reader), sys.stdin
    )
    try:
        while line_bytes := await reader.readline():
            yield line_bytes.decode(errors="replace").rstrip("\n")
    finally:
        transport.close()


def _pollable(fd: int) -> bool:
    """Whether the event loop can wait on `fd` (epoll refuses regular files and /dev/null)."""
    with selectors.DefaultSelector() as selector:
        try:
            selector.register(fd, selectors.EVENT_READ)
        except (PermissionError, ValueError):
            return False
    return True


class Console:
    """Reads commands line by line; waits for each command's work before reading the next."""

    def __init__(self, dispatcher: Dispatcher, chat: ConsoleChat, *, assume_yes: bool = False):
        self.dispatcher = dispatcher
        self.chat = chat
        self.assume_yes = assume_yes
        self._waits: set[asyncio.Future[None]] = set()

    async def run(self, lines: AsyncIterator[str]) -> None:
        self.chat._print("spark-bot console: type `/spark help`, `/spark up`, … (Ctrl-D quits)")
        lines = aiter(lines)
        try:
            async for line in lines:
                text = line.strip()
                if not text:
                    continue
                if text in {"quit", "exit"}:
                    break
                text = text.removeprefix("/spark").strip()
                reply = await self.dispatcher.command(
                    Invocation(CONSOLE_USER, CONSOLE_CHANNEL, text)
                )
                if reply is not None:
                    await self.chat.reply_private(CONSOLE_CHANNEL, CONSOLE_USER, reply)
                await self._settle(lines)
        finally:
            await self.dispatcher.stop()

    async def _settle(self, lines: AsyncIterator[str]) -> None:
        """Wait for the command's work; answer the confirmations it asks for: before its job
        (a Confirm button), or from inside it (a job's question in its thread, which it waits on)."""
        while (question := await self._next_question()) is not None:
            yes, no = _answers(question)
            if self.assume_yes:
                answer = "y"
            else:
                self.chat._print(f"{yes.label}? [y/N] ")
                answer = (await anext(lines, "")).strip().lower()
            button = yes if answer in {"y", "yes"} else no
            if button is None:
                self.chat._print("Not confirmed: nothing was done.")
                continue
            reply = await self.dispatcher.action(
                Action(CONSOLE_USER, CONSOLE_CHANNEL, button.action, button.value)
            )
            if reply is not None:
                self.chat._print(render_message(reply))

    async def _next_question(self) -> Message | None:
        """The next question asked; None once the command's work is done without one."""
        pending = self.chat.pending_confirmations
        if pending.empty():
            # not cancelled when a question comes first: idle() gathers the jobs, and a cancelled
            # gather cancels what it gathers; it ends with them
            idle = asyncio.ensure_future(self.dispatcher.idle())
            self._waits.add(idle)
            idle.add_done_callback(self._waits.discard)
            asked = asyncio.ensure_future(pending.get())
            await asyncio.wait({idle, asked}, return_when=asyncio.FIRST_COMPLETED)
            if asked.done():
                return asked.result()
            asked.cancel()  # (a cancelled get leaves the queue as it was)
            await asyncio.gather(asked, return_exceptions=True)
        return None if pending.empty() else pending.get_nowait()


def _answers(question: Message) -> tuple[Button, Button | None]:
    """A question's yes button, and its "keep it" one (a Confirm button has none: not clicking
    it is the no)."""
    yes = next(b for b in question.buttons if b.action in {CONFIRM_ACTION, REPLACE_ACTION})
    return yes, next((b for b in question.buttons if b.action == KEEP_ACTION), None)
