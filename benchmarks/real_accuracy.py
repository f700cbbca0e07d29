"""The bench against the real engine, checked by two measurements that are not ours: vLLM's own
benchmark client (`vllm bench serve` from the real engine's venv) and the server's own
Prometheus histograms, on the lab's real vLLM 0.32 (CPU) serving its tiny random-weight model.

Single stream, same prompt, same max_tokens, ignore_eos (so every request makes exactly
max_tokens tokens), temperature 0, one request at a time:
- ours: `Controller.bench` exactly as `spark-bot bench --runs N --concurrency 1 --requests N`
  runs it (over the controller's SSH forward to the head's API);
- the server's view of the very requests ours sent: /metrics read after each single-stream run,
  the delta of each histogram's `_sum` over one request (`_count` +1) being that request's own
  figure as the engine timed it: `vllm:time_to_first_token_seconds` (arrival at the engine to
  the first token), `vllm:request_time_per_output_token_seconds` (first to last token over
  n - 1), `vllm:e2e_request_latency_seconds`, `vllm:request_generation_tokens`
  (vllm/v1/metrics/loggers.py and stats.py of 0.32);
- vLLM's client: `vllm bench serve --backend openai-chat --endpoint /v1/chat/completions
  --dataset-name sharegpt` (a file of one conversation, our prompt, sent as the user's message:
  the server applies the chat template, as for ours; the `custom` dataset would need pandas,
  which the engine's venv lacks) `--sharegpt-output-len N --ignore-eos --temperature 0
  --max-concurrency 1 --num-warmups 1 --save-detailed`, straight to the head's API address.

The first of our runs follows the warm-up with no /metrics read between them, so the paired
server figures are for runs 2..N.
"""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cluster.api import api_client
from cluster.bench.models import BenchReport
from cluster.bench.runner import DEFAULT_PROMPT
from cluster.bench.server_metrics import sample_sums
from cluster.config import ClusterConfig, Secrets
from cluster.controller import Controller
from cluster.events import BenchResult, Failed, Progress, Ready

VENV = Path("/var/cache/spark-lab/real-engine/venv")

# what the engine records once per request, by our name for it (vLLM 0.32)
HISTOGRAMS = {
    "ttft_s": "vllm:time_to_first_token_seconds",
    "tpot_s": "vllm:request_time_per_output_token_seconds",
    "e2e_s": "vllm:e2e_request_latency_seconds",
    "tokens": "vllm:request_generation_tokens",
}
SAMPLES = [f"{name}_{part}" for name in HISTOGRAMS.values() for part in ("sum", "count")]
RUN_DONE = "single stream run "  # the bench's progress message after each measured run


@dataclass(frozen=True)
class Request:
    """One request's figures, from whichever side measured it."""

    ttft_s: float
    e2e_s: float
    tokens: int
    tpot_s: float | None = None  # (last token - first) / (tokens - 1) when not derived

    @property
    def decode_tok_s(self) -> float:
        tpot = (
            self.tpot_s
            if self.tpot_s is not None
            else ((self.e2e_s - self.ttft_s) / (self.tokens - 1))
        )
        return 1.0 / tpot

    @property
    def output_tok_s(self) -> float:
        return self.tokens / self.e2e_s


@dataclass
class Side:
    """A measurement's requests and its whole-run output rate at concurrency 1."""

    name: str
    requests: list[Request] = field(default_factory=list)
    output_tok_s: float | None = None  # total tokens / the run's wall time

    def median(self, figure: str) -> float:
        return statistics.median(float(getattr(r, figure)) for r in self.requests)

    def spread(self, figure: str) -> float:
        """The interquartile range relative to the median: how noisy the figure is."""
        values = [float(getattr(r, figure)) for r in self.requests]
        if len(values) < 4:
            return 0.0
        q1, _, q3 = statistics.quantiles(values, n=4, method="inclusive")
        return (q3 - q1) / statistics.median(values)


def snapshot(text: str, model: str) -> dict[str, float]:
    sums = sample_sums(text, SAMPLES, model)
    missing = [s for s in SAMPLES if s not in sums]
    if missing:
        raise RuntimeError(f"/metrics has no {', '.join(missing)}: not vLLM 0.32's histograms?")
    return sums


def one_request(before: dict[str, float], after: dict[str, float]) -> Request:
    """The request the engine finished between two snapshots, from its histograms' sums."""
    counts = {after[f"{n}_count"] - before[f"{n}_count"] for n in HISTOGRAMS.values()}
    if counts != {1}:
        raise RuntimeError(f"expected one request between two /metrics reads, saw {counts}")
    value = {k: after[f"{n}_sum"] - before[f"{n}_sum"] for k, n in HISTOGRAMS.items()}
    return Request(value["ttft_s"], value["e2e_s"], round(value["tokens"]), value["tpot_s"])


class ServerView:
    """Reads /metrics straight from the head's API (not through our bench's client)."""

    def __init__(self, base_url: str, model: str, api_key: str | None):
        self.model = model
        self.client = api_client(base_url, read_timeout=30, connections=1, api_key=api_key)
        self.last: dict[str, float] | None = None
        self.requests: list[Request] = []

    async def read(self) -> dict[str, float]:
        response = await self.client.get("/metrics")
        response.raise_for_status()
        return snapshot(response.text, self.model)

    async def after_a_run(self, within: float = 10.0) -> None:
        """Wait for the engine to have recorded the run just finished, then keep its figures
        (the first call only marks where the next request starts)."""
        finished = f"{HISTOGRAMS['e2e_s']}_count"
        async with asyncio.timeout(within):
            while True:
                now = await self.read()
                if self.last is None or now[finished] > self.last[finished]:
                    break
                await asyncio.sleep(0.05)  # the engine records a step after it sends it
        if self.last is not None:
            self.requests.append(one_request(self.last, now))
        self.last = now

    async def aclose(self) -> None:
        await self.client.aclose()


async def launch(controller: Controller) -> Ready:
    ready = None
    async for event in controller.up():
        if isinstance(event, Failed):
            raise RuntimeError(f"the real engine did not launch: {event.summary}")
        if isinstance(event, Ready):
            ready = event
    if ready is None:
        raise RuntimeError("up ended without Ready")
    return ready


async def ours(
    controller: Controller, server: ServerView, *, max_tokens: int, runs: int, prompt: str
) -> BenchReport:
    """spark-bot's bench as the CLI runs it; /metrics read after each single-stream run."""
    report = None
    async for event in controller.bench(
        concurrency=[1], max_tokens=max_tokens, runs=runs, requests_per_level=runs, prompt=prompt
    ):
        if isinstance(event, Progress) and event.message.startswith(RUN_DONE):
            await server.after_a_run()
        elif isinstance(event, Failed):
            raise RuntimeError(f"the bench failed: {event.summary}")
        elif isinstance(event, BenchResult):
            report = event.report
    if report is None:
        raise RuntimeError("the bench ended without a result")
    if len(server.requests) != runs - 1:
        raise RuntimeError(
            f"read the server's figures for {len(server.requests)} of {runs - 1} runs: "
            f"did the bench's progress messages ({RUN_DONE!r}...) change?"
        )
    return report


def our_side(report: BenchReport) -> Side:
    single = report.single
    assert single is not None
    side = Side("spark-bot bench", output_tok_s=report.sweep[0].output_tok_s)
    for m in single.runs:
        if not m.ok or m.ttft_s is None or m.e2e_s is None or m.completion_tokens is None:
            raise RuntimeError(f"a single-stream run failed: {m.error}")
        side.requests.append(Request(m.ttft_s, m.e2e_s, m.completion_tokens, m.tpot_s))
    return side


def dataset(prompt: str) -> str:
    """A ShareGPT file of one conversation: our prompt (the reply's text is not used)."""
    turns = [{"from": "human", "value": prompt}, {"from": "gpt", "value": "-"}]
    return json.dumps([{"id": "spark-bot-bench", "conversations": turns}])


def vllm_bench_argv(
    base_url: str,
    model: str,
    tokenizer: Path,
    dataset: Path,
    result_dir: Path,
    max_tokens: int,
    n: int,
) -> list[str]:
    return [
        str(VENV / "bin" / "vllm"),
        "bench",
        "serve",
        "--backend",
        "openai-chat",
        "--base-url",
        base_url,
        "--endpoint",
        "/v1/chat/completions",
        "--model",
        model,
        "--tokenizer",
        str(tokenizer),
        "--dataset-name",
        "sharegpt",
        "--dataset-path",
        str(dataset),
        "--sharegpt-output-len",
        str(max_tokens),
        "--num-prompts",
        str(n),
        "--num-warmups",
        "1",
        "--max-concurrency",
        "1",
        "--ignore-eos",
        "--temperature",
        "0",
        "--percentile-metrics",
        "ttft,tpot,itl,e2el",
        "--metric-percentiles",
        "50",
        "--disable-tqdm",
        "--save-result",
        "--save-detailed",
        "--result-dir",
        str(result_dir),
        "--result-filename",
        "vllm.json",
    ]


async def vllm_bench(
    base_url: str,
    model: str,
    tokenizer: Path,
    *,
    max_tokens: int,
    n: int,
    prompt: str,
    api_key: str | None,
    timeout: float = 900,
) -> tuple[Side, dict[str, Any]]:
    """vLLM's own client, run once (n requests after a warm-up) against `base_url`."""
    with tempfile.TemporaryDirectory(prefix="vllm-bench-") as tmp:
        folder = Path(tmp)
        path = folder / "prompt.json"
        path.write_text(dataset(prompt))  # one prompt, sampled n times
        argv = vllm_bench_argv(base_url, model, tokenizer, path, folder, max_tokens, n)
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "OPENAI_API_KEY": api_key or ""}
        proc = await asyncio.create_subprocess_exec(
            *argv,
            env=env,
            cwd=folder,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
        )
        try:
            async with asyncio.timeout(timeout):
                output, _ = await proc.communicate()
        except TimeoutError:
            proc.kill()
            await proc.wait()
            raise
        result_file = folder / "vllm.json"
        if proc.returncode != 0 or not result_file.exists():
            tail = output.decode(errors="replace").splitlines()[-20:]
            raise RuntimeError(
                f"vllm bench serve exited {proc.returncode}:\n  " + "\n  ".join(tail)
            )
        result = json.loads(result_file.read_text())
    side = Side("vllm bench serve", output_tok_s=float(result["output_throughput"]))
    errors = [e for e in result.get("errors", []) if e]
    if errors or result["completed"] != n:
        raise RuntimeError(f"vllm bench serve: {result['completed']}/{n} completed: {errors[:1]}")
    for ttft, latency, tokens in zip(
        result["ttfts"], result["latencies"], result["output_lens"], strict=True
    ):
        side.requests.append(Request(float(ttft), float(latency), int(tokens)))
    return side, result


# --- the comparison ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Figure:
    label: str
    attribute: str  # of Request
    scale: float = 1.0  # for printing (ms)


FIGURES = [
    Figure("TTFT ms", "ttft_s", 1000.0),
    Figure("decode tok/s (1/TPOT)", "decode_tok_s"),
    Figure("output tok/s per request (tokens / e2e)", "output_tok_s"),
    Figure("tokens per request", "tokens"),
]


@dataclass
class Row:
    figure: str
    ours: float
    theirs: float
    against: str
    bound: float | None  # relative; None: reported, not checked

    @property
    def error(self) -> float:
        return (self.ours - self.theirs) / self.theirs

    @property
    def ok(self) -> bool:
        return self.bound is None or abs(self.error) <= self.bound


def paired(ours: Side, server: Side, attribute: str) -> float:
    """The median over requests of (ours - server) / server, each request against itself:
    ours' runs 2..N against the engine's figures for the same requests."""
    mine = ours.requests[1:]
    return statistics.median(
        (float(getattr(a, attribute)) - float(getattr(b, attribute))) / float(getattr(b, attribute))
        for a, b in zip(mine, server.requests, strict=True)
    )


def rows(ours: Side, vllm: Side | None, server: Side, bounds: dict[str, float]) -> list[Row]:
    out = []
    for f in FIGURES:
        if vllm is not None:
            out.append(
                Row(
                    f.label,
                    ours.median(f.attribute) * f.scale,
                    vllm.median(f.attribute) * f.scale,
                    vllm.name,
                    bounds.get(f.attribute),
                )
            )
        out.append(
            Row(
                f.label,
                statistics.median(float(getattr(r, f.attribute)) for r in ours.requests[1:])
                * f.scale,
                server.median(f.attribute) * f.scale,
                "engine /metrics (same requests)",
                None,
            )
        )
    if vllm is not None and ours.output_tok_s and vllm.output_tok_s:
        out.append(
            Row(
                f"output tok/s, {len(ours.requests)} requests one after another",
                ours.output_tok_s,
                vllm.output_tok_s,
                vllm.name,
                None,
            )
        )
    return out


def table(result: list[Row]) -> str:
    lines = [
        "| figure | spark-bot bench | independent | by | difference | bound | |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in result:
        bound = "-" if r.bound is None else f"±{r.bound * 100:.0f}%"
        verdict = "" if r.bound is None else ("ok" if r.ok else "MISSED")
        lines.append(
            f"| {r.figure} | {r.ours:.2f} | {r.theirs:.2f} | {r.against} | "
            f"{r.error * 100:+.1f}% | {bound} | {verdict} |"
        )
    return "\n".join(lines)


def noise(sides: Sequence[Side]) -> str:
    parts = []
    for side in sides:
        spreads = ", ".join(
            f"{f.label.split(' (')[0]} {side.spread(f.attribute) * 100:.1f}%" for f in FIGURES[:3]
        )
        parts.append(f"{side.name} (n={len(side.requests)}): {spreads}")
    return "noise, interquartile range / median: " + "; ".join(parts)


def tokenizer_dir(config: ClusterConfig) -> Path:
    """Where the served model's tokenizer lies on this machine (the mount behind serve.model)."""
    for mount in config.container.mounts:
        if mount.target == config.serve.model:
            return Path(mount.source)
    raise ValueError(f"no mount serves {config.serve.model}: which tokenizer would vLLM use?")


def direct_url(config: ClusterConfig) -> str:
    """The head's API at its own address (the lab's host reaches the nodes' network)."""
    ssh = config.head.ssh
    if ssh is None:
        raise ValueError("the real engine's lab nodes are reached over SSH")
    return f"http://{ssh.host}:{config.serve.port}"


@dataclass
class Measured:
    ours: Side
    server: Side
    vllm: Side | None
    report: BenchReport
    vllm_result: dict[str, Any] | None
    ready: Ready


async def measure(
    config: ClusterConfig,
    secrets: Secrets,
    *,
    max_tokens: int,
    runs: int,
    with_vllm: bool = True,
    prompt: str = DEFAULT_PROMPT,
) -> Measured:
    """On a cluster with nothing of ours running: launch, measure both ways, leave it running
    (the caller removes it)."""
    controller = Controller(config, secrets)
    ready = await launch(controller)
    model = config.serve.api_model_name
    server = ServerView(direct_url(config), model, secrets.api_key)
    try:
        report = await ours(controller, server, max_tokens=max_tokens, runs=runs, prompt=prompt)
    finally:
        await server.aclose()
    vllm = result = None
    if with_vllm:
        vllm, result = await vllm_bench(
            direct_url(config),
            model,
            tokenizer_dir(config),
            max_tokens=max_tokens,
            n=runs,
            prompt=prompt,
            api_key=secrets.api_key,
        )
    return Measured(
        our_side(report), Side("engine /metrics", server.requests), vllm, report, result, ready
    )
