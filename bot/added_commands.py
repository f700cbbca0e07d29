"""The CLI's commands that other packages add (the demo's `spark-bot demo`): each is an entry
point of the group `spark_bot.commands` naming an `AddedCommand`, so the CLI imports no such
package (they import it). An installed spark-bot (the wheel, or `scripts/python-env.sh`'s
editable install) holds the entry points pyproject.toml lists."""

from __future__ import annotations

import argparse
import importlib.metadata
from collections.abc import Callable
from dataclasses import dataclass

GROUP = "spark_bot.commands"


@dataclass(frozen=True)
class AddedCommand:
    """A subcommand: its one-line help, the example `spark-bot help` shows, its options and
    what it runs (the exit status)."""

    help: str
    example: str
    add_arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]


def added_commands() -> dict[str, AddedCommand]:
    """Every added command by name, in name order; loading one imports only its small module."""
    found = sorted(importlib.metadata.entry_points(group=GROUP), key=lambda entry: entry.name)
    return {entry.name: entry.load() for entry in found}
