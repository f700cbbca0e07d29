"""Controller events as plain terminal text: the CLI's and the console's rendering."""

from __future__ import annotations

from cluster.events import (
    CheckpointPassed,
    Event,
    Failed,
    LogTail,
    Progress,
    Ready,
    Removed,
    StatusReport,
)


def _indent(lines: list[str], prefix: str = "    | ") -> str:
    return "\n".join(prefix + line for line in lines)


def render(event: Event, *, tail_lines: int = 10) -> str:
    stamp = f"[{event.elapsed_s:7.1f}s]"
    if isinstance(event, CheckpointPassed):
        where = f" ({event.node})" if event.node else ""
        text = f"{stamp} ✔ {event.title}{where}\n{_indent(event.evidence.splitlines(), '    ')}"
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
            parts.append("    log tail:\n" + _indent(event.log_tail[-max(tail_lines, 15):]))
        return "\n".join(parts)
    if isinstance(event, Ready):
        text = f"{stamp} READY: {event.model} at {event.api_url}"
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
            rows.append(f"    {c.node}: {c.container} {c.status}{since}")
        health = {True: "healthy", False: "NOT healthy", None: "unknown"}[event.api_healthy]
        return f"{stamp} status\n" + "\n".join(rows) + f"\n    API: {health} ({event.api_detail})"
    if isinstance(event, LogTail):
        return f"{stamp} last {len(event.lines)} lines of {event.container} on {event.node}\n" + _indent(event.lines)
    if isinstance(event, Removed):
        return f"{stamp} {'removed' if event.removed else 'nothing to remove'}: {event.detail}"
    raise TypeError(f"no rendering for {type(event).__name__}")
