"""`watch`: after Ready, follow every container and the API; the first failure is reported.

Log lines and container deaths arrive as events; what has no stream to follow is asked at an
interval: `/health`, whether the server still serves (`cluster.serving.liveness`: /metrics and a canary
completion) and each node's memory (`cluster.memory`). A node whose streams break (its Docker
engine restarted, its SSH dropped) while the API still answers is monitoring lost, not serving
lost: it is reported as such, saying which part of the node went away, opened again with
backoff and followed again from its last line. A death that no signature explains, or one a
node's hardware fault can be behind, is probed before it is reported
(`cluster.diagnosis.postmortem`), against each node's boot as its launch recorded it
(`cluster.nodes.boot`).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncGenerator
from contextlib import aclosing

import httpx

from cluster.config import ClusterConfig, Secrets
from cluster.diagnosis.failures import for_cluster
from cluster.diagnosis.postmortem import amend, needs_probe, probe
from cluster.errors import NodeError
from cluster.events import Event, Failed, Progress
from cluster.logs.container_stream import ClusterMonitor, FollowLost, FollowResumed, HealthLost
from cluster.nodes import ClusterConnection, NodeConnection
from cluster.nodes.boot import launch_boots
from cluster.operations.launch import api_base_url
from cluster.progress.checkpoint_follower import LogFollower, must_see
from cluster.progress.checkpoints import SERVING
from cluster.progress.reporter import Reporter
from cluster.resources.memory import MemoryWatch, read_memory
from cluster.resources.nccl_library import differ, launched, suspect_words
from cluster.serving import api
from cluster.serving.liveness import ServingWatch

RECONNECT_FIRST_S = 1.0
RECONNECT_MAX_S = 30.0
# While a node is not followed the probe is the only witness: ask the API at least this often.
LOST_PROBE_S = 5.0
NCCL_ANSWERS_S = 10.0  # reading what the launch's preflight found of each node's NCCL


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
    # the launch's preflight found the ranks loading different NCCL libraries: a collective
    # timing out names that first (cluster.resources.nccl_library). Asked after the logs are
    # followed, and briefly: a slow node must not hold the watch up (a collective takes
    # minutes to time out, so the words are in place long before one could)
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(NCCL_ANSWERS_S):
            mismatch = differ(await launched(config, connection.ordered()))
            if mismatch is not None:
                follower.learn(suspect_words(mismatch))
    base_url = await api_base_url(config, connection.head)
    head = config.head.name
    reconnecting: set[str] = set()
    wake = asyncio.Event()

    # A watch resumed after a bot restart in the middle of a launch finds a server still
    # starting: until the API first answers, misses count only once a start-up had its time.
    timeouts = config.timeouts
    starting_s = timeouts.weights + timeouts.engine + timeouts.api
    started = time.monotonic()
    api_answered = asyncio.Event()  # a server still starting is not judged by the canary yet

    async def probe_health(client: httpx.AsyncClient) -> None:
        misses, answered = 0, False
        while True:
            ok, detail = await api.health(client)
            answered = answered or ok
            if ok:
                api_answered.set()
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

    settings = config.watch
    memory = MemoryWatch(settings.memory_low_gib)

    async def watch_memory() -> None:
        """Every node's memory at the interval, all at once; a node being reconnected (or not
        answering this time) is read again next time."""

        async def read(node: NodeConnection) -> None:
            try:
                reading = await read_memory(node, timeout=timeouts.docker, at=time.monotonic())
            except (NodeError, ValueError):
                return
            found = memory.observe(reading)
            if found is not None:
                monitor.publish(found)

        while True:
            followed = [n for n in connection.ordered() if n.name not in reconnecting]
            await asyncio.gather(*map(read, followed))
            await asyncio.sleep(settings.memory_interval)

    async def what_was_lost(name: str) -> str:
        """Of a node whose streams broke: its Docker engine alone, or SSH to it."""
        node = connection.nodes.get(name)
        if node is None:
            return "it is not connected"
        try:
            await node.read_file("/proc/uptime", timeout=timeouts.connect)
        except NodeError:
            return "the connection to it (SSH) is lost"
        return "its Docker engine does not answer, SSH to it does"

    async with (
        api.api_client(base_url, read_timeout=10, api_key=secrets.api_key) as client,
        api.api_client(
            base_url, read_timeout=settings.canary_timeout + 5, api_key=secrets.api_key
        ) as canary_client,
    ):

        async def still_serving(item: FollowLost) -> str | None:
            """The API answers: only monitoring is lost (what of the node is said); the node is
            opened again, the API probed."""
            ok, _ = await api.health(client)
            if not ok:
                return None
            lost = await what_was_lost(item.node)
            if item.node not in reconnecting:
                reconnecting.add(item.node)
                wake.set()  # probe at the shorter interval from now on
                monitor.run(reconnect(item.node))
            return lost

        async def serving() -> None:
            await api_answered.wait()
            liveness = ServingWatch(settings, canary_client, config.serve.api_model_name, head)
            monitor.publish(await liveness.run())

        table, _ = for_cluster(config)
        # which boot each node is in, as its launch recorded it: a reboot is known, not guessed
        boots = await launch_boots(
            connection.ordered(), config.container.name, timeout=timeouts.docker
        )
        try:
            monitor.run(probe_health(client))
            monitor.run(serving())
            monitor.run(watch_memory())
            yield Progress(
                elapsed_s=reporter.elapsed(),
                phase="watch",
                message=f"watching {len(connection.nodes)} node(s) and {base_url}: /health every "
                f"{health_interval:g} s, /metrics every {settings.metrics_interval:g} s, a canary "
                f"when idle for {settings.canary_interval:g} s (answer within "
                f"{settings.canary_timeout:g} s), memory every {settings.memory_interval:g} s",
            )
            # One stream: log lines, deaths, the probe's verdict and reconnections; the first
            # failure (or a stop on request, which is none) ends the watch.
            async with aclosing(
                follower.failures(SERVING, still_serving=still_serving)
            ) as failures:
                async for event in failures:
                    if isinstance(event, Failed) and needs_probe(event, table):
                        found = await probe(config, connection, memory=memory, boots=boots)
                        event = amend(event, found, table)
                    yield event
        finally:
            await monitor.aclose()
