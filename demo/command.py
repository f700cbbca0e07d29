"""`spark-bot demo`: the command the demo adds to the CLI (the entry point `demo` of the group
`spark_bot.commands` in pyproject.toml names `COMMAND`), so bot/ never imports the demo. The
demo and its emulator are imported only when the command runs, never when the CLI starts."""

from __future__ import annotations

import argparse

from bot.added_commands import AddedCommand
from cluster.errors import SparkBotError


def _arguments(sub: argparse.ArgumentParser) -> None:
    sub.add_argument(
        "--run",
        action="append",
        metavar="COMMAND",
        help='a command to run, e.g. "/spark up" (repeatable); without it, read standard input',
    )
    sub.add_argument(
        "--fault",
        metavar="FAULT",
        help="inject one of the emulator's faults (e.g. nccl_error, oom; a wrong name lists them)",
    )


def _run(args: argparse.Namespace) -> int:
    from demo.session import main
    from lab.emulator.faults import FAULTS

    if args.fault is not None and args.fault not in FAULTS:
        raise SparkBotError(
            f"unknown fault {args.fault!r}; the emulator's faults: {', '.join(sorted(FAULTS))}"
        )
    return main(args.run or [], args.fault)


COMMAND = AddedCommand(
    help="the bot on an embedded two-node cluster: no Slack, Sparks, Docker or root",
    example='demo --run "/spark up"',
    add_arguments=_arguments,
    run=_run,
)
