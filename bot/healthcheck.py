"""`python -m bot.healthcheck [PORT]`: exit 0 when the bot's /health answers 200 on this host.

The container's HEALTHCHECK (Dockerfile, compose.yaml) runs it: standard library only, so it
adds no start-up cost beyond the interpreter's.
"""

from __future__ import annotations

import sys
import urllib.error
import urllib.request

DEFAULT_PORT = 3000


def healthy(port: int = DEFAULT_PORT, timeout: float = 4.0) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=timeout) as reply:
            return bool(reply.status == 200)
    except (OSError, urllib.error.URLError):
        return False


if __name__ == "__main__":
    sys.exit(0 if healthy(int(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT_PORT) else 1)
