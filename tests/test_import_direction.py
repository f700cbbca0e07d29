"""The packages import one way: the controller (cluster/) knows no chat, the handlers no
adapter, the adapters (bot/) neither the demo nor the lab; the demo runs on the bot and of
the lab only the emulator the wheel ships; nothing shipped imports the tests or their kit.
Read from the source (every import statement, a function's lazy one too, and
`importlib.import_module("...")`), so an import a test run never reaches counts as well."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NOT_SHIPPED = ("tests", "testkit", "benchmarks")
# package: the modules it must not import (a name covers its submodules), and the exceptions
MAY_NOT_IMPORT: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "cluster": (("handlers", "bot", "demo", "lab", *NOT_SHIPPED), ()),
    "handlers": (("bot", "demo", "lab", *NOT_SHIPPED), ()),
    "bot": (("demo", "lab", *NOT_SHIPPED), ()),
    "demo": (("lab", *NOT_SHIPPED), ("lab.emulator",)),
}


def _under(module: str, names: tuple[str, ...]) -> bool:
    return any(module == name or module.startswith(name + ".") for name in names)


def imported(source: str) -> list[tuple[int, str]]:
    """(line, module) of every absolute import in `source`."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((node.lineno, node.module))
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name | ast.Attribute)
            and (node.func.id if isinstance(node.func, ast.Name) else node.func.attr)
            in ("import_module", "__import__")
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            found.append((node.lineno, node.args[0].value))
    return found


def wrong_way(package: str) -> list[str]:
    forbidden, allowed = MAY_NOT_IMPORT[package]
    return [
        f"{path.relative_to(ROOT)}:{line}: {module}"
        for path in sorted((ROOT / package).rglob("*.py"))
        for line, module in imported(path.read_text())
        if _under(module, forbidden) and not _under(module, allowed)
    ]


@pytest.mark.parametrize("package", sorted(MAY_NOT_IMPORT))
def test_imports_go_one_way(package: str) -> None:
    assert wrong_way(package) == []


@pytest.mark.parametrize(
    ("source", "module"),
    [
        ("import demo.session", "demo.session"),
        ("def f():\n    from lab.emulator.faults import FAULTS", "lab.emulator.faults"),
        ("import importlib\nimportlib.import_module('demo.session')", "demo.session"),
    ],
)
def test_an_import_is_seen_however_it_is_spelled(source: str, module: str) -> None:
    assert module in [name for _, name in imported(source)]
