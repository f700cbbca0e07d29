"""`verify`: re-check a running cluster, checkpoint by checkpoint, with the evidence."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from datetime import UTC, datetime

import httpx

from cluster import api
from cluster.bench.stream import sample_completion
from cluster.checkpoints import verify_plan
from cluster.config import ClusterConfig, Secrets
from cluster.events import Event
from cluster.inventory import container_states, read_log_tail
from cluster.launch import api_base_url
from cluster.nodes import ClusterConnection
from cluster.ray_status import parse_ray_status, shortfall
from cluster.report import Report
from cluster.signatures import diagnose, for_cluster


async def verify(
    config: ClusterConfig, secrets: Secrets, connection: ClusterConnection, *, sample_max_tokens: int = 32
) -> AsyncIterator[Event]:
    report = Report()
    plan = {c.id: c for c in verify_plan(config)}
    name = config.container.name

    def passed(checkpoint: str, evidence: str, node: str | None = None, tail: Sequence[str] = ()):
        return report.passed(plan[checkpoint], evidence, node=node, log_tail=tail)

    def failed(checkpoint: str, summary: str, cause: str, fix: str, node: str | None = None,
               evidence: str | None = None, tail: Sequence[str] = (), signature: str | None = None):
        return report.failed(plan[checkpoint], summary, cause=cause, fix=fix, node=node,
                             evidence=evidence, log_tail=tail, signature=signature)

    for error in connection.errors.values():
        yield report.unreachable(error, plan["containers"])
        return
    nodes = connection.ordered()
    tails = {n.name: await read_log_tail(n, name, config.log_tail_lines, secrets) for n in nodes}
    states = await container_states(nodes, name)
    now = datetime.now(UTC)
    down = [s for s in states if not s.running]
    if down:
        state = down[0]
        diagnosis = diagnose(tails[state.node], *for_cluster(config)) if state.present else None
        yield failed(
            "containers",
            f"{name} on {state.node} is {state.status}" + (f" (exit code {state.exit_code})" if state.exit_code is not None else ""),
            diagnosis.cause if diagnosis else "the container is not running",
            diagnosis.fix if diagnosis else "`up` launches the cluster (`down` first if a stopped container remains)",
            node=state.node, evidence=diagnosis.evidence if diagnosis else None, tail=tails[state.node],
            signature=diagnosis.signature_id if diagnosis else None,
        )
        return
    yield passed("containers", "\n".join(
        f"{s.node}: {s.container} running, up {_duration(now - s.started_at) if s.started_at else '?'}"
        for s in states))
    images = {s.node: s.image_id or "?" for s in states}
    if len(set(images.values())) > 1:
        listing = "; ".join(f"{node}: {image[:19]}" for node, image in images.items())
        yield failed("image", f"the containers run different images: {listing}",
                     "the nodes had different images when launched",
                     "make the image identical on every node, then `down` and `up`")
        return
    yield passed("image", f"every container runs {next(iter(images.values()))[:19]}")

    head = connection.head
    if "ray_cluster" in plan:
        output = await head.docker.exec_output(name, ["ray", "status"], timeout=config.timeouts.ray)
        state = parse_ray_status(output)
        lacking = shortfall(state, len(nodes), config.serve.world_size)
        if lacking is not None:
            yield failed("ray_cluster", lacking, "a node left the Ray cluster",
                         "check the worker's log (`logs worker`); `down` then `up` relaunches",
                         node=head.name, evidence=state.describe(), tail=output.splitlines()[-20:])
            return
        yield passed("ray_cluster", state.describe(), head.name, output.splitlines()[-20:])

    base_url = await api_base_url(config, head)
    model = config.serve.api_model_name
    async with api.api_client(base_url, read_timeout=config.timeouts.api) as client:
        ok, detail = await api.health(client)
        if not ok:
            diagnosis = diagnose(tails[head.name], *for_cluster(config))
            yield failed("health", detail, diagnosis.cause if diagnosis else "the API server is not healthy",
                         diagnosis.fix if diagnosis else "read the head's log tail; `down` then `up` relaunches",
                         node=head.name, tail=tails[head.name],
                         signature=diagnosis.signature_id if diagnosis else None)
            return
        yield passed("health", detail, head.name, tails[head.name])
        try:
            ids = [m.get("id") for m in await api.served_models(client)]
        except httpx.HTTPError as error:
            yield failed("models", f"GET /v1/models failed: {error}", "the API server does not answer",
                         "read the head's log tail; `down` then `up` relaunches", node=head.name,
                         tail=tails[head.name])
            return
        if model not in ids:
            yield failed("models", f"GET /v1/models lists {ids}, not {model}",
                         "a different model is being served", "check serve.served_model_name",
                         node=head.name)
            return
        yield passed("models", f"GET /v1/models -> {ids}", head.name)
        try:
            sample = await sample_completion(client, model, max_tokens=sample_max_tokens)
        except (httpx.HTTPError, ValueError) as error:
            yield failed("sample", f"test completion failed: {error}", "the engine does not answer",
                         "read the head's log tail; `down` then `up` relaunches", node=head.name,
                         tail=tails[head.name])
            return
        rate = f"{sample.decode_tps:.1f} tok/s" if sample.decode_tps else "n/a"
        yield passed("sample", f"{sample.completion_tokens} tokens in {sample.e2e_s:.2f} s "
                     f"(TTFT {sample.ttft_s * 1000:.0f} ms, decode {rate}): {(sample.text or sample.reasoning)[:200]!r}",
                     head.name)


def _duration(delta) -> str:
    seconds = int(delta.total_seconds())
    hours, rest = divmod(seconds, 3600)
    minutes, seconds = divmod(rest, 60)
    return f"{hours}h{minutes:02d}m" if hours else f"{minutes}m{seconds:02d}s"

