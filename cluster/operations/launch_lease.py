"""Who is launching a cluster right now: a lease on its head node, seen by every way in.

The store's cluster lock is shared only by the bots and consoles that use the same database;
a CLI on another host, or a console with its own store, never sees it. Every launch reaches the
head, so the lease lives there (`~/.cache/spark-bot/<cluster>/launch.lease`): `up` takes it
before anything of the cluster changes, renews it while it runs, and gives it back at its end.
A live lease held by another launch refuses `up` (with `--replace` too: its containers are no
leftovers) unless told explicitly to take over someone else's live launch. An instance that
crashed renews nothing: its lease is stale after STALE_S by the head's own clock (the holder's
clock and the reader's never have to agree), and the next `up` takes it; at once when that
instance ran on this same host and its process is gone.

The commands are fixed scripts; what varies (the folder, the holder's line) reaches them as
positional parameters, never as shell code. The lease's one line is JSON.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import socket
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime

from cluster.errors import NodeError
from cluster.nodes import NodeConnection
from cluster.nodes.base import CommandResult

log = logging.getLogger(__name__)

FOLDER = ".cache/spark-bot"
RENEW_S = 10.0  # a live launch touches its lease this often
STALE_S = 30.0  # a lease not touched for this long (by the head's clock) belongs to nobody
HELD = 3  # the take script's exit status when another live launch holds the lease

# $1 the cluster's folder, $2 our line, $3 seconds after which a lease is stale, $4 "yes" to
# take over a live one. Prints the holder's line and its age when it refuses.
# The check and the write under one flock (util-linux): two launches starting at once are one
# holder and one refusal.
TAKE = (
    'dir=$1 line=$2 stale=$3 force=$4; mkdir -p "$dir" || exit 125; lease="$dir/launch.lease"; '
    'exec 9>"$dir/launch.lock" && flock -w 5 9 || exit 125; '
    'if [ -e "$lease" ] && [ "$force" != yes ]; then '
    'age=$(( $(date +%s) - $(stat -c %Y "$lease" 2>/dev/null || echo 0) )); '
    'held=$(cat "$lease" 2>/dev/null); '
    'if [ -n "$held" ] && [ "$age" -lt "$stale" ] && [ "$held" != "$line" ]; then '
    'printf "%s\\n%s\\n" "$held" "$age"; exit 3; fi; fi; '
    'printf "%s\\n" "$line" >"$lease.$$" && mv -f "$lease.$$" "$lease"'
)
# $1 the lease, $2 our line. Renewed while it is ours, written again if it went (a take-over
# that gave it back without launching); exit 1: another launch holds it now.
RENEW = (
    'exec 9>"${1%/*}/launch.lock" && flock -w 5 9 || exit 125; '
    'if [ -e "$1" ]; then [ "$(cat "$1")" = "$2" ] && touch "$1"; '
    'else printf "%s\\n" "$2" >"$1"; fi'
)
# exit 0 while it is ours
HOLDS = '[ "$(cat "$1" 2>/dev/null)" = "$2" ]'
# removed only while it is ours
RELEASE = (
    'exec 9>"${1%/*}/launch.lock" && flock -w 5 9 || exit 125; '
    '[ "$(cat "$1" 2>/dev/null)" != "$2" ] || rm -f "$1"'
)


# This process, apart from an earlier one that had its pid (a restarted container keeps its
# host name and often its pid 1)
PROCESS = uuid.uuid4().hex


@dataclass(frozen=True)
class LeaseHolder:
    """Another launch holding the lease: who, and how many seconds ago it last renewed it."""

    who: str
    since: str
    age_s: int
    host: str = ""
    pid: int = 0
    process: str = ""

    @property
    def gone(self) -> bool:
        """It ran on this host, and its process has exited."""
        if self.host != socket.gethostname() or self.pid <= 0:
            return False
        if self.pid == os.getpid():
            return self.process != PROCESS
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return True
        except PermissionError:  # alive, someone else's
            return False
        return False

    def describe(self) -> str:
        return f"{self.who}, since {self.since} (renewed {self.age_s} s ago)"


class LeaseHeld(Exception):
    def __init__(self, holder: LeaseHolder):
        super().__init__(holder.describe())
        self.holder = holder


def holder_line(who: str) -> str:
    """This launch's line in the lease: who runs it, where, and a nonce (two launches from one
    process are two holders)."""
    host, pid = socket.gethostname(), os.getpid()
    return json.dumps(
        {
            "who": f"{who} on {host} (pid {pid})",
            "since": datetime.now(UTC).strftime("%Y-%m-%d %H:%M:%S UTC"),
            "host": host,
            "pid": pid,
            "process": PROCESS,
            "nonce": uuid.uuid4().hex,
        },
        separators=(",", ":"),
    )


def _holder(output: str) -> LeaseHolder:
    line, _, age = output.strip().rpartition("\n")
    age_s = int(age) if age.strip().isdigit() else 0
    try:
        held = json.loads(line)
        return LeaseHolder(
            str(held["who"]),
            str(held["since"]),
            age_s,
            str(held["host"]),
            int(held["pid"]),
            str(held.get("process", "")),
        )
    except (ValueError, KeyError, TypeError):
        return LeaseHolder("a launch whose lease spark-bot cannot read", "?", age_s)


class LaunchLease:
    """The lease of one launch on the head: `take`, then `release` (renewed in between)."""

    def __init__(self, head: NodeConnection, cluster: str, who: str, *, timeout: float):
        self.head = head
        self.folder = f"{FOLDER}/{cluster}"
        self.line = holder_line(who)
        self.timeout = timeout
        self._renewing: asyncio.Task[None] | None = None
        self._path: str | None = None

    async def take(self, *, take_over: bool = False) -> None:
        """Ours, or LeaseHeld naming the live launch that holds it (NodeError: the head did not
        answer)."""
        home = await self.head.home_dir(timeout=self.timeout)
        folder = f"{home}/{self.folder}"
        result = await self._take(folder, take_over)
        if result.exit_status == HELD:
            holder = _holder(result.stdout)
            if not holder.gone:
                raise LeaseHeld(holder)
            result = await self._take(folder, True)
        if not result.ok:
            raise NodeError(
                self.head.name,
                f"could not write the launch lease in ~/{self.folder} ({result.stderr.strip()[:200]})",
                f"check that the SSH user can write ~/{FOLDER} on {self.head.name}",
            )
        self._path = f"{folder}/launch.lease"
        self._renewing = asyncio.create_task(self._renew(), name="launch lease")

    async def _take(self, folder: str, take_over: bool) -> CommandResult:
        force = "yes" if take_over else "no"
        argv = ["sh", "-c", TAKE, "sh", folder, self.line, f"{STALE_S:g}", force]
        return await self.head.run(argv, timeout=self.timeout)

    async def _renew(self) -> None:
        assert self._path is not None
        while True:
            await asyncio.sleep(RENEW_S)  # the lease's own period, not a wait for an event
            try:
                renewed = await self.head.run(
                    ["sh", "-c", RENEW, "sh", self._path, self.line], timeout=self.timeout
                )
            except Exception as error:  # the launch notices a lost head itself
                log.warning("could not renew the launch lease on %s: %s", self.head.name, error)
                continue
            if renewed.exit_status == 1:
                log.warning(
                    "the launch lease on %s was taken over by another launch (up --take-over)",
                    self.head.name,
                )

    async def still_ours(self) -> bool:
        """Whether the lease is still this launch's (False: another launch took it over); a
        head that does not answer leaves it ours, as it was."""
        if self._path is None:
            return False
        try:
            holds = await self.head.run(
                ["sh", "-c", HOLDS, "sh", self._path, self.line], timeout=self.timeout
            )
        except NodeError as error:
            log.warning("could not read the launch lease on %s: %s", self.head.name, error)
            return True
        return holds.ok

    async def release(self) -> None:
        """Give it back (only if it is still ours); a head that does not answer lets it expire."""
        if self._renewing is not None:
            self._renewing.cancel()
            await asyncio.gather(self._renewing, return_exceptions=True)
            self._renewing = None
        if self._path is None:
            return
        try:
            await self.head.run(
                ["sh", "-c", RELEASE, "sh", self._path, self.line], timeout=self.timeout
            )
        except NodeError as error:
            log.warning(
                "could not give back the launch lease on %s (it expires): %s", self.head.name, error
            )
        self._path = None
