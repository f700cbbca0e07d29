"""Hooks for the controller's infrastructure-fault tests: image variant, sshd, dockerd."""
from __future__ import annotations

import asyncio

import asyncssh
import pytest

from lab import api, dockerd, image
from lab import topology as T

from .helpers import connect

pytestmark = pytest.mark.lab


def test_image_variant_and_restore(lab2):
    try:
        new_id = api.set_image_variant(1)
        assert new_id != lab2.image_id
        assert image.image_id(T.Node(1)) == new_id
        assert image.image_id(T.Node(0)) == lab2.image_id
        assert api.status()["ok"]            # a requested variant is not a fault of the lab
    finally:
        api.restore_image()
    assert image.image_id(T.Node(1)) == lab2.image_id


async def test_stop_and_start_sshd(lab2):
    api.stop_sshd(1)
    try:
        with pytest.raises((OSError, asyncssh.Error)):
            await connect(lab2, lab2.nodes[1])
        assert not api.status()["ok"]
    finally:
        api.start_sshd(1)
    async with await connect(lab2, lab2.nodes[1]) as conn:
        assert (await conn.run("true")).exit_status == 0


def test_stop_and_start_dockerd(lab2):
    api.stop_dockerd(1)
    try:
        assert not dockerd.ping(T.Node(1))
        assert not api.status()["ok"]
    finally:
        api.start_dockerd(1)
    assert dockerd.ping(T.Node(1))
    assert image.image_id(T.Node(1)) == lab2.image_id
