"""docs/configuration.md, rendered from the configuration's models: every setting a config file
may hold, its type, default, bounds and description, so the reference cannot drift from what
the bot accepts (`tests/bot/test_config_reference.py` fails when they differ).

    python -m bot.config_reference --write    # after changing a model
"""

from __future__ import annotations

import argparse
import json
import sys
import types
import typing
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from annotated_types import Ge, Gt, Le, Lt, MaxLen, MinLen
from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from bot.config import SparkBotConfig

DOC = Path(__file__).resolve().parents[1] / "docs" / "configuration.md"
HEADER = """# Configuration reference

Every setting of a spark-bot config file (`spark-bot check-config FILE` validates one and prints
it resolved, secrets masked). Generated from the models by `python -m bot.config_reference
--write`; do not edit by hand. `<name>` stands for a key of your choosing, `[]` for each item
of a list. How the settings work together: the README (a minimal config) and `docs/`.
"""


def _model_within(annotation: Any) -> tuple[str, type[BaseModel]] | None:
    """The model a field holds (directly, optionally, in a dict or a list) and the path step to it."""
    origin = typing.get_origin(annotation)
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return "", annotation
    if origin is typing.Annotated:
        return _model_within(typing.get_args(annotation)[0])
    if origin in (typing.Union, types.UnionType):
        return next(filter(None, map(_model_within, typing.get_args(annotation))), None)
    if origin is dict:
        found = _model_within(typing.get_args(annotation)[1])
        return (f".<name>{found[0]}", found[1]) if found else None
    if origin is list:
        found = _model_within(typing.get_args(annotation)[0])
        return (f"[]{found[0]}", found[1]) if found else None
    return None


def settings(model: type[BaseModel], prefix: str = "") -> Iterator[tuple[str, FieldInfo]]:
    """(dotted path, field) of every leaf setting below `model`, in the models' order."""
    for name, field in model.model_fields.items():
        inner = _model_within(field.annotation)
        if inner is None:
            yield f"{prefix}{name}", field
        else:
            yield from settings(inner[1], f"{prefix}{name}{inner[0]}.")


def _type(annotation: Any) -> str:
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Annotated:
        return _type(args[0])
    if origin is typing.Literal:
        return " \\| ".join(str(a) for a in args)
    if origin in (typing.Union, types.UnionType):
        return " \\| ".join("null" if a is type(None) else _type(a) for a in args)
    if origin is not None:
        return f"{getattr(origin, '__name__', origin)}[{', '.join(_type(a) for a in args)}]"
    if annotation is Path:
        return "path"
    return getattr(annotation, "__name__", str(annotation))


def _default(field: FieldInfo) -> str:
    if field.default_factory is not None:
        value = field.default_factory()  # type: ignore[call-arg]
    elif field.default is PydanticUndefined:
        return "required"
    else:
        value = field.default
    if isinstance(value, BaseModel):
        value = value.model_dump(mode="json")
    return f"`{json.dumps(value, default=str)}`"


def _bounds(field: FieldInfo) -> str:
    marks = []
    for meta in field.metadata:
        for kind, sign, bound in (
            ("ge", "≥", Ge),
            ("gt", ">", Gt),
            ("le", "≤", Le),
            ("lt", "<", Lt),
        ):
            if isinstance(meta, bound):
                marks.append(f"{sign} {getattr(meta, kind)}")
        if isinstance(meta, MinLen):
            marks.append(f"at least {meta.min_length} long")
        if isinstance(meta, MaxLen):
            marks.append(f"at most {meta.max_length} long")
    return f" ({', '.join(marks)})" if marks else ""


def render() -> str:
    sections: dict[str, list[str]] = {}
    for path, field in settings(SparkBotConfig):
        section = path.split(".", 1)[0]
        description = (field.description or "").replace("|", "\\|").replace("\n", " ")
        sections.setdefault(section, []).append(
            f"| `{path}` | {_type(field.annotation)}{_bounds(field)} | {_default(field)} "
            f"| {description} |"
        )
    parts = [HEADER]
    for section, rows in sections.items():
        what = SparkBotConfig.model_fields[section].description or ""
        parts.append(f"## `{section}`\n\n{what[:1].upper()}{what[1:]}.\n")
        parts.append(
            "| setting | type | default | what |\n|---|---|---|---|\n" + "\n".join(rows) + "\n"
        )
    return "\n".join(parts)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help=f"write {DOC.name}")
    args = parser.parse_args(argv)
    text = render()
    if args.write:
        DOC.write_text(text)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
