"""`watch`: after Ready, follow every container and the API; the first failure is reported.

Log lines and container deaths arrive as events; only the health probe runs on an interval,
because an HTTP endpoint has no stream to follow. A node whose streams break (its Docker engine
restarted, its SSH dropped) while the API still answers is monitoring lost, not serving lost:
it is reported as such, opened again with backoff and followed again from its last line.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncGenerator
from contextlib import aclosing

import httpx

from cluster import api
from cluster.checkpoints import SERVING
from cluster.config import ClusterConfig, Secrets
from cluster.errors import NodeError
from cluster.events import Event, Progress
from cluster.follow import LogFollower, must_see
from cluster.launch import api_base_url
from cluster.monitor import ClusterMonitor, FollowLost, FollowResumed, HealthLost
from cluster.nodes import ClusterConnection
from cluster.reporter import Reporter

RECONNECT_FIRST_S = 1.0
RECONNECT_MAX_S = 30.0
# While a node is not followed the probe is the only witness: ask the API at least this often.
LOST_PROBE_S = 5.0


async def watch(
    config: ClusterConfig,
    secrets: Secrets,
    connection: ClusterConnection,
    *,
    health_interval: float = 30.0,
    health_failures: int = 3,
) -> AsyncGenerator[Event, None]:
    reporter = Reporter()
    for error in connection.errors.values():
        yield reporter.unreachable(error, SERVING)
        return
    monitor = ClusterMonitor(
        config.container.name, secrets, config.log_tail_lines, matters=must_see(config)
    )
    follower = LogFollower(config, monitor, reporter)
    for node in connection.ordered():
        monitor.follow(node, backlog=config.log_tail_lines)
    base_url = await api_base_url(config, connection.head)
    head = config.head.name
    reconnecting: set[str] = set()
    wake = asyncio.Event()

    # A watch resumed after a bot restart in the middle of a launch finds a server still
    # starting: until the API first answers, misses count only once a start-up had its time.
    timeouts = config.timeouts
    starting_s = timeouts.weights + timeouts.engine + timeouts.api
    started = time.monotonic()

    async def probe(client: httpx.AsyncClient) -> None:
        misses, answered = 0, False
        while True:
            ok, detail = await api.health(client)
            answered = answered or ok
            starting = not answered and time.monotonic() - started < starting_s
            misses = 0 if ok or starting else misses + 1
            if misses >= health_failures:
                if not answered:
                    detail += f" (it has not answered since the watch began {time.monotonic() - started:.0f} s ago)"
                monitor.publish(HealthLost(head, detail))
                return
            interval = min(health_interval, LOST_PROBE_S) if reconnecting else health_interval
            try:
                async with asyncio.timeout(interval):
                    await wake.wait()
            except TimeoutError:
                pass
            wake.clear()

    async def reconnect(name: str) -> None:
        lost_at, delay = time.monotonic(), RECONNECT_FIRST_S
        while True:
            await asyncio.sleep(delay)
            try:
                node = await connection.reopen(name)
            except NodeError:
                delay = min(delay * 2, RECONNECT_MAX_S)
                continue
            await monitor.refollow(node)
            reconnecting.discard(name)
            monitor.publish(FollowResumed(name, time.monotonic() - lost_at))
            return

    async with api.api_client(base_url, read_timeout=10, api_key=secrets.api_key) as client:

        async def still_serving(item: FollowLost) -> bool:
            """The API answers: only monitoring is lost; the node is opened again, the API probed."""
            ok, _ = await api.health(client)
            if ok and item.node not in reconnecting:
                reconnecting.add(item.node)
                wake.set()  # probe at the shorter interval from now on
                monitor.run(reconnect(item.node))
            return ok

        try:
            monitor.run(probe(client))
            yield Progress(
                elapsed_s=reporter.elapsed(),
                phase="watch",
                message=f"watching {len(connection.nodes)} node(s) and {base_url}/health",
            )
            # One stream: log lines, deaths, the probe's verdict and reconnections; the first
            # failure (or a stop on request, which is none) ends the watch.
            async with aclosing(
                follower.failures(SERVING, still_serving=still_serving)
            ) as failures:
                async for event in failures:
                    yield event
        finally:
            await monitor.aclose()
