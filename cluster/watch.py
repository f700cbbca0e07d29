"""`watch`: after Ready, follow every container and the API; the first failure is reported.

Log lines and container deaths arrive as events; only the health probe runs on an interval,
because an HTTP endpoint has no stream to follow.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import aclosing

from cluster import api
from cluster.checkpoints import SERVING
from cluster.config import ClusterConfig, Secrets
from cluster.events import Event, Progress
from cluster.follow import LogFollower, must_see
from cluster.launch import api_base_url
from cluster.monitor import ClusterMonitor, HealthLost
from cluster.nodes import ClusterConnection
from cluster.reporter import Reporter


async def watch(
    config: ClusterConfig,
    secrets: Secrets,
    connection: ClusterConnection,
    *,
    health_interval: float = 30.0,
    health_failures: int = 3,
) -> AsyncIterator[Event]:
    reporter = Reporter()
    for error in connection.errors.values():
        yield reporter.unreachable(error, SERVING)
        return
    monitor = ClusterMonitor(config.container.name, secrets, config.log_tail_lines, matters=must_see(config))
    follower = LogFollower(config, monitor, reporter)
    for node in connection.ordered():
        monitor.follow(node, backlog=config.log_tail_lines)
    base_url = await api_base_url(config, connection.head)
    head = config.head.name

    async def probe() -> None:
        misses = 0
        async with api.api_client(base_url, read_timeout=10, api_key=secrets.api_key) as client:
            while True:
                ok, detail = await api.health(client)
                misses = 0 if ok else misses + 1
                if misses >= health_failures:
                    monitor.publish(HealthLost(head, detail))
                    return
                await asyncio.sleep(health_interval)

    try:
        monitor.run(probe())
        yield Progress(elapsed_s=reporter.elapsed(), phase="watch",
                       message=f"watching {len(connection.nodes)} node(s) and {base_url}/health")
        # One stream: log lines, deaths and the probe's verdict; the first failure (or a stop
        # on request, which is none) ends the watch.
        async with aclosing(follower.failures(SERVING)) as failures:
            async for event in failures:
                yield event
                return
    finally:
        await monitor.aclose()
