"""Who may do what, where: least privilege by default, direct messages only when allowed."""

from __future__ import annotations

import pytest

from handlers.access import Access
from handlers.settings import AccessConfig

OPS, OTHER, DM = "C0123OPS", "C0RANDOM", "D0ALICE"


@pytest.mark.parametrize(
    ("config", "channel", "allowed"),
    [
        ({}, OPS, False),  # by default no channel is named: nobody reads anywhere
        ({}, DM, False),
        ({"read": {"users": ["*"], "channels": [OPS]}}, OPS, True),
        ({"read": {"users": ["*"], "channels": [OPS]}}, OTHER, False),
        ({"read": {"users": ["*"], "channels": ["*"]}}, OTHER, True),
        ({"read": {"users": ["*"], "channels": ["*"]}}, DM, False),  # "*" is any channel, not a DM
        ({"read": {"users": ["*"], "channels": ["*"], "direct_messages": True}}, DM, True),
        ({"read": {"users": ["*"], "channels": [DM]}}, DM, True),  # a DM named explicitly
    ],
)
def test_read_access(config, channel, allowed):
    kind = "bot_dm" if channel == DM else "channel"
    decision = Access(AccessConfig.model_validate(config)).check(
        "read", "U0ALICE", channel, "status", kind
    )
    assert decision.allowed is allowed
    assert allowed or "needs read access" in decision.reason


WIDEST = {
    "read": {"users": ["*"], "channels": ["*"], "direct_messages": True},
    "operate": {"users": ["*"], "channels": ["*"], "direct_messages": True},
}


@pytest.mark.parametrize("level", ["read", "operate"])
def test_a_direct_message_between_people_is_refused_with_where_to_go_instead(level):
    # its ID begins with D like the bot's own DM: telling them apart is the adapter's (kind)
    decision = Access(AccessConfig.model_validate(WIDEST)).check(
        level, "U0ALICE", "D0ALICEBOB", "status", "people_dm"
    )
    assert not decision.allowed
    assert "between people" in decision.reason and "direct message with the bot" in decision.reason


def test_a_channel_whose_id_begins_with_d_is_a_channel_when_the_adapter_says_so():
    only_channels = {"read": {"users": ["*"], "channels": ["*"]}}
    decision = Access(AccessConfig.model_validate(only_channels)).check(
        "read", "U0ALICE", "D0NOTADM", "status", "channel"
    )
    assert decision.allowed


def test_a_direct_message_the_adapter_could_not_tell_is_refused_with_a_retry():
    decision = Access(AccessConfig.model_validate(WIDEST)).check(
        "read", "U0ALICE", "D0SOMEONE", "status", "unknown_dm"
    )
    assert not decision.allowed and "again" in decision.reason
