"""`spark-bot`: the command line. Each subcommand is one function; parsing stays here."""

from __future__ import annotations

import argparse
import os
import re
import sys
from collections.abc import Callable, Sequence

import yaml

from bot.config import load_config
from cluster.errors import SparkBotError

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
