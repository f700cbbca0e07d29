"""vLLM's Prometheus /metrics, parsed with prometheus-client's text parser."""

from __future__ import annotations

from collections.abc import Collection
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


def sample_sums(text: str, names: Collection[str], model: str | None = None) -> dict[str, float]:
    """Each named sample summed over its series (one per engine), keeping `model` when
    labelled; a name /metrics lacks is absent from the answer.

    Counters are exposed as `<name>_total` and histograms as `<name>_sum`, `<name>_count`;
    prometheus-client names the family without the suffix and keeps it on the sample, so
    samples are matched by sample name.
    """
    sums: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name not in names:
                continue
            labelled = sample.labels.get("model_name")
            if model is not None and labelled is not None and labelled != model:
                continue
            sums[sample.name] = sums.get(sample.name, 0.0) + float(sample.value)
    return sums


def parse_counters(text: str, model: str | None = None) -> ServerCounters:
    wanted = (RUNNING, WAITING, GENERATION_TOKENS)
    sums = sample_sums(text, wanted, model)
    missing = [name for name in wanted if name not in sums]
    if missing:
        raise ValueError(f"/metrics has no {', '.join(sorted(missing))}")
    return ServerCounters(sums[RUNNING], sums[WAITING], sums[GENERATION_TOKENS])


async def read_counters(client: httpx.AsyncClient, model: str | None = None) -> ServerCounters:
    response = await client.get("/metrics")
    response.raise_for_status()
    return parse_counters(response.text, model)
