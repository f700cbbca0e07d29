"""The suite fails a test that leaves a resource unclosed (tests/conftest.py, pyproject's
filterwarnings): these tests leave one on purpose and pass only because their leak failed them."""

from __future__ import annotations

import socket

import aiohttp
import pytest


@pytest.mark.leaves_unclosed_on_purpose
async def test_an_aiohttp_session_left_open_fails_its_test():
    session = aiohttp.ClientSession()
    assert not session.closed  # and it is dropped unclosed at the end of the test


@pytest.mark.leaves_unclosed_on_purpose
def test_a_socket_in_a_reference_cycle_fails_the_test_that_made_it():
    holder: list[object] = [socket.socket()]
    holder.append(holder)  # only a collection finds it: the one at this test's end
