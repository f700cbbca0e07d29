"""Cleaning real log lines so failure patterns can match the message inside them.

Real vLLM / Ray / NCCL logs wrap each message in layers: ANSI colour codes, carriage-return
progress bars, Ray actor prefixes `(RayWorkerWrapper pid=4009, ip=10.0.0.2)`, rank prefixes
`[rank1]:`, vLLM's `INFO 11-30 05:42:03 [gpu_model_runner.py:1890] `, PyTorch's C++ prefix
`[E1130 05:42:03.123456 ProcessGroupNCCL.cpp:632]` and Python logging's `ERROR:root:`.

- `clean_line` turns a raw line into what a terminal would show (the operator-facing text).
- `strip_prefixes` removes the wrappers, leaving the message that signatures match.
- `is_nccl_line` tells NCCL's own output apart (used to recognise an NCCL init hang).
- `LineSplitter` cuts a stream's chunks into lines of bounded length as they are read.

Pure functions, no I/O.
"""

from __future__ import annotations

import re

__all__ = [
    "MAX_LINE_CHARS",
    "READ_LINE_CHARS",
    "LineSplitter",
    "clean_line",
    "is_nccl_line",
    "rank_of",
    "ray_repeats",
    "strip_prefixes",
]

READ_LINE_CHARS = 16_384  # of a line without a newline, kept while reading; the rest is skipped

# A log line longer than this is cut: patterns never need more, and a pathological line
# (a dumped tensor, a base64 blob) must not cost unbounded regex time or memory.
MAX_LINE_CHARS = 8192

# CSI sequences (colours, cursor moves), OSC sequences (titles, hyperlinks), and the
# remaining two-character escapes.
_ANSI = re.compile(
    r"\x1b\[[0-?]*[ -/]*[@-~]"  # CSI: ESC [ params intermediates final
    r"|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?"  # OSC: ESC ] ... BEL | ESC \
    r"|\x1b[@-Z\\-_]"  # other 7-bit C1 escapes
    r"|\x9b[0-?]*[ -/]*[@-~]"  # 8-bit CSI
)
# Control characters other than tab (after ANSI removal and \r handling).
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")

_LEVELS = r"(?:DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL|FATAL)"

# Each prefix is anchored at the start; strip_prefixes peels them repeatedly, in any order.
_PREFIXES: tuple[re.Pattern[str], ...] = (
    # Ray / vLLM process prefixes: (RayWorkerWrapper pid=4009, ip=10.0.0.2), (EngineCore_DP0
    # pid=89), (VllmWorker rank=0 pid=12), (pid=123), (APIServer pid=1)
    re.compile(r"^\((?:[\w.:<>\-]+ )?(?:\w+=[^\s,()]+,? ?)*?pid=\d+(?:,\s*\w+=[^,()]*)*\) ?"),
    # Ray daemon prefixes: (raylet, ip=10.0.0.2), (autoscaler +1m2s), (gcs_server)
    re.compile(r"^\((?:raylet|autoscaler|gcs_server|monitor|dashboard)\b[^)]*\) ?"),
    # torch rank prefixes: [rank1]: , [Rank 0]
    re.compile(r"^\[[Rr]ank ?\d+\]:? ?"),
    # vLLM: INFO 11-30 05:42:03 [gpu_model_runner.py:1890]   (optional .micro seconds)
    re.compile(rf"^{_LEVELS} \d\d-\d\d \d\d:\d\d:\d\d(?:[.,]\d+)? \[[^\]]*\]\s?"),
    # vLLM 0.6.0-0.7.3: INFO 11-30 05:42:03 model_runner.py:926]   (no opening bracket)
    re.compile(rf"^{_LEVELS} \d\d-\d\d \d\d:\d\d:\d\d(?:[.,]\d+)? [\w.\-/]+:\d+\]\s?"),
    # PyTorch / glog C++: [E1130 05:42:03.123456 ProcessGroupNCCL.cpp:632]  (optional tid)
    re.compile(r"^\[[DIWEF]\d{4} \d\d:\d\d:\d\d(?:\.\d+)?(?: \d+)? [^\]\s]+:\d+\]\s?"),
    # Python logging default format: ERROR:root:  INFO:vllm.engine:  and uvicorn's INFO:
    re.compile(rf"^{_LEVELS}:(?:[\w.]+:|\s+)"),
    # docker build (BuildKit, --progress=plain): #17 3.506
    re.compile(r"^#\d+ \d+\.\d+ "),
    # docker logs --timestamps: 2025-11-30T05:42:03.123456789Z
    re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:?\d\d)\s"),
    # docker compose logs: the container's name padded to the widest (`%-Ns |`, then one space;
    # docker/compose@9798ea4a cmd/formatter/logs.go); compose v2 names end in -N, v1's in _N
    re.compile(r"^[\w.-]+[-_]\d+ +\| "),
)
# Docker Compose's service prefix (`docker compose up` / `logs`): the container's name padded to
# the longest name + 1, then `| ` (docker/compose cmd/formatter/logs.go, presenter.setPrefix:
# `fmt.Sprintf("%-"+strconv.Itoa(width)+"s | ", p.name)`, at 13d70b1c11). Only at the very start
# of a line: it wraps everything else, and a message may hold ` | ` itself.
_COMPOSE_PREFIX = re.compile(r"^[A-Za-z0-9][\w.-]* +\| ")
# One search for the first of them (in order) that matches: what the loop over each would find.
_ANY_PREFIX = re.compile("|".join(f"(?:{prefix.pattern})" for prefix in _PREFIXES))
# Ray's log deduplication suffix.
_RAY_REPEAT = re.compile(r"\s*\[repeated (\d+)x across cluster\]\s*$")

_NCCL = re.compile(
    r"^\S+:\d+:\d+ \[\d+\] NCCL (?:INFO|WARN|TRACE)\b"  # host:pid:tid [dev] NCCL INFO
    r"|\bNCCL (?:INFO|WARN|TRACE)\b"
    r"|\bNET/(?:IB|Socket)\b"
    r"|\bncclCommInit\w*"
    r"|\bNCCL version \d"
)


def clean_line(raw: str) -> str:
    """What a terminal would show for `raw`: no ANSI codes, no control characters, no
    trailing whitespace. A carriage return overwrites the line (progress bars), so the text
    after the last non-empty `\\r` segment is kept."""
    if raw.isprintable():  # no escape, control character or carriage return: nothing to clean
        return raw[: MAX_LINE_CHARS * 2].rstrip()[:MAX_LINE_CHARS]
    line = raw[: MAX_LINE_CHARS * 2]
    line = _ANSI.sub("", line)
    line = line.rstrip("\r\n")
    if "\r" in line:
        segments = [s for s in line.split("\r") if s.strip()]
        line = segments[-1] if segments else ""
    line = _CONTROL.sub("", line)
    return line.rstrip()[:MAX_LINE_CHARS]


def strip_prefixes(line: str) -> str:
    """The message inside `line`, without process/rank/level/time/file wrappers.

    Applies `clean_line`-safe stripping only: call `clean_line` first on raw input.
    Leading whitespace is kept apart from the prefixes (so traceback indentation survives
    when there is no prefix)."""
    msg = _RAY_REPEAT.sub("", line) if "[repeated " in line else line
    if " | " in msg:
        msg = _COMPOSE_PREFIX.sub("", msg, count=1)
    while (m := _ANY_PREFIX.match(msg)) and m.end() > 0:
        msg = msg[m.end() :]
    return msg


def ray_repeats(line: str) -> int:
    """How many more workers printed this line, by Ray's `[repeated Nx across cluster]`."""
    match = _RAY_REPEAT.search(line)
    return int(match.group(1)) if match else 0


# Who printed a line, from its prefixes: vLLM's worker names (`(Worker_TP1 pid=95)`,
# `(VllmWorker rank=5 pid=50999)`, `(Worker_PP0_TP1 pid=7)`), torch's `[rank1]:`, Ray's
# `(RayWorkerWrapper pid=95, ip=198.18.1.11)`, any `(Name pid=N)`.
_WORKER_RANK = re.compile(r"\(Worker_(?P<rank>(?:PP\d+_)?TP\d+|DP\d+\w*)\b|\brank=(?P<n>\d+)\b")
_TORCH_RANK = re.compile(r"^\[[Rr]ank ?(?P<n>\d+)\]")
_IP = re.compile(r"\bip=(?P<ip>[\w.:]+)")
_PID = re.compile(r"\bpid=(?P<pid>\d+)")


def rank_of(line: str) -> str | None:
    """Which rank (or process) printed `line`, by its prefixes: `TP1 on 198.18.1.11`, `rank 5`,
    `pid 89`; None when no prefix says. Searched only in the prefixes, never the message."""
    line = clean_line(line)
    message = strip_prefixes(line)
    prefixes = line[: len(line) - len(message)] if message and line.endswith(message) else line
    rank: str | None = None
    if m := _WORKER_RANK.search(prefixes):
        rank = m["rank"] or f"rank {m['n']}"
    elif m := _TORCH_RANK.search(prefixes.lstrip()):
        rank = f"rank {m['n']}"
    ip = _IP.search(prefixes)
    if rank is not None:
        return f"{rank} on {ip['ip']}" if ip else rank
    if ip:
        return f"{ip['ip']}"
    pid = _PID.findall(prefixes)
    return f"pid {pid[-1]}" if pid else None


def is_nccl_line(line: str) -> bool:
    """True for NCCL's own output (`host:pid:tid [0] NCCL INFO ...`, `NET/IB`, `NET/Socket`,
    `ncclCommInitRank`, ...), whatever prefixes wrap it."""
    return bool(_NCCL.search(strip_prefixes(clean_line(line))))


class LineSplitter:
    """A stream's chunks as they come -> its lines, each at most `limit` characters: a longer
    line is kept cut short and the rest of it skipped, so nothing waiting for a newline grows
    without bound."""

    def __init__(self, limit: int = READ_LINE_CHARS):
        self.limit = limit
        self._pending = ""
        self._cut = False  # the pending text is the rest of a line already given cut short

    def feed(self, chunk: str) -> list[str]:
        """The lines `chunk` completes (and a too-long one, cut), in order."""
        *complete, self._pending = (self._pending + chunk).split("\n")
        lines = []
        for line in complete:
            if self._cut:
                self._cut = False
                continue
            lines.append(line)
        if len(self._pending) > self.limit:
            if not self._cut:
                lines.append(self._pending[: self.limit])
            self._pending, self._cut = "", True
        return lines

    def end(self) -> str | None:
        """The last line, when the stream ended without its newline."""
        rest = None if self._cut or not self._pending else self._pending
        self._pending, self._cut = "", False
        return rest
