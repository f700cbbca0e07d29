"""`spark-bot --version` and `spark-bot help`: every command, each with an example that parses."""

from __future__ import annotations

import importlib.metadata
import shlex

import pytest

from bot.cli import _parser, main
from handlers.specs import SPECS

SUBCOMMANDS = list(_parser().commands.choices)
EXAMPLES = _parser().examples  # the CLI's own and the added commands' (the demo's)


def test_version_is_the_installed_packages(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["--version"])
    assert exit_.value.code == 0
    assert capsys.readouterr().out == f"spark-bot {importlib.metadata.version('spark-bot')}\n"


@pytest.mark.parametrize("name", SUBCOMMANDS)
def test_each_command_has_an_example_that_parses(name):
    args = _parser().parse_args(shlex.split(EXAMPLES[name]))
    assert args.command == name


def test_the_demo_is_a_command_the_demo_package_adds():
    assert "demo" in SUBCOMMANDS and EXAMPLES["demo"] == 'demo --run "/spark up"'


def test_help_lists_every_command_with_its_example_and_every_chat_command(capsys):
    assert main(["help"]) == 0
    out = capsys.readouterr().out
    assert set(EXAMPLES) == set(SUBCOMMANDS)
    for name in SUBCOMMANDS:
        assert f"e.g. spark-bot {EXAMPLES[name]}\n" in out
    for spec in SPECS.values():
        assert f"e.g. /spark {spec.sample}\n" in out
