"""The CLI's option errors: short, clear, and the same rules and messages as `/spark` in chat."""

from __future__ import annotations

import subprocess
import sys

import pytest

from bot.cli import main
from bot.config import load_config
from handlers.errors import CommandError
from handlers.settings import CommandsConfig
from handlers.specs import parse_command
from testkit.lab_cluster import LAB_CONFIG

SPARK_BOT = [sys.executable, "-m", "bot.cli"]


def test_the_cli_does_not_import_the_lab_or_the_demo():
    code = "import sys, bot.cli; print(sorted(m for m in sys.modules if m.split('.')[0] in {'lab', 'demo'}))"
    assert (
        subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, check=True
        ).stdout
        == "[]\n"
    )


def test_a_bad_lines_value_says_the_range_in_one_line(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["logs", "--config", str(LAB_CONFIG), "--lines", "0"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert "argument --lines: 0 is not between 1 and 5000" in err and len(err) < 300


def test_an_unknown_fault_lists_the_faults(capsys):
    assert main(["demo", "--fault", "nope"]) == 2
    err = capsys.readouterr().err
    assert "unknown fault 'nope'" in err and "nccl_error" in err and "oom" in err


@pytest.mark.parametrize(
    ("argv", "chat", "why"),
    [
        (
            ["--concurrency", "1,2,2"],
            "bench concurrency=1,2,2",
            "concurrency level 2 appears twice",
        ),
        (
            ["--concurrency", "0"],
            "bench concurrency=0",
            "each concurrency level must be between 1 and",
        ),
        (["--max-tokens", "1"], "bench max_tokens=1", "max_tokens must be between 2 and"),
        (["--runs", "0"], "bench runs=0", "runs must be between 1 and"),
    ],
)
def test_bench_options_are_checked_by_the_same_rules_as_in_chat(capsys, argv, chat, why):
    assert main(["bench", "--config", str(LAB_CONFIG), *argv]) == 2
    assert why in capsys.readouterr().err
    with pytest.raises(CommandError, match=why):
        parse_command(chat, load_config(LAB_CONFIG).cluster, CommandsConfig())


def test_a_bad_concurrency_list_reads_the_same_in_both(capsys):
    with pytest.raises(SystemExit):
        main(["bench", "--config", str(LAB_CONFIG), "--concurrency", "1,x"])
    message = "expected comma-separated whole numbers"
    assert message in capsys.readouterr().err
    with pytest.raises(CommandError, match=message):
        parse_command("bench concurrency=1,x", load_config(LAB_CONFIG).cluster, CommandsConfig())


def test_node_names_resolve_the_same_in_both(capsys):
    assert main(["logs", "--config", str(LAB_CONFIG), "spark-9"]) == 2
    err = capsys.readouterr().err
    assert "unknown node `spark-9`: use head, worker or one of" in err
    with pytest.raises(CommandError, match="unknown node `spark-9`: use head, worker or one of"):
        parse_command("logs spark-9", load_config(LAB_CONFIG).cluster, CommandsConfig())
