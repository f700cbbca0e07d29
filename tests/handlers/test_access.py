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
    decision = Access(AccessConfig.model_validate(config)).check(
        "read", "U0ALICE", channel, "status"
    )
    assert decision.allowed is allowed
    assert allowed or "needs read access" in decision.reason
