"""The bot's configuration file: load YAML, validate it, report errors with file, line and field."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from cluster.config import ClusterConfig, Knowledge, home_expanded
from cluster.errors import ConfigError
from cluster.redact import redact, secret_name
from handlers.settings import AccessConfig, BotSettings, CommandsConfig, JobsConfig, StoreConfig


class SlackConfig(BaseModel):
    """How the bot meets Slack. Tokens never go here: SLACK_BOT_TOKEN, SLACK_APP_TOKEN and
    SLACK_SIGNING_SECRET are read from the environment."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    mode: Literal["socket", "http"] = Field(
        "socket",
        description="socket: Socket Mode (no public URL; SLACK_APP_TOKEN); http: signed requests (SLACK_SIGNING_SECRET)",
    )
    host: str = Field(
        "0.0.0.0", description="the address /health, /metrics (and /slack/events) listen on"
    )
    port: int = Field(
        3000, ge=0, le=65535, description="HTTP mode: /slack/events; both modes: /health"
    )
    api_url: str | None = Field(
        None,
        pattern=r"^https?://[^\s]+/$",
        description="Web API base URL (default Slack's); for proxies and tests",
    )


class SparkBotConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    cluster: ClusterConfig = Field(description="the nodes, the container and what it serves")
    access: AccessConfig = Field(AccessConfig(), description="who may run what, where (Slack IDs)")
    commands: CommandsConfig = Field(
        CommandsConfig(), description="what chat commands may change, and their limits"
    )
    jobs: JobsConfig = Field(JobsConfig(), description="how jobs show in the chat")
    store: StoreConfig = Field(StoreConfig(), description="the bot's database")
    slack: SlackConfig = Field(SlackConfig(), description="how the bot meets Slack")

    @model_validator(mode="after")
    def _one_meaning_per_word(self) -> SparkBotConfig:
        both = sorted(set(self.cluster.recipes) & set(self.commands.presets))
        if both:
            raise ValueError(
                f"{both[0]!r} names both a recipe and a preset: `/spark up {both[0]}` would be "
                "ambiguous; rename one"
            )
        return self

    @property
    def bot(self) -> BotSettings:
        return BotSettings(
            access=self.access, commands=self.commands, jobs=self.jobs, store=self.store
        )


def _read_yaml(path: Path, what: str) -> tuple[Any, yaml.Node | None]:
    try:
        text = path.read_text()
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read the {what} ({exc.strerror})") from exc
    try:
        return yaml.safe_load(text), yaml.compose(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {_yaml_problem(exc)}") from None


def _yaml_problem(exc: yaml.YAMLError) -> str:
    """What the parser saw and where, without the snippet of the offending line that str(exc)
    quotes: that line may hold a secret."""
    if not isinstance(exc, yaml.MarkedYAMLError):
        return "the YAML parser refused it"
    parts = [
        f"{what} (line {mark.line + 1}, column {mark.column + 1})" if mark else what
        for what, mark in ((exc.context, exc.context_mark), (exc.problem, exc.problem_mark))
        if what
    ]
    return redact(": ".join(parts))


def load_knowledge(path: str | Path) -> Knowledge:
    """An operator's knowledge file: extra failure rows and checkpoint spellings, validated like
    the config (errors name the file, the line, the field)."""
    path = Path(path)
    data, root = _read_yaml(path, "knowledge file")
    if not isinstance(data, dict):
        raise ConfigError(
            f"{path}: expected a mapping with 'signatures' and/or 'checkpoints' at the top"
        )
    try:
        return Knowledge.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(_describe(path, root, exc)) from None


RECIPES_FOLDER = "recipes"


def _recipe_files(folder: Path) -> dict[str, tuple[Path, Any, yaml.Node | None]]:
    """Every `*.yaml` in `folder`: recipe name (the file's stem) -> file, data, YAML tree."""
    if not folder.is_dir():
        return {}
    found = {}
    for file in sorted(folder.glob("*.yaml")):
        data, root = _read_yaml(file, "recipe file")
        if not isinstance(data, dict):
            raise ConfigError(f"{file}: expected a recipe: a mapping with at least 'serve'")
        found[file.stem] = (file, data, root)
    return found


def load_config(path: str | Path) -> SparkBotConfig:
    path = Path(path)
    data, root = _read_yaml(path, "config file")
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping with a 'cluster' section at the top")
    cluster = data.get("cluster")
    if isinstance(cluster, dict) and isinstance(cluster.get("knowledge"), str):
        try:
            named = home_expanded(Path(cluster["knowledge"]))
        except ValueError as error:
            raise ConfigError(f"{path}: cluster.knowledge: {error}") from None
        knowledge = load_knowledge(named if named.is_absolute() else path.resolve().parent / named)
        cluster = {**cluster, "knowledge": knowledge.model_dump()}
        data = {**data, "cluster": cluster}
    files = _recipe_files(path.resolve().parent / RECIPES_FOLDER)
    if isinstance(cluster, dict) and files:
        inline = cluster.get("recipes") or {}
        if not isinstance(inline, dict):
            raise ConfigError(f"{path}: cluster.recipes must be a mapping of name -> recipe")
        twice = sorted(set(inline) & set(files))
        if twice:
            raise ConfigError(
                f"{path}: recipe {twice[0]!r} is both in the config and in "
                f"{files[twice[0]][0]}: rename or remove one"
            )
        recipes = {**inline, **{name: data for name, (_, data, _) in files.items()}}
        data = {**data, "cluster": {**cluster, "recipes": recipes}}
    try:
        config = SparkBotConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(_describe(path, root, exc, files)) from None
    base = path.resolve().parent
    try:
        cluster = config.cluster.with_paths_relative_to(base)
        store = config.store.model_copy(update={"path": base / home_expanded(config.store.path)})
    except ValueError as error:
        raise ConfigError(f"{path}: {error}") from None
    return config.model_copy(update={"cluster": cluster, "store": store})


def _describe(
    path: Path,
    root: yaml.Node | None,
    exc: ValidationError,
    recipe_files: dict[str, tuple[Path, Any, yaml.Node | None]] | None = None,
) -> str:
    lines = [f"{path}: {exc.error_count()} invalid setting(s)"]
    for error in exc.errors():
        location = [part for part in error["loc"] if not _is_type_tag(part)]
        field = ".".join(str(part) for part in location) or "(top level)"
        line = _line_of(root, location)
        where = f"line {line}: " if line else ""
        named = (
            location[2] if location[:2] == ["cluster", "recipes"] and len(location) > 2 else None
        )
        if recipe_files and named in recipe_files:
            # a recipe from the folder: its own file, line and field
            file, _, tree = recipe_files[str(named)]
            line = _line_of(tree, location[3:])
            field = f"recipe {named}: " + (".".join(str(p) for p in location[3:]) or "(top level)")
            where = f"{file}" + (f" line {line}" if line else "") + ": "
        got = error.get("input")
        # Never echo what was written under secret_env or env, or under a name that says secret:
        # it may be a pasted secret. Elsewhere the value is shown redacted (a token in extra_args).
        private = any(part in ("secret_env", "env") or secret_name(str(part)) for part in location)
        seen = "" if private or isinstance(got, (dict, list)) or got is None else f" (got {got!r})"
        lines.append(redact(f"  {where}{field}: {error['msg']}{seen}"))
    return "\n".join(lines)


def _is_type_tag(part: Any) -> bool:
    # pydantic names union branches in the location ("list[...]", "literal['auto']").
    return isinstance(part, str) and ("[" in part or part in {"str", "int", "float"})


def _line_of(node: yaml.Node | None, location: list[Any]) -> int | None:
    line = node.start_mark.line + 1 if node is not None else None
    for part in location:
        if isinstance(node, yaml.MappingNode):
            match = next((v for k, v in node.value if k.value == part), None)
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int):
            match = node.value[part] if part < len(node.value) else None
        else:
            match = None
        if match is None:
            break
        node, line = match, match.start_mark.line + 1
    return line
