"""Proof of accuracy: the bench against emulated servers whose truth is known, and against the
real engine measured independently.

    .venv/bin/python benchmarks/bench_accuracy.py [--max-tokens N] [--runs N]
    .venv/bin/python benchmarks/bench_accuracy.py --where lab-real [--backend mp|ray]
        [--max-tokens 128] [--runs 10] [--no-vllm-bench] [--json FILE]

Starts one local emulator per profile (subprocesses, TP 2 on one emulated node), measures each
with cluster.bench exactly as `spark-bot bench` does, and prints truth versus measured:
- single stream (concurrency 1): decode tok/s (1/TPOT) and TTFT within 2%;
- concurrency 1, 2, 4, 8, 32: aggregate decode tok/s (concurrency x mean 1/TPOT, the profile's
  aggregate) within 3%, and vLLM's wall-clock output tok/s (sum tokens / first send to last
  token, TTFT included) within 3% of what the profile implies for one wave of identical
  requests: c x n / (TTFT + (n - 1) x TPOT(c));
- at depth (prompts of 1k, 4k, 16k and 32k tokens, fitted with /tokenize; seed profile): TTFT,
  prefill tok/s (prompt tokens / TTFT) and decode tok/s (1/TPOT) at each within 2% of the
  profile's TTFT(p) = ttft_s + p / prefill_tok_s and decode rate at depth p;
- the client's token count equals the change in vllm:generation_tokens_total exactly.
Exit status 1 when any bound is missed.

`--where lab-real` (root; the lab's real vLLM 0.32 CPU engine, TP 2 on its 2 nodes): launches it,
runs the bench as `spark-bot bench` does, and sets its single-stream figures beside vLLM's own
`vllm bench serve` on the same server and the engine's /metrics histograms for the very
requests ours sent (benchmarks/real_accuracy.py says how); exit 1 when decode tok/s or TTFT
differ from vLLM's client by more than the bounds below, or the token counts differ at all.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.emulator_server import EmulatorServer
from benchmarks.harness import cluster_on, emit_json
from cluster.bench.history import make_fingerprint
from cluster.bench.models import BenchReport
from cluster.bench.runner import BenchOptions, run_bench
from lab.emulator.profiles import truth

LEVELS = (1, 2, 4, 8, 32)
DEPTHS = (1024, 4096, 16384, 32000)  # 32k less the output: the server's max_model_len is 32768
SINGLE_BOUND = 0.02
AGGREGATE_BOUND = 0.03
# The real engine, where nothing is known beforehand (docs/performance.md, "The bench against
# an independent measurement", has the runs these come from). Against the engine's own figures
# for the very same requests, decode tok/s differs by the delivery jitter of two chunks over a
# ~6 s decode (measured -0.1 to +0.1 %; the empty-delta bug made it +0.8 to +1.3 %). Against
# vLLM's client, whose requests run minutes later on two shared cores (per-request spread 8-35 %
# at load 7-17), the engine's change of speed between the two runs is removed with the
# engine's own figures for each run's requests: decode then agrees within 0.2-0.4 %, so 2 % is
# generous; TTFT is the engine's plus each client's own path (ours: the SSH forward and the
# chat template's rendering, as for vLLM's), about 10-25 ms over 80-120 ms, and its mean over
# 10 requests moves by ~10 % run to run: 25 % is 2.5 of those.
REAL_BOUNDS = {"paired_decode_tok_s": 0.005, "decode_tok_s": 0.02, "ttft_s": 0.25}


@dataclass(frozen=True)
class Case:
    label: str
    profile: str
    reasoning_parser: str | None
    max_tokens: int
    depth: tuple[int, ...] = ()


CASES = [
    Case("seed", "spark-pair-qwen35", None, 64, DEPTHS),
    Case("multi-token", "multi-token-chunks", None, 64),
    Case("reasoning", "spark-pair-public", "qwen3", 96),  # 96 tokens: reasoning, then the answer
]


@dataclass
class Row:
    case: str
    what: str
    truth: float
    measured: float | None
    bound: float

    @property
    def error(self) -> float | None:
        return None if self.measured is None else (self.measured - self.truth) / self.truth

    @property
    def ok(self) -> bool:
        return self.error is not None and abs(self.error) <= self.bound


async def measure(
    case: Case, server: EmulatorServer, runs: int, max_tokens: int | None
) -> BenchReport:
    options = BenchOptions(
        max_tokens=max_tokens or case.max_tokens, runs=runs, concurrency=LEVELS, depth=case.depth
    )
    report = None
    async for event in run_bench(
        server.base_url,
        server.served_name,
        options,
        make_fingerprint(server.served_name, {"profile": case.profile}),
    ):
        if event.kind == "bench":
            report = event.report
        elif event.kind == "failed":
            raise RuntimeError(f"{case.label}: {event.summary}")
    assert report is not None
    return report


def rows_for(case: Case, report: BenchReport) -> list[Row]:
    n = report.settings.max_tokens
    single = report.single
    assert single is not None
    # TTFT grows with the prompt: the truth for this prompt's own length
    t1 = truth(case.profile, 1, single.runs[0].prompt_tokens or 0)
    rows = [
        Row(
            case.label, "decode tok/s @1", t1["per_stream_tok_s"], single.decode_tok_s, SINGLE_BOUND
        ),
        Row(case.label, "TTFT s @1", t1["ttft_s"], single.ttft_s, SINGLE_BOUND),
    ]
    for level in report.sweep:
        t = truth(case.profile, level.concurrency, single.runs[0].prompt_tokens or 0)
        wall = t["ttft_s"] + (n - 1) * t["tpot_s"]
        rows.append(
            Row(
                case.label,
                f"aggregate decode tok/s @{level.concurrency}",
                t["aggregate_tok_s"],
                level.aggregate_decode_tok_s,
                AGGREGATE_BOUND,
            )
        )
        rows.append(
            Row(
                case.label,
                f"output tok/s (incl. TTFT) @{level.concurrency}",
                level.concurrency * n / wall,
                level.output_tok_s,
                AGGREGATE_BOUND,
            )
        )
    for depth in report.depth:
        t = truth(case.profile, 1, depth.prompt_tokens or depth.depth)
        label = f"@{depth.prompt_tokens} prompt tokens"
        rows += [
            Row(case.label, f"TTFT s {label}", t["ttft_s"], depth.ttft_s, SINGLE_BOUND),
            Row(
                case.label,
                f"prefill tok/s {label}",
                t["prefill_tok_s"],
                depth.prefill_tok_s,
                SINGLE_BOUND,
            ),
            Row(
                case.label,
                f"decode tok/s {label}",
                t["per_stream_tok_s"],
                depth.decode_tok_s,
                SINGLE_BOUND,
            ),
        ]
    return rows


def table(rows: list[Row]) -> str:
    out = [
        "| profile | figure | truth | measured | error | bound | |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        measured = "-" if r.measured is None else f"{r.measured:.3f}"
        error = "-" if r.error is None else f"{r.error * 100:+.2f}%"
        out.append(
            f"| {r.case} | {r.what} | {r.truth:.3f} | {measured} | {error} | "
            f"±{r.bound * 100:.0f}% | {'ok' if r.ok else 'MISSED'} |"
        )
    return "\n".join(out)


async def main_async(args: argparse.Namespace) -> int:
    with ExitStack() as stack:  # every server is started before any is measured, and always killed
        servers = [
            stack.enter_context(EmulatorServer(c.profile, reasoning_parser=c.reasoning_parser))
            for c in CASES
        ]
        reports = await asyncio.gather(
            *(
                measure(c, s, args.runs, args.max_tokens)
                for c, s in zip(CASES, servers, strict=True)
            )
        )
    results = list(zip(CASES, reports, strict=True))
    rows: list[Row] = []
    failures: list[str] = []
    for case, report in results:
        rows += rows_for(case, report)
        check = report.metrics_check
        single = report.single
        assert single is not None
        split = f"reasoning {single.reasoning_tokens} + answer {single.answer_tokens}"
        print(
            f"{case.label} ({case.profile}{', --reasoning-parser ' + case.reasoning_parser if case.reasoning_parser else ''}): "
            f"{single.completion_tokens} tokens per request ({split}), "
            f"cross-check: {check.detail}; client: loop lag p99 {report.client.loop_lag_p99_ms:.1f} ms "
            f"(max {report.client.loop_lag_max_ms:.1f}), "
            f"parsing {report.client.parse_share * 100:.2f}% of {report.duration_s:.0f} s"
        )
        if not check.matches:
            failures.append(f"{case.label}: token cross-check: {check.detail}")
        if case.reasoning_parser and not (single.reasoning_tokens and single.answer_tokens):
            failures.append(f"{case.label}: expected both reasoning and answer tokens, got {split}")
        if single.tokens_approximate:
            failures.append(f"{case.label}: token counts approximate (no usage)")
    print()
    print(table(rows))
    failures += [
        f"{r.case}: {r.what}: truth {r.truth:.3f}, measured {r.measured}" for r in rows if not r.ok
    ]
    if failures:
        print("\nMISSED:\n  " + "\n  ".join(failures), file=sys.stderr)
        return 1
    print(f"\nall {len(rows)} figures within bounds; token cross-checks exact")
    return 0


async def real_async(args: argparse.Namespace) -> int:
    from benchmarks import real_accuracy as real
    from cluster.config import Secrets

    max_tokens, runs = args.max_tokens or 128, args.runs or 10
    if runs < 2:
        raise SystemExit("--runs must be at least 2 on the real engine (run 1 follows the warm-up)")
    load_before = os.getloadavg()
    async with cluster_on("lab-real", 2, backend=args.backend) as config:
        measured = await real.measure(
            config,
            Secrets({}),
            max_tokens=max_tokens,
            runs=runs,
            with_vllm=not args.no_vllm_bench,
        )
    load_after = os.getloadavg()
    ours, server, vllm, engine_vllm = (
        measured.ours,
        measured.server,
        measured.vllm,
        measured.engine_vllm,
    )
    comparison = real.compare(ours, server, vllm, engine_vllm, REAL_BOUNDS)
    check, single = measured.report.metrics_check, measured.report.single
    assert single is not None
    load = f"{load_before[0]:.1f} before, {load_after[0]:.1f} after (1-minute load average)"
    print(
        f"real engine ({args.backend}, vLLM {measured.ready.vllm_version}), {runs} requests a "
        f"side of {max_tokens} tokens (ignore_eos), prompt {single.runs[0].prompt_tokens} tokens, "
        f"concurrency 1; load {load}"
    )
    print(f"token cross-check: {check.detail}")
    print(real.noise([s for s in (ours, server, vllm) if s is not None]))
    sections = [
        (
            "ours against the engine's own figures for the same requests (runs 2..N)",
            comparison.same_requests,
            "spark-bot bench",
        ),
        (
            "ours against vLLM's client, run right after (medians)",
            comparison.raw,
            "spark-bot bench",
        ),
        (
            "vLLM's client against the engine's own figures for its requests (means)",
            comparison.theirs_vs_engine,
            "vllm bench serve",
        ),
        (
            "checked: ours against vLLM's client with the engine's change of speed between the "
            "two runs removed (means)",
            comparison.checked,
            "spark-bot bench",
        ),
    ]
    for title, rows, first in sections:
        if rows:
            print(f"\n{title}:\n")
            print(real.table(rows, first))
    rows = comparison.all
    failures = [
        f"{r.figure} against {r.against}: ours {r.ours:.3f}, theirs {r.theirs:.3f}"
        for r in rows
        if not r.ok
    ]
    sides = [s for s in (ours, server, vllm, engine_vllm) if s is not None]
    counts = {r.tokens for side in sides for r in side.requests}
    if counts != {max_tokens}:
        failures.append(f"tokens per request {sorted(counts)}, expected {max_tokens} everywhere")
    if not check.matches:
        failures.append(f"token cross-check: {check.detail}")
    emit_json(
        args.json,
        "bench_accuracy_real",
        {
            "backend": args.backend,
            "max_tokens": max_tokens,
            "runs": runs,
            "load": [load_before[0], load_after[0]],
            "rows": [
                {
                    "figure": r.figure,
                    "ours": r.ours,
                    "theirs": r.theirs,
                    "by": r.against,
                    "bound": r.bound,
                }
                for r in rows
            ],
            "noise": {
                s.name: {f.attribute: s.spread(f.attribute) for f in real.FIGURES}
                for s in (ours, server, vllm)
                if s is not None
            },
            "ok": not failures,
        },
    )
    if failures:
        print("\nMISSED:\n  " + "\n  ".join(failures), file=sys.stderr)
        return 1
    print("\nwithin bounds; every request made exactly max_tokens tokens on every side")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--where", choices=("emulator", "lab-real"), default="emulator", help="what to measure"
    )
    parser.add_argument(
        "--max-tokens",
        type=int,
        default=None,
        help="override each profile's max_tokens (lab-real: default 128)",
    )
    parser.add_argument(
        "--runs",
        type=int,
        default=None,
        help="measured single-stream runs (default 3; lab-real 10)",
    )
    parser.add_argument("--backend", choices=("mp", "ray"), default="mp", help="lab-real only")
    parser.add_argument(
        "--no-vllm-bench",
        action="store_true",
        help="lab-real: only the engine's /metrics, not vLLM's client (its start takes ~30 s)",
    )
    parser.add_argument("--json", type=Path, default=None, help="append the figures here")
    args = parser.parse_args(argv)
    if args.where == "lab-real":
        return asyncio.run(real_async(args))
    args.runs = args.runs or 3
    return asyncio.run(main_async(args))


if __name__ == "__main__":
    sys.exit(main())
