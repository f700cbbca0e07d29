"""The bot's configuration file: load YAML, validate it, report errors with file, line and field."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, ValidationError

from cluster.config import ClusterConfig
from cluster.errors import ConfigError


class SparkBotConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    cluster: ClusterConfig


def load_config(path: str | Path) -> SparkBotConfig:
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read the config file ({exc.strerror})") from exc
    try:
        data = yaml.safe_load(text)
        root = yaml.compose(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}") from exc
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping with a 'cluster' section at the top")
    try:
        config = SparkBotConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(_describe(path, root, exc)) from None
    cluster = config.cluster.with_paths_relative_to(path.resolve().parent)
    return config.model_copy(update={"cluster": cluster})


def _describe(path: Path, root: yaml.Node | None, exc: ValidationError) -> str:
    lines = [f"{path}: {exc.error_count()} invalid setting(s)"]
    for error in exc.errors():
        location = [part for part in error["loc"] if not _is_type_tag(part)]
        field = ".".join(str(part) for part in location) or "(top level)"
        line = _line_of(root, location)
        where = f"line {line}: " if line else ""
        got = error.get("input")
        seen = "" if isinstance(got, (dict, list)) or got is None else f" (got {got!r})"
        lines.append(f"  {where}{field}: {error['msg']}{seen}")
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
