"""`watch`: after Ready, follow every container and the API; the first failure is reported.

Log lines and container deaths arrive as events; only the health probe runs on an interval,
because an HTTP endpoint has no stream to follow.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from cluster import api
from cluster.checkpoints import BY_ID, SERVING
from cluster.config import ClusterConfig, Secrets
from cluster.events import Event, Progress
from cluster.failures import API_DOWN
from cluster.follow import LogFollower, must_see
from cluster.launch import api_base_url
from cluster.monitor import ClusterMonitor
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
    unhealthy: asyncio.Queue[str] = asyncio.Queue()

    async def probe() -> None:
        misses = 0
        async with api.api_client(base_url, read_timeout=10, api_key=secrets.api_key) as client:
            while True:
                ok, detail = await api.health(client)
                misses = 0 if ok else misses + 1
                if misses >= health_failures:
                    await unhealthy.put(detail)
                    return
                await asyncio.sleep(health_interval)

    prober = asyncio.create_task(probe())
    try:
        yield Progress(elapsed_s=reporter.elapsed(), phase="watch",
                       message=f"watching {len(connection.nodes)} node(s) and {base_url}/health")
        failures = follower.failures(SERVING)
        health_miss = asyncio.create_task(unhealthy.get())
        next_failure = asyncio.create_task(anext(failures))
        try:
            done, _ = await asyncio.wait({health_miss, next_failure}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (health_miss, next_failure):
                task.cancel()
            # the generator cannot be closed while the cancelled anext() still runs it
            await asyncio.gather(health_miss, next_failure, return_exceptions=True)
            await failures.aclose()
        if next_failure in done and not next_failure.cancelled():
            yield next_failure.result()  # the first failure, or a stop on request (no failure)
        else:
            head = config.head.name
            yield reporter.known(BY_ID["health"], API_DOWN, {"detail": health_miss.result()}, node=head,
                               evidence=health_miss.result(), log_tail=monitor.tail(head))
    finally:
        prober.cancel()
        await asyncio.gather(prober, return_exceptions=True)
        await monitor.aclose()
