"""`python -m bot.healthcheck`: healthy only when /health answers 200."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from bot.healthcheck import healthy


def _serving(status: int) -> type[BaseHTTPRequestHandler]:
    class Health(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(status if self.path == "/health" else 404)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    return Health


@pytest.fixture(params=[200, 503])
def health(request: pytest.FixtureRequest) -> Iterator[tuple[int, int]]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _serving(request.param))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield request.param, server.server_address[1]
    server.shutdown()
    server.server_close()


def _check(port: int) -> int:
    return subprocess.run(
        [sys.executable, "-m", "bot.healthcheck", str(port)], timeout=30
    ).returncode


def test_exit_status_follows_the_health_endpoint(health):
    status, port = health
    assert _check(port) == (0 if status == 200 else 1)


def test_nothing_listening_is_unhealthy():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    assert not healthy(port)
