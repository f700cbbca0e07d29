"""`spark-bot`: the command line. Each subcommand is one function; parsing stays here."""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import sys
from collections.abc import Callable, Sequence

import yaml

from bot.config import load_config
from bot.render_text import render
from cluster.config import resolve_secrets
from cluster.controller import Controller
from cluster.errors import SparkBotError
from cluster.events import Event, Failed
from cluster.signatures import diagnose

_SECRET_LOOKING = re.compile(r"TOKEN|SECRET|PASSWORD|PASSWD|API_KEY|PRIVATE", re.IGNORECASE)


def check_config(args: argparse.Namespace) -> int:
    config = load_config(args.config)
    data = config.model_dump(mode="json")
    container = data["cluster"]["container"]
    container["env"] = {
        key: ("***" if _SECRET_LOOKING.search(key) else value)
        for key, value in container["env"].items()
    }
    container["secret_env"] = {
        dest: f"${src} ({'set' if os.environ.get(src) else 'NOT SET'}, value hidden)"
        for dest, src in container["secret_env"].items()
    }
    print(f"# {args.config}: valid")
    print(yaml.safe_dump(data, sort_keys=False), end="")
    return 0


def _controller(args: argparse.Namespace) -> Controller:
    cluster = load_config(args.config).cluster
    return Controller(cluster, resolve_secrets(cluster, dict(os.environ)))


async def _print_events(events, as_json: bool) -> int:
    """Print each event as it comes; exit 1 when the operation failed (diagnosis on stderr)."""
    status = 0
    async for event in events:
        print(event.to_json() if as_json else render(event), flush=True)
        if isinstance(event, Failed):
            status = 1
            if as_json:
                print(f"spark-bot: {event.summary}\ncause: {event.cause}\nfix: {event.fix}", file=sys.stderr)
    return status


def _operation(method: str) -> Command:
    def run(args: argparse.Namespace) -> int:
        controller = _controller(args)
        kwargs = {}
        if method == "up":
            kwargs = {"replace": args.replace}
        elif method == "logs":
            if args.node is not None:
                args.node = _node_name(controller, args.node)
            kwargs = {"node": args.node, "lines": args.lines}
        events = getattr(controller, method)(**kwargs)
        return asyncio.run(_print_events(events, args.json))

    return run


def _node_name(controller: Controller, given: str) -> str:
    config = controller.config
    if given == "head":
        return config.head.name
    if given == "worker" and config.workers:
        return config.workers[0].name
    names = [n.name for n in config.nodes]
    if given not in names:
        raise SparkBotError(f"unknown node {given!r}: use head, worker or one of {', '.join(names)}")
    return given


def diagnose_log(args: argparse.Namespace) -> int:
    if args.file == "-":
        text = sys.stdin.read()
    else:
        try:
            with open(args.file, errors="replace") as handle:
                text = handle.read()
        except OSError as exc:
            raise SparkBotError(f"{args.file}: cannot read ({exc.strerror})") from exc
    found = diagnose(text.splitlines())
    if found is None:
        print("No known failure signature found in this log.")
        return 0
    print(f"{found.title}\n  evidence (line {found.line_number}): {found.evidence}")
    print(f"  cause: {found.cause}\n  fix:   {found.fix}")
    return 1


Command = Callable[[argparse.Namespace], int]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="spark-bot",
        description="Launch, verify, benchmark and watch a multi-node vLLM cluster.",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(name: str, handler: Command, help_text: str) -> argparse.ArgumentParser:
        sub = commands.add_parser(name, help=help_text, description=help_text)
        sub.set_defaults(handler=handler)
        return sub

    sub = command("check-config", check_config, "validate a config file and print it resolved")
    sub.add_argument("config", help="path to the YAML config")

    for name, help_text in [
        ("up", "launch the cluster and follow it checkpoint by checkpoint to Ready"),
        ("verify", "re-check a running cluster, checkpoint by checkpoint"),
        ("status", "a quick snapshot of the containers and the API"),
        ("logs", "the tail of a node's container log"),
        ("down", "stop and remove the containers on every node"),
        ("watch", "follow a running cluster until something fails"),
        ("preflight", "check every node without starting anything"),
    ]:
        sub = command(name, _operation(name), help_text)
        sub.add_argument("--config", required=True, help="path to the YAML config")
        sub.add_argument("--json", action="store_true", help="print events as JSON lines")
        if name == "up":
            sub.add_argument("--replace", action="store_true",
                             help="remove a leftover container with our name first")
        if name == "logs":
            sub.add_argument("node", nargs="?", help="head, worker or a node name (default: head)")
            sub.add_argument("--lines", type=int, default=50, choices=range(1, 5001),
                             metavar="N", help="how many lines (1-5000, default 50)")

    sub = command("diagnose", diagnose_log, "find the cause of a failure in a vLLM log")
    sub.add_argument("file", nargs="?", default="-", help="log file, or - for standard input")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        return args.handler(args)
    except SparkBotError as exc:
        print(f"spark-bot: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
