"""A child process that takes Ctrl-C as a user's terminal delivers it.

A shell starts a background job with SIGINT ignored, and an ignored signal stays ignored across
exec: a test run started in the background (`nohup … &`, a CI runner's detached job) would give
the programs it starts an immune SIGINT, and Python then installs no KeyboardInterrupt handler.
Tests of Ctrl-C start their program with SIGINT's default restored."""

from __future__ import annotations

import signal


def sigint_as_a_terminal_sends_it() -> None:
    """For `preexec_fn=`: SIGINT's default disposition in the child, before it execs."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
