"""The command registry: one declaration per command, from which both helps are generated."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from bot.cli import main
from handlers import commands as c
from handlers import specs
from handlers.command_context import Invocation
from handlers.specs import SPECS, CommandSpec, Confirmation, chat_usage, declare, parse_command
from testkit.doubles import BOB, CH, CLUSTER, ScriptedControllers, running_dispatcher
from tests.handlers.test_commands import COMMANDS

SHARED_WITH_THE_CLI = [
    "up",
    "verify",
    "bench",
    "fabric-test",
    "status",
    "recipes",
    "logs",
    "diag",
    "down",
]


def test_every_command_is_declared_once_with_the_access_level_the_settings_document():
    assert {name: spec.level for name, spec in SPECS.items()} == {
        "up": "operate",
        "verify": "read",
        "bench": "operate",
        "fabric-test": "operate",
        "status": "read",
        "recipes": "read",
        "logs": "read",
        "diag": "read",
        "down": "operate",
        "sync-image": "operate",
        "sync-model": "operate",
        "drop-caches": "operate",
        "cancel": "operate",
        "help": "read",
    }


@pytest.mark.parametrize("spec", list(SPECS.values()), ids=lambda s: s.name)
def test_each_command_has_one_example_in_the_help_and_it_parses(spec):
    assert type(parse_command(spec.sample, CLUSTER, COMMANDS)) is spec.model
    assert spec.usage().endswith(f", e.g. `/spark {spec.sample}`")


def test_chat_help_has_one_line_per_command_with_its_arguments_and_when_it_asks():
    lines = chat_usage().splitlines()
    assert [line.split()[1].rstrip("`") for line in lines] == list(SPECS)
    assert lines[0].startswith("`/spark up [RECIPE] [PRESET] [max_model_len=N]")
    assert (
        "(asks in the thread when something is already running), "
        "e.g. `/spark up max_model_len=32768`" in lines[0]
    )
    assert (
        "`/spark down` stop and remove the containers on every node (asks for confirmation), "
        "e.g. `/spark down`" in lines
    )


@pytest.mark.parametrize("name", SHARED_WITH_THE_CLI)
def test_the_cli_describes_a_shared_command_with_the_chats_words(capsys, name):
    with pytest.raises(SystemExit):
        main([name, "--help"])
    assert " ".join(SPECS[name].summary.split()) in " ".join(capsys.readouterr().out.split())


def test_a_spec_is_exactly_one_kind_of_command():
    async def anything(*args):
        return None

    with pytest.raises(TypeError, match="exactly one of reply, answer and job"):
        CommandSpec(c.Status, summary="s", level="read", reply=anything, answer=anything)
    with pytest.raises(TypeError, match="only an operate-level job asks for confirmation"):
        CommandSpec(
            c.Status,
            summary="s",
            level="read",
            answer=anything,
            confirmation=Confirmation("x", anything),
        )
    with pytest.raises(TypeError, match="only an operate-level job asks for confirmation"):
        CommandSpec(
            c.Verify,
            summary="s",
            level="read",
            job=anything,
            confirmation=Confirmation("x", anything),
        )


async def test_help_is_the_generated_usage_and_what_this_config_lets_up_change():
    async with running_dispatcher(ScriptedControllers()) as (dispatcher, _):
        help_ = await dispatcher.command(Invocation(BOB, CH, "help"))
        invalid = await dispatcher.command(Invocation(BOB, CH, "up tensor_parallel_size=1"))
    assert help_ is not None and chat_usage() in help_.text
    assert "`/spark up` may override: `max_model_len` 1024..32768; presets: none." in help_.text
    assert invalid is not None and invalid.text.startswith(
        "`up`: `tensor_parallel_size` cannot be overridden"
    )
    assert invalid.text.endswith(f"*Usage*\n{chat_usage()}")


async def test_a_commands_code_is_given_only_its_own_commands_type():
    async def answer_status(context, command: c.Status, invocation) -> None:
        return None

    spec = declare(c.Status, summary="s", level="read", answer=answer_status)
    assert spec.answer is not None
    with pytest.raises(TypeError, match="`status`'s code was given `help`"):
        await spec.answer(None, c.Help(), Invocation("U1", CH, "status"))
    assert await spec.answer(None, c.Status(), Invocation("U1", CH, "status")) is None


def test_the_commands_know_their_context_not_the_dispatcher():
    # the commands get a narrow, typed context; the dispatcher imports them, never the reverse
    source = Path(specs.__file__).read_text(encoding="utf-8")
    imported = {
        node.module
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.ImportFrom) and node.module
    }
    assert "handlers.dispatch" not in imported
    assert "type: ignore" not in source and not re.search(r"\bAny\b", source)
