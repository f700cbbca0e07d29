"""Controller events as plain terminal text: the CLI's and the console's rendering."""

from __future__ import annotations

from cluster.bench.models import BenchReport
from cluster.events import (
    BenchResult,
    CheckpointPassed,
    DiagnosticsCollected,
    Event,
    FabricTestResult,
    Failed,
    LogTail,
    Progress,
    Ready,
    RecipesReport,
    Removed,
    StatusReport,
)
from cluster.operations.fabric_report import FabricTestReport, lane_line


def _indent(lines: list[str], prefix: str = "    | ") -> str:
    return "\n".join(prefix + line for line in lines)


def render(event: Event, *, tail_lines: int = 10) -> str:
    stamp = f"[{event.elapsed_s:7.1f}s]"
    if isinstance(event, CheckpointPassed):
        where = f" ({event.node})" if event.node else ""
        mark = "✔" if event.not_checked is None else "➖"
        text = f"{stamp} {mark} {event.title}{where}" + (
            f": not checked: {event.not_checked}" if event.not_checked else ""
        )
        text += f"\n{_indent(event.evidence.splitlines(), '    ')}"
        if event.warning:
            text += f"\n    ⚠ {event.warning}"
        if event.log_tail and tail_lines:
            text += "\n" + _indent(event.log_tail[-tail_lines:])
        return text
    if isinstance(event, Progress):
        return f"{stamp} … {event.message}"
    if isinstance(event, Failed):
        where = f" on {event.node}" if event.node else ""
        parts = [
            f"{stamp} ✘ {event.title}{where} FAILED",
            f"    what:     {event.summary}",
            f"    evidence: {event.evidence}",
            f"    cause:    {event.cause}",
            f"    fix:      {event.fix}",
        ]
        if event.log_tail:
            parts.append("    log tail:\n" + _indent(event.log_tail[-max(tail_lines, 15) :]))
        return "\n".join(parts)
    if isinstance(event, Ready):
        text = f"{stamp} READY: {event.model} at {event.api_url}" + (
            f" (vLLM {event.vllm_version})" if event.vllm_version else ""
        )
        if event.recipe:
            text += f"\n    recipe: {event.recipe}"
        if event.memory:
            text += f"\n    memory: {event.memory}"
        text += "".join(f"\n    ➖ not verified: {why}" for why in event.not_verified)
        if event.sample:
            s = event.sample
            rate = f"{s.decode_tps:.1f} tok/s" if s.decode_tps else "n/a"
            text += (
                f"\n    sample: {s.completion_tokens} tokens, TTFT {s.ttft_s * 1000:.0f} ms, "
                f"decode {rate}, finish {s.finish_reason}"
                f"\n    answer: {(s.text or '(budget spent in reasoning) ' + s.reasoning[-200:]).strip()[:400]}"
            )
        return text
    if isinstance(event, StatusReport):
        rows = []
        for c in event.containers:
            since = f" since {c.started_at:%Y-%m-%d %H:%M:%S}" if c.started_at and c.running else ""
            recipe = f" (recipe {c.recipe})" if c.recipe else ""
            if c.recipe_unknown:
                recipe = f" (recipe unknown: {c.recipe_unknown})"
            rows.append(f"    {c.node}: {c.container} {c.status}{since}{recipe}")
        health = {True: "healthy", False: "NOT healthy", None: "unknown"}[event.api_healthy]
        version = f", vLLM {event.vllm_version}" if event.vllm_version else ""
        return (
            f"{stamp} status\n"
            + "\n".join(rows)
            + f"\n    API: {health} ({event.api_detail}{version})"
            + "".join(f"\n    memory {m.node}: {m.describe()}" for m in event.memory)
        )
    if isinstance(event, RecipesReport):
        return render_recipes(event)
    if isinstance(event, LogTail):
        return (
            f"{stamp} last {len(event.lines)} lines of {event.container} on {event.node}\n"
            + _indent(event.lines)
        )
    if isinstance(event, Removed):
        said = "removed" if event.removed else "FAILED" if event.failed else "nothing to remove"
        return f"{stamp} {said}: {event.detail}"
    if isinstance(event, BenchResult):
        return f"{stamp} benchmark done\n" + render_bench(event.report)
    if isinstance(event, FabricTestResult):
        return f"{stamp} fabric test done\n" + render_fabric_test(event.report)
    if isinstance(event, DiagnosticsCollected):
        return (
            f"{stamp} diagnostics bundle written: {event.path} ({event.size} bytes, "
            f"{len(event.files)} files)\n" + _indent(event.summary.splitlines())
        )
    raise TypeError(f"no rendering for {type(event).__name__}")


def _num(value: float | None, fmt: str = ".1f", scale: float = 1.0) -> str:
    return "-" if value is None else format(value * scale, fmt)


def render_fabric_test(report: FabricTestReport) -> str:
    """Each pair's figure against the nominal speed, its lanes, warnings; then the comparison."""
    lines = []
    for pair in report.pairs:
        lines.append(f"    {report.line(pair)}")
        lines += [f"      {lane_line(lane)}" for lane in pair.lanes]
        lines += [f"      ⚠ {warning}" for warning in pair.warnings]
    for comparison in report.comparisons:
        lines.append(f"    vs previous: {comparison.metric}: {comparison.describe()}")
    if not report.comparisons:
        lines.append("    vs previous: no earlier run of these nodes")
    return "\n".join(lines)


def render_bench(report: BenchReport) -> str:
    """A compact table: single stream, the sweep, the comparison, the cross-check, warnings."""
    fp = report.fingerprint
    image = (fp.image_id or "")[:19] or fp.image or "?"
    version = f", vLLM {fp.vllm_version}" if fp.vllm_version else ""
    lines = [
        f"    {report.model} at {report.base_url} (setup {report.setup_key}, image {image}{version}"
        + (f", recipe {fp.serve['recipe']}" if fp.serve.get("recipe") else "")
        + ")",
        f"    {report.settings.max_tokens} max tokens, prompt {report.settings.prompt[:60]!r}",
    ]
    if report.sample:
        sample = report.sample
        if sample.budget_spent_in_reasoning:
            lines.append(
                f"    answer: (token budget spent in reasoning) …{sample.reasoning[-200:].strip()}"
            )
        else:
            lines.append(f"    answer: {(sample.text or sample.reasoning).strip()[:300]}")
    s = report.single
    if s:
        approx = " (approximate: no usage, /tokenize)" if s.tokens_approximate else ""
        split = ""
        if s.reasoning_tokens:
            split = f" = {s.reasoning_tokens} reasoning + {s.answer_tokens} answer"
        lines += [
            f"    single stream, median of {len(s.runs)} after a warm-up:",
            f"      decode {_num(s.decode_tok_s)} tok/s (1/TPOT, {_num(s.tpot_s, '.1f', 1000)} ms)  "
            f"TTFT {_num(s.ttft_s, '.0f', 1000)} ms  e2e {_num(s.e2e_tok_s)} tok/s (incl. TTFT)",
            f"      {s.completion_tokens} tokens{split}{approx}, finish {s.runs[-1].finish_reason if s.runs else '-'}",
        ]
    if report.sweep:
        lines.append("      conc  output tok/s  decode agg  per-stream  TTFT p50/p90/p99 ms   ok")
        for level in report.sweep:
            ttft = "/".join(
                _num(v, ".0f", 1000) for v in (level.ttft_p50_s, level.ttft_p90_s, level.ttft_p99_s)
            )
            lines.append(
                f"    {level.concurrency:6d}  {level.output_tok_s:12.1f}  {_num(level.aggregate_decode_tok_s):>10}"
                f"  {_num(level.per_stream_decode_tok_s):>10}  {ttft:>19}  {level.ok}/{level.requests}"
            )
        lines.append(
            "      (output = tokens / wall time incl. TTFT; decode agg = concurrency x 1/TPOT)"
        )
    if report.depth:
        lines.append("     depth  prompt tok  TTFT ms  prefill tok/s  decode tok/s   ok")
        for d in report.depth:
            lines.append(
                f"    {d.depth:6d}  {_num(d.prompt_tokens, '.0f'):>10}"
                f"  {_num(d.ttft_s, '.0f', 1000):>7}  {_num(d.prefill_tok_s):>13}"
                f"  {_num(d.decode_tok_s):>12}  {d.ok}/{d.requests}"
                + (f"  {d.errors[0]}" if d.errors else "")
            )
        lines.append(
            "      (prefill = prompt tokens / TTFT; decode = 1/TPOT at that depth; medians)"
        )
    for comparison in report.comparisons:
        lines.append(f"    vs previous: {comparison.metric}: {comparison.describe()}")
    if not report.comparisons:
        lines.append("    vs previous: no earlier run of this setup")
    lines.append(
        f"    cross-check: {report.metrics_check.detail or 'not available'}"
        + ("" if report.metrics_check.matches is not False else "  MISMATCH")
    )
    c = report.client
    lines.append(
        f"    client: event-loop lag p99 {c.loop_lag_p99_ms:.1f} ms, parsing {c.parse_share * 100:.2f}% "
        f"of {report.duration_s:.1f} s, {c.max_connections} connections"
    )
    lines += [f"    ⚠ {w}" for w in report.warnings]
    return "\n".join(lines)


def render_recipes(report: RecipesReport) -> str:
    """One block a recipe: model, nodes, parallelism, what it needs, which one runs."""
    if not report.recipes:
        return "no recipes: add `recipes:` to the config, or files to a recipes/ folder beside it"
    blocks = []
    for r in report.recipes:
        marks = "  [running]" if r.running else ""
        marks += "  [default]" if r.default else ""
        served = f" as {r.served_model_name}" if r.served_model_name else ""
        blocks.append(
            f"{r.name}{marks}\n"
            + (f"    {r.description}\n" if r.description else "")
            + f"    model: {r.model}{served}, image {r.image}\n"
            f"    nodes: {', '.join(r.nodes)} (TP {r.tensor_parallel_size} x PP "
            f"{r.pipeline_parallel_size}, backend {r.backend})\n"
            f"    needs: {r.needs}" + "".join(f"\n    source: {source}" for source in r.sources)
        )
    footer = [f"running: {report.running or 'none'}"] + ([report.detail] if report.detail else [])
    return "\n".join(blocks + footer)
