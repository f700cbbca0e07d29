"""docs/configuration.md is what the models say: every setting described, nothing drifted."""

from __future__ import annotations

from bot.config import SparkBotConfig
from bot.config_reference import DOC, render, settings


def test_every_setting_a_config_may_hold_is_described():
    undescribed = [path for path, field in settings(SparkBotConfig) if not field.description]
    assert undescribed == []


def test_the_reference_in_docs_is_the_one_the_models_render():
    assert DOC.read_text() == render(), "run `python -m bot.config_reference --write`"


def test_every_setting_has_its_row():
    doc = DOC.read_text()
    paths = [path for path, _ in settings(SparkBotConfig)]
    assert len(paths) > 130
    assert all(f"| `{path}` |" in doc for path in paths)
