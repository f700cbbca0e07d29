"""The head's OpenAI-compatible API: the client, health and models.

Timed completions (the sample `up` and `verify` end with, and the benchmark) are in
`cluster.bench.stream`: the one SSE parser.
"""

from __future__ import annotations

from typing import Any

import httpx


def api_client(
    base_url: str, *, read_timeout: float = 120.0, connections: int = 4, api_key: str | None = None
) -> httpx.AsyncClient:
    # Explicit timeouts (httpx's 5 s default would cut a long time-to-first-token) and
    # connection limits sized to the load.
    return httpx.AsyncClient(
        base_url=base_url,
        headers={"Authorization": f"Bearer {api_key}"} if api_key else None,
        timeout=httpx.Timeout(connect=10.0, read=read_timeout, write=10.0, pool=read_timeout),
        limits=httpx.Limits(max_connections=connections, max_keepalive_connections=connections),
    )


def error_text(exc: BaseException) -> str:
    """An HTTP client error in words: its type and message, or, when it carries none (httpx's
    ReadError as a restarting server drops the connection), what that means."""
    if str(exc).strip():
        return f"{type(exc).__name__}: {exc}"
    return f"{type(exc).__name__} (no reason given: the server closed the connection)"


async def health(client: httpx.AsyncClient) -> tuple[bool, str]:
    try:
        response = await client.get("/health")
    except httpx.HTTPError as exc:
        return False, f"GET /health failed: {error_text(exc)}"
    return response.status_code == 200, f"GET /health -> {response.status_code}"


async def vllm_version(client: httpx.AsyncClient) -> str | None:
    """The server's vLLM version (`GET /version`, every vLLM API server), None if it won't say."""
    try:
        response = await client.get("/version")
        version = response.json().get("version") if response.status_code == 200 else None
    except (httpx.HTTPError, ValueError, AttributeError):
        return None
    return str(version)[:40] if version else None


async def served_models(client: httpx.AsyncClient) -> list[dict[str, Any]]:
    response = await client.get("/v1/models")
    response.raise_for_status()
    models: list[dict[str, Any]] = response.json().get("data", [])
    return models
