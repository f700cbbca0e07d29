"""`verify`: re-check a running cluster, checkpoint by checkpoint, with the evidence."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Sequence
from contextlib import aclosing
from datetime import UTC, datetime, timedelta

import httpx

from cluster.bench.stream import sample_completion
from cluster.config import ClusterConfig, Secrets
from cluster.diagnosis.engine import Diagnosis, diagnose, explained_by
from cluster.diagnosis.failures import (
    API_NOT_ANSWERING,
    API_UNHEALTHY,
    CONTAINER_IMAGES_DIFFER,
    CONTAINER_NOT_RUNNING,
    ENGINE_NOT_ANSWERING,
    RAY_NODE_LEFT,
    WRONG_MODEL,
    KnownFailure,
    for_cluster,
)
from cluster.events import CheckpointPassed, ContainerState, Event, Failed
from cluster.nodes import ClusterConnection
from cluster.operations.inventory import container_states, read_log_tail
from cluster.operations.launch import api_base_url
from cluster.progress.checkpoints import verify_plan
from cluster.progress.reporter import Reporter
from cluster.progress.steps import Step, run_steps
from cluster.serving import api
from cluster.serving.ray_status import parse_ray_status, shortfall


async def verify(
    config: ClusterConfig,
    secrets: Secrets,
    connection: ClusterConnection,
    *,
    sample_max_tokens: int = 32,
) -> AsyncGenerator[Event, None]:
    checks = Verify(config, secrets, connection, sample_max_tokens)
    async with aclosing(run_steps(checks.steps(), checks.reporter)) as events:
        async for event in events:
            yield event


class Verify:
    """The checks of a running cluster, each a step; the log tails read first are their evidence."""

    def __init__(
        self,
        config: ClusterConfig,
        secrets: Secrets,
        connection: ClusterConnection,
        sample_max_tokens: int,
    ):
        self.config = config
        self.secrets = secrets
        self.connection = connection
        self.sample_max_tokens = sample_max_tokens
        self.reporter = Reporter()
        self.plan = {c.id: c for c in verify_plan(config)}
        self.tails: dict[str, list[str]] = {}
        self.states: list[ContainerState] = []

    def steps(self) -> list[Step]:
        steps = [
            Step(self.plan["containers"], self._containers),
            Step(self.plan["image"], self._same_image),
        ]
        if "ray_cluster" in self.plan:
            steps.append(Step(self.plan["ray_cluster"], self._ray_cluster))
        return [*steps, Step(self.plan["health"], self._api)]

    def _passed(
        self, checkpoint: str, evidence: str, node: str | None = None, tail: Sequence[str] = ()
    ) -> CheckpointPassed:
        return self.reporter.passed(self.plan[checkpoint], evidence, node=node, log_tail=tail)

    def _failed(
        self,
        checkpoint: str,
        failure: KnownFailure,
        values: dict[str, str],
        node: str | None = None,
        evidence: str | None = None,
        tail: Sequence[str] = (),
        explained: Diagnosis | None = None,
    ) -> Failed:
        """`failure` of the checkpoint; the cause and fix of `explained` instead, when the log
        tail says why (the summary stays what was seen)."""
        failed = self.reporter.known(
            self.plan[checkpoint], failure, values, node=node, evidence=evidence, log_tail=tail
        )
        return failed if explained is None else explained_by(failed, explained)

    async def _containers(self) -> AsyncGenerator[Event, None]:
        for error in self.connection.errors.values():
            yield self.reporter.unreachable(error, self.plan["containers"])
            return
        name, nodes = self.config.container.name, self.connection.ordered()
        tails = await asyncio.gather(
            *(read_log_tail(n, name, self.config.log_tail_lines, self.secrets) for n in nodes)
        )
        self.tails = {n.name: tail for n, tail in zip(nodes, tails, strict=True)}
        self.states = await container_states(nodes, name)
        now = datetime.now(UTC)
        down = [s for s in self.states if not s.running]
        if down:
            state = down[0]
            diagnosis = (
                diagnose(self.tails[state.node], *for_cluster(self.config))
                if state.present
                else None
            )
            exit_code = f" (exit code {state.exit_code})" if state.exit_code is not None else ""
            yield self._failed(
                "containers",
                CONTAINER_NOT_RUNNING,
                {"container": name, "node": state.node, "state": state.status + exit_code},
                node=state.node,
                evidence=diagnosis.evidence if diagnosis else None,
                tail=self.tails[state.node],
                explained=diagnosis,
            )
            return
        yield self._passed(
            "containers",
            "\n".join(
                f"{s.node}: {s.container} running, up {_duration(now - s.started_at) if s.started_at else '?'}"
                for s in self.states
            ),
        )

    async def _same_image(self) -> AsyncGenerator[Event, None]:
        images = {s.node: s.image_id or "?" for s in self.states}
        if len(set(images.values())) > 1:
            listing = "; ".join(f"{node}: {image[:19]}" for node, image in images.items())
            yield self._failed("image", CONTAINER_IMAGES_DIFFER, {"listing": listing})
            return
        yield self._passed("image", f"every container runs {next(iter(images.values()))[:19]}")

    async def _ray_cluster(self) -> AsyncGenerator[Event, None]:
        head = self.connection.head
        output = await head.docker.exec_output(
            self.config.container.name, ["ray", "status"], timeout=self.config.timeouts.ray
        )
        state = parse_ray_status(output)
        lacking = shortfall(state, len(self.connection.ordered()), self.config.serve.world_size)
        if lacking is not None:
            yield self._failed(
                "ray_cluster",
                RAY_NODE_LEFT,
                lacking,
                node=head.name,
                evidence=state.describe(),
                tail=output.splitlines()[-20:],
            )
            return
        yield self._passed("ray_cluster", state.describe(), head.name, output.splitlines()[-20:])

    async def _api(self) -> AsyncGenerator[Event, None]:
        head = self.connection.head
        tail = self.tails[head.name]
        model = self.config.serve.api_model_name
        base_url = await api_base_url(self.config, head)
        async with api.api_client(
            base_url, read_timeout=self.config.timeouts.api, api_key=self.secrets.api_key
        ) as client:
            ok, detail = await api.health(client)
            if not ok:
                yield self._failed(
                    "health",
                    API_UNHEALTHY,
                    {"detail": detail},
                    node=head.name,
                    tail=tail,
                    explained=diagnose(tail, *for_cluster(self.config)),
                )
                return
            yield self._passed("health", detail, head.name, tail)
            try:
                ids = [m.get("id") for m in await api.served_models(client)]
            except httpx.HTTPError as error:
                yield self._failed(
                    "models", API_NOT_ANSWERING, {"error": str(error)}, node=head.name, tail=tail
                )
                return
            if model not in ids:
                yield self._failed(
                    "models", WRONG_MODEL, {"served": str(ids), "model": model}, node=head.name
                )
                return
            yield self._passed("models", f"GET /v1/models -> {ids}", head.name)
            try:
                sample = await sample_completion(client, model, max_tokens=self.sample_max_tokens)
            except (httpx.HTTPError, ValueError) as error:
                yield self._failed(
                    "sample", ENGINE_NOT_ANSWERING, {"error": str(error)}, node=head.name, tail=tail
                )
                return
            rate = f"{sample.decode_tps:.1f} tok/s" if sample.decode_tps else "n/a"
            yield self._passed(
                "sample",
                f"{sample.completion_tokens} tokens in {sample.e2e_s:.2f} s "
                f"(TTFT {sample.ttft_s * 1000:.0f} ms, decode {rate}): "
                f"{(sample.text or sample.reasoning)[:200]!r}",
                head.name,
            )


def _duration(delta: timedelta) -> str:
    seconds = int(delta.total_seconds())
    hours, rest = divmod(seconds, 3600)
    minutes, seconds = divmod(rest, 60)
    return f"{hours}h{minutes:02d}m" if hours else f"{minutes}m{seconds:02d}s"
