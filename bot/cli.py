"""`spark-bot`: the command line. Each subcommand is one function; parsing stays here."""

from __future__ import annotations

import argparse
import asyncio
import getpass
import importlib.metadata
import os
import shlex
import sys
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path

import yaml

from bot.added_commands import added_commands
from bot.config import load_config, load_knowledge
from bot.logs import (
    FORMAT_VARIABLE,
    LEVEL_VARIABLE,
    LOG_FORMATS,
    LOG_LEVELS,
    configure_logging,
    log_settings,
)
from bot.render_text import render
from cluster.bench.depth import MAX_DEPTH, parse_depths
from cluster.bench.history import JsonLinesHistory
from cluster.bench.models import BenchReport
from cluster.bench.runner import (
    DEFAULT_PROMPT,
    MAX_CONCURRENCY,
    MAX_REQUESTS,
    MAX_RUNS,
    MAX_TOKENS,
    BenchOptions,
)
from cluster.config import ClusterConfig, resolve_secrets, shown_cluster
from cluster.controller import Controller
from cluster.diagnosis.explain import as_text, explain
from cluster.diagnosis.failures import with_knowledge
from cluster.errors import SparkBotError
from cluster.events import Failed, Removed, StatusReport
from cluster.operations.fabric_report import FabricTestReport
from cluster.operations.fabric_test import DEFAULT_SECONDS, MAX_SECONDS
from cluster.redact import redact
from handlers.commands import check_bench, parse_concurrency, resolve_node
from handlers.errors import CommandError
from handlers.specs import SPECS, chat_usage

# One example per subcommand, shown by `spark-bot help` (tests parse each one).
EXAMPLES = {
    "check-config": "check-config configs/sparks.yaml",
    "up": "up --config configs/sparks.yaml",
    "verify": "verify --config configs/sparks.yaml",
    "status": "status --config configs/sparks.yaml --json",
    "recipes": "recipes --config configs/sparks.yaml",
    "diag": "diag --config configs/sparks.yaml",
    "logs": "logs worker --lines 200 --config configs/sparks.yaml",
    "down": "down --config configs/sparks.yaml",
    "watch": "watch --config configs/sparks.yaml",
    "preflight": "preflight --config configs/sparks.yaml",
    "sync-image": "sync-image --config configs/sparks.yaml",
    "sync-model": "sync-model --config configs/sparks.yaml",
    "drop-caches": "drop-caches --config configs/sparks.yaml",
    "bench": "bench --config configs/sparks.yaml --concurrency 1,2,4 --max-tokens 256",
    "fabric-test": "fabric-test --config configs/sparks.yaml --seconds 5",
    "run": "run --config configs/sparks.yaml",
    "console": "console --config configs/sparks.yaml",
    "diagnose": "diagnose vllm.log",
    "help": "help",
}


def package_version() -> str:
    try:
        return importlib.metadata.version("spark-bot")
    except importlib.metadata.PackageNotFoundError:
        return "unknown (not installed: pip install .)"


def check_config(args: argparse.Namespace) -> int:
    config = load_config(args.config)
    data = config.model_dump(mode="json")
    data["cluster"] = shown_cluster(config.cluster, os.environ)
    print(f"# {args.config}: valid")
    # the whole text too: a token may sit elsewhere (serve.extra_args: --api-key=sk-...)
    print(redact(yaml.safe_dump(data, sort_keys=False)), end="")
    return 0


# What runs a model takes its recipe (--recipe, else the config's own `recipe`); what looks at
# or removes the containers (status, logs, down, recipes) works on every node of the cluster.
_RECIPE_COMMANDS = ("up", "verify", "watch", "preflight", "bench", "sync-image", "sync-model")
# What looks at a running server without --recipe: the recipe its head container was started with
_FOLLOWS_THE_RUNNING_RECIPE = ("verify", "watch", "bench")


def _cli_who() -> str:
    """Whose launch a shell's `up` is, as another launch's refusal names it."""
    try:
        return f"`spark-bot` from a shell of {getpass.getuser()}"
    except (KeyError, OSError):  # a uid with no name (a container's)
        return f"`spark-bot` from a shell of uid {os.getuid()}"


def _controller(args: argparse.Namespace) -> Controller:
    cluster = load_config(args.config).cluster
    if args.command in _RECIPE_COMMANDS:
        recipe = args.recipe
        if recipe is None and args.command in _FOLLOWS_THE_RUNNING_RECIPE and cluster.recipes:
            recipe = asyncio.run(_running_recipe(cluster))
        cluster = cluster.with_recipe(recipe)
    return Controller(cluster, resolve_secrets(cluster, dict(os.environ)), who=_cli_who())


async def _running_recipe(cluster: ClusterConfig) -> str | None:
    """The recipe of the head's running container (its label, or the recipe whose launcher
    names it), if it is one of the config's."""
    controller = Controller(cluster, resolve_secrets(cluster, dict(os.environ)))
    reports = [e async for e in controller.status() if isinstance(e, StatusReport)]
    for head in (c for report in reports for c in report.containers):
        if head.node == cluster.head.name and head.running and head.recipe in cluster.recipes:
            return head.recipe
    return None


async def _print_events(events, as_json: bool, config: Path | None = None) -> int:
    """Print each event as it comes; exit 1 when the operation failed (diagnosis on stderr).
    A failure a command fixes ends with that command, for this config."""
    status = 0
    async for event in events:
        print(redact(event.to_json() if as_json else render(event)), flush=True)
        if isinstance(event, Removed) and event.failed:
            status = 1  # something may be left: `down` did not do all it was asked
        if isinstance(event, Failed):
            status = 1
            remedy = (
                f"spark-bot {event.remedy} --config {shlex.quote(str(config))}"
                if event.remedy and config
                else None
            )
            if as_json:
                print(
                    redact(f"spark-bot: {event.summary}\ncause: {event.cause}\nfix: {event.fix}")
                    + (f"\nrun: {remedy}" if remedy else ""),
                    file=sys.stderr,
                )
            elif remedy:
                print(f"    run:      {remedy}", flush=True)
    return status


def _operation(method: str) -> Command:
    def run(args: argparse.Namespace) -> int:
        controller = _controller(args)
        kwargs = {}
        if method == "up":
            kwargs = {"replace": args.replace, "take_over": args.take_over}
        elif method == "logs":
            if args.node is not None:
                args.node = resolve_node(
                    args.node, controller.config
                )  # a CommandError is reported by main()
            kwargs = {"node": args.node, "lines": args.lines}
        events = getattr(controller, method.replace("-", "_"))(**kwargs)
        return asyncio.run(_print_events(events, args.json, args.config))

    return run


def _concurrency_list(text: str) -> list[int]:
    """`1,2,4` -> [1, 2, 4], as the chat parses it; the ranges are checked with the other options."""
    try:
        return parse_concurrency(text)
    except CommandError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def _depth_list(text: str) -> list[int]:
    """`1k,4k` -> [1024, 4096], as the chat parses it; the ranges are checked later."""
    try:
        return parse_depths(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def _bounded_int(low: int, high: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"{value} is not between {low} and {high}")
        return value

    return parse


def _default_history(name: str = "bench-history.jsonl") -> Path:
    state = os.environ.get("XDG_STATE_HOME") or os.path.expanduser("~/.local/state")
    return Path(state) / "spark-bot" / name


FABRIC_HISTORY = "fabric-history.jsonl"


def fabric_test(args: argparse.Namespace) -> int:
    controller = _controller(args)
    history = JsonLinesHistory(args.history or _default_history(FABRIC_HISTORY), FabricTestReport)
    events = controller.fabric_test(
        seconds=args.seconds, history=None if args.no_history else history
    )
    return asyncio.run(_print_events(events, args.json))


def bench(args: argparse.Namespace) -> int:
    options = BenchOptions(
        prompt=args.prompt,
        max_tokens=args.max_tokens,
        runs=args.runs,
        concurrency=tuple(args.concurrency or ()),
        requests_per_level=args.requests,
        depth=tuple(args.depth or ()),
        allow_busy=args.allow_busy,
    )
    check_bench(options)  # the same rules and messages as `/spark bench`, the tool's own limits
    controller = _controller(args)
    events = controller.bench(
        concurrency=options.concurrency,
        max_tokens=options.max_tokens,
        runs=options.runs,
        prompt=options.prompt,
        requests_per_level=options.requests_per_level,
        depth=options.depth,
        allow_busy=options.allow_busy,
        history=None
        if args.no_history
        else JsonLinesHistory(args.history or _default_history(), BenchReport),
    )
    return asyncio.run(_print_events(events, args.json))


def diagnose_log(args: argparse.Namespace) -> int:
    if args.file == "-":
        text = sys.stdin.read()
    else:
        try:
            with open(args.file, errors="replace") as handle:
                text = handle.read()
        except OSError as exc:
            raise SparkBotError(f"{args.file}: cannot read ({exc.strerror})") from exc
    knowledge = load_knowledge(args.extra) if args.extra else None
    explained = explain(text.splitlines(), with_knowledge(knowledge), knowledge)
    if args.json:
        print(explained.model_dump_json(indent=2))
    else:
        print(as_text(explained, details=args.explain))
    return 1 if explained.verdict == "failed" else 0


def _configure_logging(args: argparse.Namespace, default_level: str) -> None:
    level, log_format = log_settings(
        os.environ, level=args.log_level, log_format=args.log_format, default_level=default_level
    )
    configure_logging(os.environ, level, log_format)


def diag(args: argparse.Namespace) -> int:
    controller = _controller(args)
    output = args.output or Path(
        f"spark-diag-{controller.config.name}-{datetime.now(UTC):%Y%m%d-%H%M%S}.tar.gz"
    )
    events = controller.diagnostics(
        output,
        events_note="collected with `spark-bot diag` (no job: the bot's jobs are in its own "
        "database; `/spark diag` in the job's channel adds them)",
        log_lines=args.lines,
    )
    return asyncio.run(_print_events(events, args.json))


def run_bot(args: argparse.Namespace) -> int:
    from bot.app import run_slack

    _configure_logging(args, "info")
    http = True if args.http else None
    return asyncio.run(run_slack(load_config(args.config), os.environ, http=http, port=args.port))


def run_console(args: argparse.Namespace) -> int:
    from bot.app import run_console as console

    _configure_logging(args, "warning")  # the terminal shows the replies; the logs only warn
    return asyncio.run(console(load_config(args.config), os.environ, assume_yes=args.yes))


def show_help(args: argparse.Namespace) -> int:
    print(f"spark-bot {package_version()}: {DESCRIPTION}\n")
    print("Commands (`spark-bot COMMAND --help` lists each one's options):")
    parser = _parser()
    for name, sub in parser.commands.choices.items():
        print(f"  {name:<13} {sub.description}\n  {'':<13} e.g. spark-bot {parser.examples[name]}")
    print("\nIn Slack (`/spark …`), `spark-bot console` and `spark-bot demo`:")
    for line in chat_usage().replace("`", "").splitlines():
        print(f"  {line}")
    return 0


Command = Callable[[argparse.Namespace], int]
DESCRIPTION = "launch, verify, benchmark and watch a multi-node vLLM cluster"


def _logging_options(sub: argparse.ArgumentParser, default: str) -> None:
    sub.add_argument(
        "--log-level",
        type=str.lower,
        choices=LOG_LEVELS,
        default=None,
        help=f"the least severe records logged (default: ${LEVEL_VARIABLE}, else {default})",
    )
    sub.add_argument(
        "--log-format",
        type=str.lower,
        choices=LOG_FORMATS,
        default=None,
        help=f"text, or json: one object a line (default: ${FORMAT_VARIABLE}, else text)",
    )


def _recipe_option(sub: argparse.ArgumentParser) -> None:
    sub.add_argument(
        "--recipe",
        metavar="NAME",
        default=None,
        help="run this recipe of the config (default: verify, watch and bench the recipe the "
        "running server was started with; otherwise the config's `recipe`, else its own serve)",
    )


class _Parser(argparse.ArgumentParser):
    commands: argparse._SubParsersAction[_Parser]
    examples: dict[str, str]


def _parser() -> _Parser:
    parser = _Parser(prog="spark-bot", description=DESCRIPTION[0].upper() + DESCRIPTION[1:] + ".")
    parser.add_argument("--version", action="version", version=f"spark-bot {package_version()}")
    commands = parser.commands = parser.add_subparsers(
        dest="command", required=True, metavar="COMMAND"
    )
    parser.examples = dict(EXAMPLES)

    def command(name: str, handler: Command, help_text: str) -> argparse.ArgumentParser:
        sub = commands.add_parser(name, help=help_text, description=help_text)
        sub.set_defaults(handler=handler)
        return sub

    sub = command("check-config", check_config, "validate a config file and print it resolved")
    sub.add_argument("config", help="path to the YAML config")

    shared_with_chat = [
        (name, SPECS[name].summary)
        for name in ("up", "verify", "status", "recipes", "logs", "down")
    ]
    for name, help_text in [
        *shared_with_chat,
        ("watch", "follow a running cluster until something fails"),
        ("preflight", "check every node without starting anything"),
        ("sync-image", SPECS["sync-image"].summary),
        ("sync-model", SPECS["sync-model"].summary),
        ("drop-caches", SPECS["drop-caches"].summary),
    ]:
        sub = command(name, _operation(name), help_text)
        sub.add_argument("--config", required=True, help="path to the YAML config")
        sub.add_argument("--json", action="store_true", help="print events as JSON lines")
        if name in _RECIPE_COMMANDS:
            _recipe_option(sub)
        if name == "up":
            sub.add_argument(
                "--replace",
                action="store_true",
                help="remove a leftover container spark-bot started (never one it did not start) first",
            )
            sub.add_argument(
                "--take-over",
                action="store_true",
                help="take the lease from another launch that is running now (the Slack bot's, a "
                "console's, another shell's); with --replace its containers are removed and it "
                "fails. Without it `up` refuses",
            )
        if name == "logs":
            sub.add_argument("node", nargs="?", help="head, worker or a node name (default: head)")
            sub.add_argument(
                "--lines",
                type=_bounded_int(1, 5000),
                default=50,
                metavar="N",
                help="how many lines (1-5000, default 50)",
            )

    sub = command("diag", diag, SPECS["diag"].summary)
    sub.add_argument("--config", required=True, help="path to the YAML config")
    sub.add_argument(
        "--output",
        type=Path,
        default=None,
        metavar="PATH",
        help="where to write the .tar.gz (default ./spark-diag-CLUSTER-TIME.tar.gz)",
    )
    sub.add_argument(
        "--lines",
        type=_bounded_int(1, 100_000),
        default=2000,
        metavar="N",
        help="container log lines per node (1-100000, default 2000)",
    )
    sub.add_argument("--json", action="store_true", help="print events as JSON lines")

    sub = command("bench", bench, SPECS["bench"].summary)
    sub.add_argument("--config", required=True, help="path to the YAML config")
    _recipe_option(sub)
    sub.add_argument(
        "--concurrency",
        type=_concurrency_list,
        metavar="1,2,4",
        help=f"also sweep these concurrency levels (each 1-{MAX_CONCURRENCY})",
    )
    sub.add_argument(
        "--max-tokens",
        type=int,
        default=128,
        metavar="N",
        help=f"tokens per request (2-{MAX_TOKENS}, default 128; ignore_eos makes it exact)",
    )
    sub.add_argument(
        "--runs",
        type=int,
        default=3,
        metavar="N",
        help=f"measured single-stream runs after one warm-up (1-{MAX_RUNS}); the median is "
        "reported (default 3)",
    )
    sub.add_argument(
        "--requests",
        type=int,
        default=None,
        metavar="K",
        help=f"requests per concurrency level (1-{MAX_REQUESTS}; default: as many as the level)",
    )
    sub.add_argument(
        "--depth",
        type=_depth_list,
        metavar="1k,4k,16k",
        help="also measure TTFT, prefill tok/s and decode tok/s with prompts this many tokens "
        f"long (k = 1024; each 1-{MAX_DEPTH}; fitted with the server's /tokenize)",
    )
    sub.add_argument("--prompt", default=DEFAULT_PROMPT, help="the prompt (same for every request)")
    sub.add_argument(
        "--history",
        type=Path,
        default=None,
        metavar="PATH",
        help="JSON-lines history to compare with and append to "
        "(default $XDG_STATE_HOME/spark-bot/bench-history.jsonl)",
    )
    sub.add_argument("--no-history", action="store_true", help="neither compare nor record")
    sub.add_argument(
        "--allow-busy",
        action="store_true",
        help="measure even when the server already runs requests (a warning instead of a refusal)",
    )
    sub.add_argument("--json", action="store_true", help="print events as JSON lines")

    sub = command("fabric-test", fabric_test, SPECS["fabric-test"].summary)
    sub.add_argument("--config", required=True, help="path to the YAML config")
    sub.add_argument(
        "--seconds",
        type=_bounded_int(1, MAX_SECONDS),
        default=DEFAULT_SECONDS,
        metavar="N",
        help=f"how long each measurement runs (1-{MAX_SECONDS}, default {DEFAULT_SECONDS})",
    )
    sub.add_argument(
        "--history",
        type=Path,
        default=None,
        metavar="PATH",
        help="JSON-lines history to compare with and append to "
        f"(default $XDG_STATE_HOME/spark-bot/{FABRIC_HISTORY})",
    )
    sub.add_argument("--no-history", action="store_true", help="neither compare nor record")
    sub.add_argument("--json", action="store_true", help="print events as JSON lines")

    sub = command(
        "run", run_bot, "run the Slack bot (Socket Mode; --http for signed HTTP requests)"
    )
    sub.add_argument("--config", required=True, help="path to the YAML config")
    sub.add_argument(
        "--http",
        action="store_true",
        help="HTTP mode (SLACK_SIGNING_SECRET) instead of Socket Mode",
    )
    sub.add_argument(
        "--port",
        type=_bounded_int(0, 65535),
        default=None,
        help="port for /slack/events, /health and /metrics (default: slack.port, 3000)",
    )
    _logging_options(sub, "info")

    sub = command("console", run_console, "the bot's commands in this terminal (type /spark up)")
    sub.add_argument("--config", required=True, help="path to the YAML config")
    sub.add_argument(
        "--yes", action="store_true", help="answer yes to confirmations (down, replace)"
    )
    _logging_options(sub, "warning")

    for name, added in added_commands().items():  # the demo's `demo`
        added.add_arguments(command(name, added.run, added.help))
        parser.examples[name] = added.example

    sub = command("diagnose", diagnose_log, "find the cause of a failure in a vLLM log")
    sub.add_argument("file", nargs="?", default="-", help="log file, or - for standard input")
    sub.add_argument(
        "--extra",
        metavar="FILE",
        default=None,
        help="a knowledge file: extra failure rows (checked first) and checkpoint spellings",
    )
    shown = sub.add_mutually_exclusive_group()
    shown.add_argument(
        "--explain",
        action="store_true",
        help="also which rows and families matched which lines, why the chosen one won, and "
        "every checkpoint the log proves (line and rank)",
    )
    shown.add_argument("--json", action="store_true", help="all of it as one JSON document")
    command("help", show_help, "every command with an example, the chat's commands too")
    return parser


def _interrupted(args: argparse.Namespace) -> str:
    """The summary of a Ctrl-C: what the command did about what it had started."""
    config = getattr(args, "config", None)
    status = f"`spark-bot status --config {shlex.quote(str(config))}`" if config else "`status`"
    if args.command == "up":
        return (
            "interrupted (Ctrl-C): the launch stopped what it had started (its containers, the "
            f"launcher's process group); {status} shows what is left"
        )
    return f"interrupted (Ctrl-C); {status} shows the cluster's state"


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        return args.handler(args)
    except SparkBotError as exc:
        print(f"spark-bot: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"spark-bot {args.command}: {_interrupted(args)}", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
