"""vLLM's Prometheus /metrics, parsed with prometheus-client's text parser."""

from __future__ import annotations

from dataclasses import dataclass

import httpx
from prometheus_client.parser import text_string_to_metric_families

RUNNING = "vllm:num_requests_running"
WAITING = "vllm:num_requests_waiting"
GENERATION_TOKENS = "vllm:generation_tokens_total"


@dataclass(frozen=True)
class ServerCounters:
    running: float
    waiting: float
    generation_tokens: float

    @property
    def busy(self) -> bool:
        return self.running > 0 or self.waiting > 0


def parse_counters(text: str, model: str | None = None) -> ServerCounters:
    """Sum each metric over its samples (one per engine), keeping `model` when labelled.

    Counters are exposed as `<name>_total`; prometheus-client names the family without the
    suffix and keeps it on the sample, so samples are matched by sample name.
    """
    sums = {RUNNING: 0.0, WAITING: 0.0, GENERATION_TOKENS: 0.0}
    seen: set[str] = set()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name not in sums:
                continue
            labelled = sample.labels.get("model_name")
            if model is not None and labelled is not None and labelled != model:
                continue
            sums[sample.name] += float(sample.value)
            seen.add(sample.name)
    missing = set(sums) - seen
    if missing:
        raise ValueError(f"/metrics has no {', '.join(sorted(missing))}")
    return ServerCounters(sums[RUNNING], sums[WAITING], sums[GENERATION_TOKENS])


async def read_counters(client: httpx.AsyncClient, model: str | None = None) -> ServerCounters:
    response = await client.get("/metrics")
    response.raise_for_status()
    return parse_counters(response.text, model)
