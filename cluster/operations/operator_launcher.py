"""The operator's own launch script, supervised on the head.

It runs in a session of its own, detached from the bot's SSH connection (it outlives the bot's
session as its containers do, and a `down` stops it later), with its output in a file on the
head that the bot follows (`tail -F`; the file is rotated at a bound, so it never grows without
one), its exit status written beside it, and its process
group's id recorded so that a cancel or a `down` stops the script and everything it started
that is still in its group (an `ssh worker ...`, a `sleep`, a foreground `docker exec`).

Each run has a folder of its own (output, status, pgid and the recipe it launched): a run that
outlived the spark-bot that started it (`kill -9` of the CLI) ends in its own folder, never
in the next run's; a new run removes only the folders of runs whose wrapper is gone and that
no follower still reads.
"""

from __future__ import annotations

import asyncio
import posixpath
import shlex
from collections import deque
from collections.abc import Callable
from contextlib import aclosing
from dataclasses import dataclass
from secrets import token_hex

from cluster.config import ClusterConfig, LauncherConfig, Secrets
from cluster.errors import FileUnreadable, NodeError
from cluster.logs.logtext import LineSplitter, clean_line
from cluster.nodes import NodeConnection
from cluster.serving.containers import expand_home

# Per cluster, under the SSH user's home on the head: a folder per run, named by when it started
# (the head's clock) and the wrapper's pid, holding `output`, `status`, `pgid` and `recipe`.
RUN_FOLDER = ".cache/spark-bot/launcher"

# The program the script runs under: fixed text; the cluster's folder, the folder to run in, the
# end mark, the output file's size bound, the recipe and the script's argv are its positional
# parameters, never part of the program. It first removes the folders of earlier runs whose
# wrapper is gone (no pgid, or no such process) and whose follower is gone (none recorded, or
# no such process: see FOLLOWER), makes its own, and prints its own pid (the id
# of the new session's process group) and that folder before
# it lets go of the connection, and ends the output with the mark and the script's exit status:
# the follower knows the end at once (waiting for the wrapper's pid to vanish waits for it to be
# reaped, which a lazy init does seconds later). The output passes through `head -c` (which
# reads no byte past its count; unbuffered, it writes what it reads at once), `cap` bytes a
# file: a full `output` is renamed `output.1` (the one before is dropped) and the next `cap`
# bytes go to a new `output`, so a script that runs for weeks keeps at most two files' worth on
# the head; `tail -F` reads the old file to its end, then the new one from its start.
# Should the writer fail (a full disk), `cat` drains the pipe: the script never meets SIGPIPE.
WRAPPER = (
    'base=$1 cwd=$2 mark=$3 cap=$4 recipe=$5; shift 5; mkdir -p "$base" || exit 125; '
    'for d in "$base"/*/; do [ -d "$d" ] || continue; p=$(cat "$d/pgid" 2>/dev/null); '
    '{ [ -n "$p" ] && kill -0 "$p" 2>/dev/null; } && continue; '
    'for f in "$d"follower.*; do [ -e "$f" ] && kill -0 "${f##*.}" 2>/dev/null && continue 2; '
    'done; rm -rf "$d"; done; '
    'run="$base/$(date +%s)-$$"; mkdir "$run" && : >"$run/output" || exit 125; '
    'echo "$recipe" >"$run/recipe"; echo $$ >"$run/pgid"; echo "$$ $run"; '
    "exec >/dev/null 2>&1 </dev/null; "
    '{ if cd "$cwd"; then "$@"; status=$?; else status=126; fi; '
    'echo $status >"$run/status"; rm -f "$run/pgid"; echo "$mark $status"; } 2>&1 | '
    '{ while stdbuf -o0 head -c "$cap" >>"$run/output" && '
    '[ "$(wc -c <"$run/output")" -ge "$cap" ]; do '
    'mv -f "$run/output" "$run/output.1"; done; cat >/dev/null; }'
)
# The follower: `tail -F`, whose words on a rotation ("has been replaced; following new file")
# would land in the middle of the output over SSH's terminal (one stream), so they are dropped.
# It first records its pid in the run's folder ($1; `exec` keeps the pid): a new run prunes no
# run whose follower still reads it (its end may be written and not read yet).
FOLLOWER = 'run=$1; shift; : >"$run/follower.$$" || exit 125; exec tail "$@" 2>/dev/null'
STOP_POLL_FIRST_S = 0.05
STOP_POLL_MAX_S = 1.0
# The runs of a cluster, one a line: its folder's name, its pgid and its recipe (either empty).
RUNS = (
    'cd "$1" 2>/dev/null || exit 0; for d in */; do [ -d "$d" ] || continue; d=${d%/}; '
    'printf "%s %s %s\\n" "$d" "$(cat "$d/pgid" 2>/dev/null)" "$(cat "$d/recipe" 2>/dev/null)"; done'
)


def run_folder(config: ClusterConfig, home: str) -> str:
    """The cluster's folder on the head, where each run has its own."""
    return f"{home.rstrip('/')}/{RUN_FOLDER}/{config.name}"


@dataclass(frozen=True)
class LauncherRun:
    """A run of a launcher recorded on the head; `pgid` None once its wrapper has ended."""

    folder: str
    started: int  # the head's clock, seconds
    pgid: int | None
    recipe: str | None


async def launcher_runs(
    config: ClusterConfig, head: NodeConnection, home: str
) -> list[LauncherRun]:
    """The runs recorded on the head for this cluster, the newest first."""
    base = run_folder(config, home)
    listing = await head.run(["sh", "-c", RUNS, "sh", base], timeout=config.timeouts.launcher)
    if not listing.ok:
        raise NodeError(
            head.name,
            f"the launcher's runs could not be listed (exit {listing.exit_status}): "
            f"{listing.stderr.strip()[:200]}",
            f"check that the SSH user may read {base}",
        )
    runs = []
    for line in listing.stdout.splitlines():
        name, _, rest = line.partition(" ")
        pgid, _, recipe = rest.partition(" ")
        started = name.partition("-")[0]
        if not started.isdigit():
            continue  # not a run's folder
        runs.append(
            LauncherRun(
                f"{base}/{name}",
                int(started),
                int(pgid) if pgid.isdigit() else None,
                recipe.strip() or None,
            )
        )
    return sorted(runs, key=lambda run: run.started, reverse=True)


async def launched_recipe(
    config: ClusterConfig, head: NodeConnection, home: str, container: str
) -> str | None:
    """The recipe whose launcher started `container`: the one recipe naming it, else the recipe
    the newest run on the head recorded among those naming it (None: no such run recorded; no
    recipe is claimed that was not launched)."""
    named = config.launcher_containers.get(container, [])
    if len(named) <= 1:
        return named[0] if named else None
    for run in await launcher_runs(config, head, home):
        if run.recipe in named:
            return run.recipe
    return None


class Launcher:
    """One run of the script: start it, follow its output to its end, stop its process group."""

    def __init__(
        self,
        config: ClusterConfig,
        secrets: Secrets,
        head: NodeConnection,
        home: str,
        *,
        on_line: Callable[[str], None] = lambda line: None,
    ):
        assert config.launcher is not None
        self.settings: LauncherConfig = config.launcher
        self.timeout = config.timeouts.launcher
        self.grace_s = config.timeouts.down / 2
        self.secrets = secrets
        self.head = head
        self.home = home
        self.recipe = config.recipe or ""
        self.run = run_folder(config, home)  # this run's own folder, once started
        self.cwd = expand_home(self.settings.cwd or "~", home)
        self.pgid: int | None = None
        self.lines: deque[str] = deque(maxlen=self.settings.output_lines)
        self.total_lines = 0
        self._on_line = on_line
        self._mark = f"spark-bot-launcher-end-{token_hex(8)}"
        self._status: int | None = None
        self.stopped_by_us = False  # its end is then ours, never its own failure

    @property
    def command_text(self) -> str:
        return shlex.join(self.settings.command)

    def tail(self, lines: int) -> list[str]:
        return list(self.lines)[-lines:]

    def lines_after(self, total: int) -> list[str]:
        """The lines after the first `total` of its output, those still kept."""
        new = min(self.total_lines - total, len(self.lines))
        return list(self.lines)[len(self.lines) - new :] if new > 0 else []

    async def start(self) -> int:
        """Start the script in its own session; its process group's id."""
        cap = str(self.settings.output_file_bytes)
        argv = [
            *("setsid", "-f", "sh", "-c", WRAPPER, "sh"),
            *(self.run, self.cwd, self._mark, cap, self.recipe),
        ]
        result = await self.head.run([*argv, *self.settings.command], timeout=self.timeout)
        printed = result.stdout.strip()
        pgid, _, folder = printed.partition(" ")
        if not result.ok or not pgid.isdigit() or not folder.startswith(f"{self.run}/"):
            raise NodeError(
                self.head.name,
                f"the launcher could not be started (exit {result.exit_status}: "
                f"{self.secrets.redact((result.stderr or printed).strip()[:300])})",
                "check that `setsid`, `sh` and `tail` exist on the head and that the SSH user "
                f"may write {self.run}",
            )
        self.pgid, self.run = int(pgid), folder
        return self.pgid

    async def follow(self) -> int | None:
        """Read the script's output as it is written, until the script ends; its exit status
        (None: it was killed before it could say)."""
        assert self.pgid is not None
        follow = [
            "sh",
            "-c",
            FOLLOWER,
            "sh",
            self.run,
            "-n",
            "+1",
            "-s",
            "0.2",
            f"--pid={self.pgid}",
            "-F",
            f"{self.run}/output",
        ]
        lines = LineSplitter()
        async with aclosing(self.head.stream(follow, timeout=self.timeout)) as chunks:
            async for chunk in chunks:
                for line in lines.feed(chunk):
                    if self._ends(line):
                        return self._status
                    self._keep(line)
        last = lines.end()
        if last is not None and not self._ends(last):
            self._keep(last)
        return self._status if self._status is not None else await self._exit_status()

    def _ends(self, line: str) -> bool:
        """Whether `line` holds the wrapper's end mark (after the script's last words when they
        ended without a newline): the exit status is taken from it."""
        at = line.find(self._mark)
        if at < 0:
            return False
        if line[:at]:
            self._keep(line[:at])
        status = line[at + len(self._mark) :].strip()
        self._status = int(status) if status.lstrip("-").isdigit() else None
        return True

    def _keep(self, raw: str) -> None:
        line = self.secrets.redact(clean_line(raw.removesuffix("\r")))
        self.lines.append(line)
        self.total_lines += 1
        self._on_line(line)

    async def _exit_status(self) -> int | None:
        try:
            text = await self.head.read_file(f"{self.run}/status", timeout=self.timeout)
        except FileUnreadable:
            return None
        return int(text.strip()) if text.strip().lstrip("-").isdigit() else None

    async def stop(self) -> str:
        """Stop the script's process group (SIGTERM, SIGKILL after the grace); what was done."""
        if self.pgid is None:
            return "the launcher was not started"
        self.stopped_by_us = True
        done = await stop_group(self.head, self.run, self.pgid, self.timeout, self.grace_s)
        return done or f"the launcher's process group {self.pgid} had already ended"


async def launcher_output_tail(
    config: ClusterConfig, secrets: Secrets, head: NodeConnection, home: str, lines: int
) -> list[str]:
    """The newest run's last `lines` lines of output, under a line naming its file ([]: no run
    recorded)."""
    runs = await launcher_runs(config, head, home)
    if not runs:
        return []
    output = f"{runs[0].folder}/output"
    tail = await head.run(["tail", "-n", str(lines), output], timeout=config.timeouts.launcher)
    if not tail.ok:
        return []
    said = [secrets.redact(clean_line(line)) for line in tail.stdout.splitlines()]
    return [f"(the container's own log is empty; the launcher's output, {output}:)", *said]


async def stop_launcher(config: ClusterConfig, head: NodeConnection, home: str) -> str | None:
    """Stop every launcher of this cluster still running on the head (`down`); what was done,
    or None when none runs."""
    timeout, grace_s = config.timeouts.launcher, config.timeouts.down / 2
    runs = [run for run in await launcher_runs(config, head, home) if run.pgid is not None]
    done = [
        stopped
        for run in runs
        if run.pgid is not None
        and (stopped := await stop_group(head, run.folder, run.pgid, timeout, grace_s))
    ]
    return "; ".join(done) or None


async def stop_group(
    node: NodeConnection, run: str, pgid: int, timeout: float, grace_s: float
) -> str | None:
    """SIGTERM to process group `pgid` if its leader is still a wrapper of `run`'s cluster (a
    recorded id the system gave to another process since is left alone), SIGKILL to what is left after
    `grace_s`; what was done, None when it had already ended."""
    if not await _is_ours(node, run, pgid, timeout):
        return None
    await node.run(["kill", "-TERM", "--", f"-{pgid}"], timeout=timeout)
    how = "SIGTERM"
    if not await _ended(node, pgid, timeout, grace_s):
        await node.run(["kill", "-KILL", "--", f"-{pgid}"], timeout=timeout)
        how = f"SIGTERM, then SIGKILL after {grace_s:g} s"
        if not await _ended(node, pgid, timeout, grace_s):
            raise NodeError(
                node.name,
                f"the launcher's process group {pgid} outlived SIGKILL",
                f"look for it with `ps -o pid,stat,args -g {pgid}` on {node.name}",
            )
    await node.run(["rm", "-f", f"{run}/pgid"], timeout=timeout)
    return f"stopped the launcher's process group {pgid} on {node.name} ({how})"


async def _is_ours(node: NodeConnection, run: str, pgid: int, timeout: float) -> bool:
    try:
        cmdline = await node.read_file(f"/proc/{pgid}/cmdline", timeout=timeout)
    except FileUnreadable:
        return False
    return posixpath.dirname(run) in cmdline.split("\x00")


async def _ended(node: NodeConnection, pgid: int, timeout: float, within_s: float) -> bool:
    """Whether no live process of group `pgid` is left (a zombie waiting for init to reap it
    is dead), asked until `within_s` has passed."""
    delay = STOP_POLL_FIRST_S
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within_s
    while True:
        listing = await node.run(["ps", "-A", "-o", "pgid=,stat="], timeout=timeout)
        if not listing.ok:
            raise NodeError(
                node.name,
                f"`ps` failed (exit {listing.exit_status}): {listing.stderr.strip()[:200]}",
                f"check that procps is installed on {node.name}",
            )
        if not live_in_group(listing.stdout, pgid):
            return True
        if loop.time() + delay > deadline:
            return False
        await asyncio.sleep(delay)
        delay = min(delay * 2, STOP_POLL_MAX_S)


def live_in_group(ps_output: str, pgid: int) -> bool:
    """Whether `ps -A -o pgid=,stat=` lists a process of group `pgid` that is not a zombie."""
    for line in ps_output.splitlines():
        group, _, state = line.strip().partition(" ")
        if group == str(pgid) and not state.strip().startswith("Z"):
            return True
    return False
