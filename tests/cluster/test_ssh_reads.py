"""The SSH connection's socket is read in pieces of SSH_READ_BYTES: asyncssh handles a whole
read in one callback, so a flood's 256 KiB reads held the bot's loop (docs/performance.md)."""

from __future__ import annotations

from types import SimpleNamespace

from cluster.nodes.ssh import SSH_READ_BYTES, _read_in_small_pieces


def test_a_socket_connection_reads_small_pieces():
    connection = SimpleNamespace(_transport=SimpleNamespace(max_size=256 * 1024))
    _read_in_small_pieces(connection)  # type: ignore[arg-type]
    assert connection._transport.max_size == SSH_READ_BYTES < 256 * 1024


def test_a_tunnelled_connection_is_left_alone():
    channel = SimpleNamespace()  # a jump host's channel: no socket, no read size
    _read_in_small_pieces(SimpleNamespace(_transport=channel))  # type: ignore[arg-type]
    assert not hasattr(channel, "max_size")
