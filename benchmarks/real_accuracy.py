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
  --max-concurrency 1 --num-warmups 0 --save-detailed`, straight to the head's API address.

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

from cluster.bench.models import BenchReport
from cluster.bench.runner import DEFAULT_PROMPT
from cluster.bench.server_metrics import sample_sums
from cluster.config import ClusterConfig, Secrets
from cluster.controller import Controller
from cluster.events import BenchResult, Failed, Progress, Ready
from cluster.serving.api import api_client
from lab.real_engine import VENV  # the engine's venv: vLLM's own client is in it

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

    def mean_ttft_s(self) -> float:
        return statistics.fmean(r.ttft_s for r in self.requests)

    def mean_decode_tok_s(self) -> float:
        """1 / the mean TPOT: what a histogram's sum / count gives."""
        return 1.0 / statistics.fmean(1.0 / r.decode_tok_s for r in self.requests)

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


def many_requests(before: dict[str, float], after: dict[str, float], n: int) -> Side:
    """The engine's means over the `n` requests it finished between two snapshots, as one
    request of mean figures (a histogram keeps sums, not each value)."""
    counts = {after[f"{h}_count"] - before[f"{h}_count"] for h in HISTOGRAMS.values()}
    if counts != {n}:
        raise RuntimeError(f"expected {n} requests between two /metrics reads, saw {counts}")
    mean = {k: (after[f"{h}_sum"] - before[f"{h}_sum"]) / n for k, h in HISTOGRAMS.items()}
    request = Request(mean["ttft_s"], mean["e2e_s"], round(mean["tokens"]), mean["tpot_s"])
    return Side("engine /metrics", [request])


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

    async def finished(self, at_least: float, within: float = 30.0) -> dict[str, float]:
        """/metrics once the engine has recorded `at_least` finished requests in all."""
        finished = f"{HISTOGRAMS['e2e_s']}_count"
        async with asyncio.timeout(within):
            while True:  # polled: the engine records a step just after it sends it
                now = await self.read()
                if now[finished] >= at_least:
                    return now
                await asyncio.sleep(0.05)

    async def after_a_run(self) -> None:
        """Keep the figures of the run just finished (the first call only marks where the
        next request starts)."""
        finished = f"{HISTOGRAMS['e2e_s']}_count"
        now = await self.finished(1 if self.last is None else self.last[finished] + 1)
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
        "0",  # the server is warm (our bench ran); the engine's sums then cover its n exactly
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
    bound: float | None = None  # relative; None: reported, not checked

    @property
    def error(self) -> float:
        return (self.ours - self.theirs) / self.theirs

    @property
    def ok(self) -> bool:
        return self.bound is None or abs(self.error) <= self.bound


def medians(a: Side, b: Side, requests: slice = slice(None)) -> list[Row]:
    out = []
    for f in FIGURES:
        mine = statistics.median(float(getattr(r, f.attribute)) for r in a.requests[requests])
        out.append(Row(f.label, mine * f.scale, b.median(f.attribute) * f.scale, b.name))
    return out


def means(a: Side, b: Side, bounds: dict[str, float] | None = None) -> list[Row]:
    bounds = bounds or {}
    return [
        Row(
            "mean TTFT ms",
            a.mean_ttft_s() * 1000,
            b.mean_ttft_s() * 1000,
            b.name,
            bounds.get("ttft_s"),
        ),
        Row(
            "decode tok/s (1 / mean TPOT)",
            a.mean_decode_tok_s(),
            b.mean_decode_tok_s(),
            b.name,
            bounds.get("decode_tok_s"),
        ),
    ]


def drift_removed(vllm: Side, engine_ours: Side, engine_vllm: Side) -> Side:
    """vLLM's client's means as they would have been had the engine run as fast as during our
    bench: its TTFT less the engine's change of TTFT (client and network time add to the
    engine's), its TPOT scaled by the engine's change of TPOT."""
    ttft = vllm.mean_ttft_s() - engine_vllm.mean_ttft_s() + engine_ours.mean_ttft_s()
    tpot = (
        (1 / vllm.mean_decode_tok_s())
        * (1 / engine_ours.mean_decode_tok_s())
        / (1 / engine_vllm.mean_decode_tok_s())
    )
    tokens = vllm.requests[0].tokens
    return Side(
        "vllm bench serve, the engine's drift removed",
        [Request(ttft, ttft + tpot * (tokens - 1), tokens, tpot)],
    )


@dataclass
class Comparison:
    raw: list[Row]  # ours against vLLM's client: medians, minutes apart
    same_requests: list[Row]  # ours against the engine's figures of our runs 2..N
    theirs_vs_engine: list[Row]  # vLLM's client against the engine's figures of its requests
    checked: list[Row]  # ours against vLLM's client with the engine's drift removed

    @property
    def all(self) -> list[Row]:
        return self.raw + self.same_requests + self.theirs_vs_engine + self.checked


def compare(
    ours: Side,
    server: Side,
    vllm: Side | None,
    engine_vllm: Side | None,
    bounds: dict[str, float],
) -> Comparison:
    mine = Side(ours.name, ours.requests[1:])  # the runs the engine's figures are paired with
    same = medians(mine, server) + means(
        mine, Side(server.name, server.requests), {"decode_tok_s": bounds["paired_decode_tok_s"]}
    )
    if vllm is None or engine_vllm is None:
        return Comparison([], same, [], [])
    raw = medians(ours, vllm)
    if ours.output_tok_s and vllm.output_tok_s:
        raw.append(
            Row(
                f"output tok/s, {len(ours.requests)} requests one after another",
                ours.output_tok_s,
                vllm.output_tok_s,
                vllm.name,
            )
        )
    engine_ours = Side(server.name, server.requests)
    # ours' runs 2..N: the runs the engine's figures of our side, hence the drift, are from
    checked = means(mine, drift_removed(vllm, engine_ours, engine_vllm), bounds)
    return Comparison(raw, same, means(vllm, engine_vllm), checked)


def table(result: list[Row], first: str = "spark-bot bench") -> str:
    lines = [
        f"| figure | {first} | independent | by | difference | bound | |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in result:
        bound = "-" if r.bound is None else f"±{r.bound * 100:g}%"
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
    server: Side  # the engine's figures of our runs 2..N
    vllm: Side | None
    engine_vllm: Side | None  # the engine's means over vLLM's client's requests
    report: BenchReport
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
    return await measure_running(
        controller, ready, max_tokens=max_tokens, runs=runs, with_vllm=with_vllm, prompt=prompt
    )


async def measure_running(
    controller: Controller,
    ready: Ready,
    *,
    max_tokens: int,
    runs: int,
    with_vllm: bool = True,
    prompt: str = DEFAULT_PROMPT,
) -> Measured:
    """Both ways on the server `controller` launched."""
    config, api_key = controller.config, controller.secrets.api_key
    model = config.serve.api_model_name
    server = ServerView(direct_url(config), model, api_key)
    vllm = engine_vllm = None
    try:
        report = await ours(controller, server, max_tokens=max_tokens, runs=runs, prompt=prompt)
        if with_vllm:
            before = await server.read()
            vllm, _ = await vllm_bench(
                direct_url(config),
                model,
                tokenizer_dir(config),
                max_tokens=max_tokens,
                n=runs,
                prompt=prompt,
                api_key=api_key,
            )
            finished = f"{HISTOGRAMS['e2e_s']}_count"
            after = await server.finished(before[finished] + runs)
            engine_vllm = many_requests(before, after, runs)
    finally:
        await server.aclose()
    return Measured(
        our_side(report),
        Side("engine /metrics (same requests)", server.requests),
        vllm,
        engine_vllm,
        report,
        ready,
    )
