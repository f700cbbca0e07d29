"""The README stays the front door (short) and nothing it once said is lost: every command,
setting and benchmark is documented somewhere in README.md or docs/, and the README's minimal
configuration is one the bot accepts."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from bot.cli import _parser
from bot.config import SparkBotConfig
from bot.config_reference import settings
from handlers.specs import SPECS

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()
DOCS = README + "\n".join(p.read_text() for p in sorted((ROOT / "docs").glob("*.md")))


def test_the_readme_is_short():
    assert len(README.splitlines()) < 200


def test_the_readme_s_minimal_configuration_is_accepted(tmp_path):
    [block] = re.findall(r"## A minimal configuration.*?```yaml\n(.*?)```", README, re.S)
    config = SparkBotConfig.model_validate(yaml.safe_load(block))
    assert len(config.cluster.nodes) == 2 and config.cluster.serve.world_size == 2


def test_every_chat_command_is_in_the_readme():
    assert all(f"/spark {name}" in README for name in SPECS)


def test_every_cli_command_is_documented():
    commands = _parser().commands.choices
    assert len(commands) > 15
    missing = [name for name in commands if f"spark-bot {name}" not in DOCS]
    assert missing == []


def test_every_setting_is_documented():
    assert all(f"`{path}`" in DOCS for path, _ in settings(SparkBotConfig))


def test_every_benchmark_is_documented():
    scripts = [  # the runnable ones (the others are modules they share)
        p.name for p in (ROOT / "benchmarks").glob("*.py") if "__main__" in p.read_text()
    ]
    assert len(scripts) > 8
    missing = [name for name in scripts if name not in DOCS]
    assert missing == []


def test_every_link_to_a_doc_leads_to_one():
    for source in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for target in re.findall(
            r"\]\(((?:\.\./|docs/)?[\w.-]+\.md)(?:#[\w-]+)?\)", source.read_text()
        ):
            assert (source.parent / target).resolve().exists(), (source.name, target)
