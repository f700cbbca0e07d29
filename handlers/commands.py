"""The words after `/spark NAME` -> a validated command model, or a CommandError saying why.

Nothing runs for text that does not parse: a bad number, an override the config does not allow
or outside its bounds. Which commands exist, who may run them and what they do is declared in
handlers/specs.py, which also checks every word against a small safe set first.
"""

from __future__ import annotations

import re
from typing import ClassVar, Self

from pydantic import BaseModel, ConfigDict, Field

from cluster.bench.depth import parse_depths
from cluster.bench.runner import BenchLimits, BenchOptions
from cluster.config import ClusterConfig
from cluster.operations.fabric_test import DEFAULT_SECONDS, MAX_SECONDS
from handlers.errors import CommandError
from handlers.settings import CommandsConfig


class BaseCommand(BaseModel):
    """A parsed command: typed arguments, and the canonical text they came from."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    name: ClassVar[str]

    @classmethod
    def parse(cls, args: list[str], cluster: ClusterConfig, commands: CommandsConfig) -> Self:
        """The command from the words after its name."""
        if args:
            raise CommandError(f"`{cls.name}` takes no arguments (got `{' '.join(args)}`)")
        return cls()

    def text(self) -> str:
        """The canonical command text (what a confirmation button carries back)."""
        return self.name


class Up(BaseCommand):
    name: ClassVar[str] = "up"
    recipe: str | None = None
    preset: str | None = None
    overrides: dict[str, float] = Field(default_factory=dict)

    def text(self) -> str:
        parts = ["up"] + [word for word in (self.recipe, self.preset) if word]
        return " ".join(parts + [f"{k}={_number(v)}" for k, v in sorted(self.overrides.items())])

    @classmethod
    def parse(cls, args: list[str], cluster: ClusterConfig, commands: CommandsConfig) -> Up:
        recipe = preset = None
        args = list(args)
        if args and "=" not in args[0] and args[0] in cluster.recipes:
            recipe = args.pop(0)
        if args and "=" not in args[0]:
            preset = args.pop(0)
            if preset not in commands.presets:
                recipes = ", ".join(f"`{r}`" for r in cluster.recipes) or "none configured"
                known = ", ".join(f"`{p}`" for p in commands.presets) or "none configured"
                raise CommandError(
                    f"`up`: `{preset}` is neither a recipe ({recipes}) nor a preset ({known})"
                )
        overrides: dict[str, float] = {}
        for key, value in _pairs("up", args).items():
            bound = commands.overrides.get(key)  # type: ignore[call-overload]
            if bound is None:
                allowed = (
                    ", ".join(f"`{k}`" for k in commands.overrides)
                    or "none: the config allows no override"
                )
                raise CommandError(f"`up`: `{key}` cannot be overridden (allowed: {allowed})")
            number = (
                _float("up", key, value)
                if key == "gpu_memory_utilization"
                else _int("up", key, value)
            )
            if not bound.min <= number <= bound.max:
                raise CommandError(
                    f"`up`: {key}={value} is outside {_number(bound.min)}..{_number(bound.max)}"
                )
            overrides[key] = number
        return Up(recipe=recipe, preset=preset, overrides=overrides)

    def settings(self, commands: CommandsConfig) -> dict[str, float]:
        """Preset values, then the explicit overrides on top (both over the recipe's serve)."""
        preset = commands.presets.get(self.preset, {}) if self.preset else {}
        values: dict[str, float] = {key: value for key, value in preset.items()}
        return values | self.overrides

    def apply(self, cluster: ClusterConfig, commands: CommandsConfig) -> ClusterConfig:
        return apply_serve(cluster.with_recipe(self.recipe), self.settings(commands))


def apply_serve(cluster: ClusterConfig, values: dict[str, float]) -> ClusterConfig:
    """`cluster` with serve settings replaced (what `/spark up` launched with: see Up.settings)."""
    if not values:
        return cluster
    serve = {k: (v if k == "gpu_memory_utilization" else int(v)) for k, v in values.items()}
    return cluster.model_copy(update={"serve": cluster.serve.model_copy(update=serve)})


class Verify(BaseCommand):
    name: ClassVar[str] = "verify"


class Bench(BaseCommand):
    name: ClassVar[str] = "bench"
    # the rules are BenchOptions.validate()'s (the parser applies them with the config's limits)
    concurrency: list[int] = Field(default_factory=list)
    max_tokens: int = 128
    runs: int = 3
    depth: list[int] = Field(default_factory=list)

    @classmethod
    def parse(cls, args: list[str], cluster: ClusterConfig, commands: CommandsConfig) -> Bench:
        values: dict[str, object] = {}
        for key, value in _pairs("bench", args).items():
            if key == "concurrency":
                try:
                    values[key] = parse_concurrency(value)
                except CommandError as error:
                    raise CommandError(f"`bench`: {error}") from None
            elif key == "depth":
                try:
                    values[key] = parse_depths(value)
                except ValueError as error:
                    raise CommandError(f"`bench`: {error}") from None
            elif key in {"max_tokens", "runs"}:
                values[key] = _int("bench", key, value)
            else:
                raise CommandError(
                    f"`bench`: unknown option `{key}` (concurrency, max_tokens, runs, depth)"
                )
        command = Bench.model_validate(values)
        check_bench(
            BenchOptions(
                max_tokens=command.max_tokens,
                runs=command.runs,
                concurrency=command.concurrency,
                depth=command.depth,
            ),
            chat_bench_limits(commands),
            "`bench`: ",
        )
        return command

    def text(self) -> str:
        parts = ["bench", f"max_tokens={self.max_tokens}", f"runs={self.runs}"]
        if self.concurrency:
            parts.append("concurrency=" + ",".join(map(str, self.concurrency)))
        if self.depth:
            parts.append("depth=" + ",".join(map(str, self.depth)))
        return " ".join(parts)


class FabricTest(BaseCommand):
    name: ClassVar[str] = "fabric-test"
    seconds: int = Field(DEFAULT_SECONDS, ge=1, le=MAX_SECONDS)

    @classmethod
    def parse(cls, args: list[str], cluster: ClusterConfig, commands: CommandsConfig) -> FabricTest:
        values: dict[str, object] = {}
        for key, value in _pairs("fabric-test", args).items():
            if key != "seconds":
                raise CommandError(f"`fabric-test`: unknown option `{key}` (seconds)")
            values[key] = _int("fabric-test", key, value)
        return FabricTest.model_validate(values)

    def text(self) -> str:
        return f"fabric-test seconds={self.seconds}"


class Status(BaseCommand):
    name: ClassVar[str] = "status"


class Recipes(BaseCommand):
    name: ClassVar[str] = "recipes"


class Logs(BaseCommand):
    name: ClassVar[str] = "logs"
    node: str = Field(description="a node name, resolved from head/worker by the parser")
    lines: int = Field(50, ge=1)

    @classmethod
    def parse(cls, args: list[str], cluster: ClusterConfig, commands: CommandsConfig) -> Logs:
        node, lines = cluster.head.name, 50
        rest = list(args)
        if rest and not rest[0].isdigit():
            try:
                node = resolve_node(rest.pop(0), cluster)
            except CommandError as error:
                raise CommandError(f"`logs`: {error}") from None
        if rest:
            lines = _int("logs", "LINES", rest.pop(0))
            if not 1 <= lines <= commands.logs_max_lines:
                raise CommandError(f"`logs`: LINES must be 1..{commands.logs_max_lines}")
        if rest:
            raise CommandError(f"`logs`: unexpected `{' '.join(rest)}`")
        return Logs(node=node, lines=lines)

    def text(self) -> str:
        return f"logs {self.node} {self.lines}"


class Down(BaseCommand):
    name: ClassVar[str] = "down"


class Diag(BaseCommand):
    name: ClassVar[str] = "diag"


class Cancel(BaseCommand):
    name: ClassVar[str] = "cancel"


class SyncImage(BaseCommand):
    name: ClassVar[str] = "sync-image"


class SyncModel(BaseCommand):
    name: ClassVar[str] = "sync-model"


class DropCaches(BaseCommand):
    name: ClassVar[str] = "drop-caches"


class Help(BaseCommand):
    name: ClassVar[str] = "help"


Command = (
    Up
    | Verify
    | Bench
    | FabricTest
    | Status
    | Recipes
    | Logs
    | Diag
    | Down
    | SyncImage
    | SyncModel
    | DropCaches
    | Cancel
    | Help
)
CHAT_MAX_RUNS = 20  # a chat bench stays short: more runs from the CLI


def _pairs(command: str, args: list[str]) -> dict[str, str]:
    pairs: dict[str, str] = {}
    for arg in args:
        key, sep, value = arg.partition("=")
        if not sep or not key or not value:
            raise CommandError(f"`{command}`: expected key=value, got `{arg}`")
        if key in pairs:
            raise CommandError(f"`{command}`: `{key}` given twice")
        pairs[key] = value
    return pairs


def _float(command: str, key: str, value: str) -> float:
    try:
        return float(value)
    except ValueError:
        raise CommandError(f"`{command}`: {key}=`{value}` is not a number") from None


def _int(command: str, key: str, value: str) -> int:
    if not re.fullmatch(r"[0-9]{1,9}", value):
        raise CommandError(f"`{command}`: {key}=`{value}` is not a whole number")
    return int(value)


def parse_concurrency(text: str) -> list[int]:
    """`1,2,4` -> [1, 2, 4] (order kept); the ranges are checked by `check_bench`. CLI and chat."""
    parts = [part.strip() for part in text.split(",") if part.strip()]
    if not parts or not all(re.fullmatch(r"[0-9]{1,9}", part) for part in parts):
        raise CommandError(
            f"concurrency `{text[:40]}`: expected comma-separated whole numbers, e.g. 1,2,4,8"
        )
    return [int(part) for part in parts]


def chat_bench_limits(commands: CommandsConfig) -> BenchLimits:
    return BenchLimits(
        max_tokens=commands.bench_max_tokens,
        max_concurrency=commands.bench_max_concurrency,
        max_runs=CHAT_MAX_RUNS,
    )


def check_bench(
    options: BenchOptions, limits: BenchLimits = BenchLimits(), prefix: str = ""
) -> None:
    """BenchOptions.validate() (the one set of rules) as a CommandError. CLI and chat."""
    try:
        options.validate(limits)
    except ValueError as error:
        raise CommandError(f"{prefix}{error}") from None


def resolve_node(given: str, cluster: ClusterConfig) -> str:
    """head | worker (the first) | a node's name -> the node's name. CLI and chat."""
    if given == "head":
        return cluster.head.name
    if given == "worker":
        if not cluster.workers:
            raise CommandError(
                f"this cluster has no worker (its only node is `{cluster.head.name}`)"
            )
        return cluster.workers[0].name
    names = [n.name for n in cluster.nodes]
    if given not in names:
        raise CommandError(
            f"unknown node `{given[:40]}`: use head, worker or one of {', '.join(names)}"
        )
    return given


def _number(value: float) -> str:
    # repr, not :g (6 significant digits): the text is audited and re-parsed on confirmation
    return str(int(value)) if float(value).is_integer() else repr(float(value))
