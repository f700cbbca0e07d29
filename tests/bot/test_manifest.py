"""The Slack app manifest shipped with the bot matches what the bot does."""

from __future__ import annotations

from pathlib import Path

import yaml

from handlers.specs import SPECS

MANIFEST = yaml.safe_load((Path(__file__).parents[2] / "manifest.yml").read_text())


def test_the_messages_tab_is_on_and_writable_new_apps_ship_with_it_off():
    home = MANIFEST["features"]["app_home"]
    assert home["messages_tab_enabled"] is True
    assert home["messages_tab_read_only_enabled"] is False


def test_the_usage_hint_and_description_name_every_command():
    [spark] = MANIFEST["features"]["slash_commands"]
    hinted = {part.split()[0] for part in spark["usage_hint"].split(" | ")}
    assert hinted == set(SPECS)
    assert all(name in spark["description"] for name in SPECS)


def test_the_scopes_are_those_the_bot_calls_for():
    scopes = set(MANIFEST["oauth_config"]["scopes"]["bot"])
    assert {"commands", "chat:write", "files:write", "files:read", "im:write"} <= scopes
