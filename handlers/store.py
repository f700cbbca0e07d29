"""SQLite persistence: jobs (with their channel and thread), the cluster lock, the watch, the serve
settings the running cluster was launched with, the confirmations asked, the audit trail and bench results (the bot's one
bench history: a new result is compared with the last of the same setup here). Every query runs
in a worker thread: nothing blocks the event loop. Command text and outcomes are stored redacted:
they may carry what a user pasted (a token typed after `/spark up`)."""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import socket
import sqlite3
import threading
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar

from cluster.errors import SparkBotError
from cluster.redact import redact
from handlers.job_state import JobState

R = TypeVar("R")

# A locked database fails a statement after this long instead of SQLite's 5 s: the writers retry
# with short waits (handlers/journal.py), and nothing waits for the store where it must answer.
BUSY_WAIT = 0.1

SCHEMA = """
CREATE TABLE IF NOT EXISTS jobs (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    cluster TEXT NOT NULL, command TEXT NOT NULL, user TEXT NOT NULL, channel TEXT NOT NULL,
    ts TEXT, link TEXT, state TEXT NOT NULL, outcome TEXT,
    started_at TEXT NOT NULL, ended_at TEXT, parent_json TEXT
);
CREATE TABLE IF NOT EXISTS locks (
    cluster TEXT PRIMARY KEY, job_id INTEGER NOT NULL, instance TEXT NOT NULL, since TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS watches (cluster TEXT PRIMARY KEY, job_id INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS launches (
    cluster TEXT PRIMARY KEY, job_id INTEGER NOT NULL, serve_json TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS audit (
    id INTEGER PRIMARY KEY AUTOINCREMENT, at TEXT NOT NULL, user TEXT NOT NULL, channel TEXT NOT NULL,
    command TEXT NOT NULL, outcome TEXT NOT NULL, job_id INTEGER, link TEXT
);
CREATE TABLE IF NOT EXISTS bench_results (
    id INTEGER PRIMARY KEY AUTOINCREMENT, job_id INTEGER, at TEXT NOT NULL, report_json TEXT NOT NULL
);
"""

# What each version of the schema adds to the one before (PRAGMA user_version says which a
# database has): a database of an earlier spark-bot is brought up to date when it is opened.
MIGRATIONS: list[list[str]] = [
    [statement for statement in SCHEMA.split(";") if statement.strip()],
    # the lock as a lease of an instance (renewed by its heartbeat), the instances on this database
    [
        "ALTER TABLE locks ADD COLUMN expires TEXT",
        "CREATE TABLE instances (id TEXT PRIMARY KEY, pid INTEGER NOT NULL, host TEXT NOT NULL, "
        "started TEXT NOT NULL, heartbeat TEXT NOT NULL)",
    ],
    # each confirmation asked: its button carries only the nonce; the command (and what a yes
    # consents to beyond it) is read back from here, once, before it expires
    [
        "CREATE TABLE confirmations (nonce TEXT PRIMARY KEY, cluster TEXT NOT NULL, user TEXT NOT NULL, "
        "channel TEXT NOT NULL, command TEXT NOT NULL, question TEXT NOT NULL, "
        "replace_foreign TEXT NOT NULL DEFAULT '[]', created TEXT NOT NULL, expires TEXT NOT NULL, "
        "used_at TEXT, used_by TEXT)"
    ],
    # the recipe the running cluster was launched with (`/spark up RECIPE`)
    ["ALTER TABLE launches ADD COLUMN recipe TEXT"],
    # the thread a job's parent was posted in (a restart's): what goes under the job goes there
    ["ALTER TABLE jobs ADD COLUMN thread TEXT"],
]


class StoreError(SparkBotError):
    """The database file cannot be used: names the file and what to do."""


def now() -> datetime:
    return datetime.now(UTC)


@dataclass(frozen=True)
class JobRecord:
    id: int
    cluster: str
    command: str
    user: str
    channel: str
    ts: str | None
    link: str | None
    state: JobState
    outcome: str | None
    started_at: datetime
    ended_at: datetime | None
    parent_json: str | None
    thread: str | None = None  # the thread its parent was posted in (a restart's), if any

    @property
    def thread_root(self) -> str | None:
        """The ts a file or a reply about this job goes under: Slack wants a thread's parent,
        never a reply (a restart's message is a reply in its launch's thread)."""
        return self.thread or self.ts


@dataclass(frozen=True)
class LockRecord:
    cluster: str
    job: JobRecord
    instance: str
    since: datetime
    expires: datetime | None = None  # None: taken by a spark-bot from before leases


@dataclass(frozen=True)
class Owner:
    """A running spark-bot, as the owner of leases in the store."""

    id: str
    pid: int
    host: str

    @classmethod
    def this_process(cls) -> Owner:
        return cls(uuid.uuid4().hex, os.getpid(), socket.gethostname())


@dataclass(frozen=True)
class ConfirmationRecord:
    """A confirmation as it was asked: of whom, where, for which command, and until when."""

    nonce: str
    cluster: str
    user: str
    channel: str
    command: str
    question: str
    replace_foreign: tuple[
        str, ...
    ]  # nodes whose container spark-bot did not start, named in the question
    created: datetime
    expires: datetime
    used_at: datetime | None
    used_by: str | None


@dataclass(frozen=True)
class InstanceRecord:
    id: str
    pid: int
    host: str
    started: datetime
    heartbeat: datetime

    def gone(self, at: datetime, lease: float) -> bool:
        """Proven gone: no heartbeat for a whole lease, or its process no longer runs on this host."""
        return self.heartbeat + timedelta(seconds=lease) < at or (
            self.host == socket.gethostname() and not _running(self.pid)
        )


class Store:
    def __init__(self, path: Path | str, clock: Callable[[], datetime] = now):
        self.path = Path(path)
        self.clock = clock  # the time of leases and heartbeats
        self._db: sqlite3.Connection | None = None
        self._mutex = threading.Lock()
        # Its own thread: a query waiting on a lock must not hold up the default executor (where
        # aiohttp resolves Slack's address).
        self._executor: ThreadPoolExecutor | None = None

    async def open(self) -> None:
        """Open (or create) the database; StoreError says which file is unusable and what to do."""

        def connect() -> sqlite3.Connection:
            if str(self.path) != ":memory:":
                self.path.parent.mkdir(parents=True, exist_ok=True)
            db = sqlite3.connect(
                self.path, timeout=BUSY_WAIT, check_same_thread=False, isolation_level=None
            )
            try:
                db.row_factory = sqlite3.Row
                db.execute("PRAGMA journal_mode=WAL")
                # damaged pages do not fail the statements above: find them now, not mid-job
                problems = [row[0] for row in db.execute("PRAGMA quick_check(1)")]
                if problems != ["ok"]:
                    found = " ".join(
                        " ".join(problems).replace("*** in database main ***", "").split()
                    )
                    raise sqlite3.DatabaseError(f"damaged: {found[:160]}")
                _migrate(db)
            except BaseException:
                db.close()
                raise
            return db

        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="spark-bot-store")
        try:
            self._db = await self._in_thread(connect)
        except sqlite3.DatabaseError as error:
            raise StoreError(
                f"{self.path} is not a usable spark-bot database ({error}): move it aside (or restore "
                "it from a backup) and start again; a new, empty one is created in its place"
            ) from None
        except OSError as error:
            raise StoreError(
                f"{self.path}: cannot create the database ({error.strerror}): "
                "check that its folder can be written"
            ) from None

    async def close(self) -> None:
        def close() -> None:
            # Under the mutex: a query whose awaiting task was cancelled may still be running.
            with self._mutex:
                if self._db is not None:
                    self._db.close()
                    self._db = None

        if self._executor is not None:
            await self._in_thread(close)
            self._executor.shutdown(wait=False)
            self._executor = None

    async def _run(self, fn: Callable[[sqlite3.Connection], R]) -> R:
        def locked() -> R:
            with self._mutex:
                if self._db is None:
                    raise RuntimeError("the store is closed (Store.open() first)")
                return fn(self._db)

        return await self._in_thread(locked)

    async def _in_thread(self, fn: Callable[[], R]) -> R:
        if self._executor is None:
            raise RuntimeError("the store is closed (Store.open() first)")
        return await asyncio.get_running_loop().run_in_executor(self._executor, fn)

    # -- jobs -------------------------------------------------------------------------------

    async def create_job(self, cluster: str, command: str, user: str, channel: str) -> JobRecord:
        def insert(db: sqlite3.Connection) -> int:
            cursor = db.execute(
                "INSERT INTO jobs (cluster, command, user, channel, state, started_at) VALUES (?,?,?,?,?,?)",
                (cluster, redact(command), user, channel, JobState.STARTING, now().isoformat()),
            )
            assert cursor.lastrowid is not None  # set by a successful INSERT
            return cursor.lastrowid

        return await self.job(await self._run(insert))

    async def job(self, job_id: int) -> JobRecord:
        row = await self._run(
            lambda db: db.execute("SELECT * FROM jobs WHERE id=?", (job_id,)).fetchone()
        )
        if row is None:
            raise KeyError(job_id)
        return _job(row)

    async def set_parent(
        self,
        job_id: int,
        ts: str,
        link: str | None,
        parent_json: str,
        thread: str | None = None,
    ) -> None:
        await self._run(
            lambda db: db.execute(
                "UPDATE jobs SET ts=?, link=?, parent_json=?, state=?, thread=? WHERE id=?",
                (ts, link, parent_json, JobState.RUNNING, thread, job_id),
            )
        )

    async def save_parent(self, job_id: int, parent_json: str) -> None:
        await self._run(
            lambda db: db.execute("UPDATE jobs SET parent_json=? WHERE id=?", (parent_json, job_id))
        )

    async def finish_job(self, job_id: int, state: JobState, outcome: str) -> None:
        await self._run(
            lambda db: db.execute(
                "UPDATE jobs SET state=?, outcome=?, ended_at=? WHERE id=?",
                (state, redact(outcome), now().isoformat(), job_id),
            )
        )

    # -- the cluster lock -------------------------------------------------------------------

    async def acquire(
        self, cluster: str, job_id: int, instance: str, lease: float
    ) -> LockRecord | None:
        """Take the lock for `job_id` as a lease of `instance`; when another job holds it, return
        that holder instead.

        A row of `instance` itself is taken over: that job has ended (the instance knows which job
        it runs) but the store could not delete its row then. So is a lease that has expired: its
        owner stopped renewing it."""

        def take(db: sqlite3.Connection) -> sqlite3.Row:
            at = self.clock()
            with _transaction(db):
                db.execute(
                    "DELETE FROM locks WHERE cluster=? AND (instance=? OR expires IS NULL OR expires<?)",
                    (cluster, instance, at.isoformat()),
                )
                db.execute(
                    "INSERT OR IGNORE INTO locks (cluster, job_id, instance, since, expires) "
                    "VALUES (?,?,?,?,?)",
                    (
                        cluster,
                        job_id,
                        instance,
                        at.isoformat(),
                        (at + timedelta(seconds=lease)).isoformat(),
                    ),
                )
                held: sqlite3.Row = db.execute(
                    "SELECT * FROM locks WHERE cluster=?", (cluster,)
                ).fetchone()
                return held

        row = await self._run(take)
        if row["job_id"] == job_id:
            return None
        return await self._lock(row)

    async def release(self, cluster: str, job_id: int, instance: str) -> None:
        """Free the lock of `job_id` if `instance` still holds it."""
        await self._run(
            lambda db: db.execute(
                "DELETE FROM locks WHERE cluster=? AND job_id=? AND instance=?",
                (cluster, job_id, instance),
            )
        )

    async def locks(self) -> list[LockRecord]:
        rows = await self._run(lambda db: db.execute("SELECT * FROM locks").fetchall())
        return [await self._lock(r) for r in rows]

    async def _lock(self, row: sqlite3.Row) -> LockRecord:
        return LockRecord(
            row["cluster"],
            await self.job(row["job_id"]),
            row["instance"],
            datetime.fromisoformat(row["since"]),
            datetime.fromisoformat(row["expires"]) if row["expires"] else None,
        )

    # -- the instances on this database -----------------------------------------------------

    async def register(self, owner: Owner, lease: float) -> InstanceRecord | None:
        """Record `owner` as the running instance, or return the other one that still runs."""

        def claim(db: sqlite3.Connection) -> InstanceRecord | None:
            at = self.clock()
            with _transaction(db):
                others = [
                    _instance(r)
                    for r in db.execute("SELECT * FROM instances WHERE id!=?", (owner.id,))
                ]
                running = next((other for other in others if not other.gone(at, lease)), None)
                if running is not None:
                    return running
                db.execute("DELETE FROM instances WHERE id!=?", (owner.id,))
                db.execute(
                    "INSERT OR REPLACE INTO instances (id, pid, host, started, heartbeat) VALUES (?,?,?,?,?)",
                    (owner.id, owner.pid, owner.host, at.isoformat(), at.isoformat()),
                )
                return None

        return await self._run(claim)

    async def instances(self) -> list[InstanceRecord]:
        return [
            _instance(r)
            for r in await self._run(lambda db: db.execute("SELECT * FROM instances").fetchall())
        ]

    async def heartbeat(self, owner: Owner, lease: float, job_id: int | None) -> None:
        """`owner` runs: its registration and the lease of `job_id` (the job it runs) go on."""

        def renew(db: sqlite3.Connection) -> None:
            at = self.clock()
            with _transaction(db):
                db.execute(
                    "UPDATE instances SET heartbeat=? WHERE id=?", (at.isoformat(), owner.id)
                )
                db.execute(
                    "UPDATE locks SET expires=? WHERE instance=? AND job_id=?",
                    ((at + timedelta(seconds=lease)).isoformat(), owner.id, job_id),
                )

        await self._run(renew)

    async def unregister(self, owner: Owner) -> None:
        await self._run(lambda db: db.execute("DELETE FROM instances WHERE id=?", (owner.id,)))

    # -- confirmations: one answer per question asked --------------------------------------

    async def ask(
        self,
        cluster: str,
        user: str,
        channel: str,
        command: str,
        question: str,
        replace_foreign: tuple[str, ...],
        within: float,
    ) -> str:
        """Record a question asked of `user`; the nonce its button carries. The command is kept as
        it was asked, not redacted: it is canonical text of safe words, and it is what a yes runs."""
        nonce = secrets.token_urlsafe(24)
        at = self.clock()
        await self._run(
            lambda db: db.execute(
                "INSERT INTO confirmations (nonce, cluster, user, channel, command, question, replace_foreign, "
                "created, expires) VALUES (?,?,?,?,?,?,?,?,?)",
                (
                    nonce,
                    cluster,
                    user,
                    channel,
                    command,
                    redact(question),
                    json.dumps(list(replace_foreign)),
                    at.isoformat(),
                    (at + timedelta(seconds=within)).isoformat(),
                ),
            )
        )
        return nonce

    async def answer(
        self, nonce: str, cluster: str, user: str, channel: str
    ) -> tuple[ConfirmationRecord | None, bool]:
        """Mark the question `nonce` answered by `user`, if it was asked of them, in `channel`, for
        `cluster`, is not answered yet and has not expired; the question (None: unknown) and
        whether this call is the one answer it gets."""

        def take(db: sqlite3.Connection) -> tuple[sqlite3.Row | None, bool]:
            at = self.clock().isoformat()
            taken = (
                db.execute(
                    "UPDATE confirmations SET used_at=?, used_by=? WHERE nonce=? AND used_at IS NULL AND cluster=? "
                    "AND user=? AND channel=? AND expires>?",
                    (at, user, nonce, cluster, user, channel, at),
                ).rowcount
                == 1
            )
            return db.execute(
                "SELECT * FROM confirmations WHERE nonce=?", (nonce,)
            ).fetchone(), taken

        row, taken = await self._run(take)
        return (_confirmation(row) if row else None), taken

    # -- the watch: which job's thread hears about a running cluster ------------------------

    async def set_watch(self, cluster: str, job_id: int) -> None:
        await self._run(
            lambda db: db.execute(
                "INSERT OR REPLACE INTO watches (cluster, job_id) VALUES (?,?)", (cluster, job_id)
            )
        )

    async def clear_watch(self, cluster: str) -> None:
        await self._run(lambda db: db.execute("DELETE FROM watches WHERE cluster=?", (cluster,)))

    async def watch(self, cluster: str) -> JobRecord | None:
        row = await self._run(
            lambda db: db.execute(
                "SELECT job_id FROM watches WHERE cluster=?", (cluster,)
            ).fetchone()
        )
        return await self.job(row["job_id"]) if row else None

    # -- what the running cluster was launched with: `/spark up` overrides ------------------

    async def set_launch(
        self, cluster: str, job_id: int, serve: dict[str, float], recipe: str | None = None
    ) -> None:
        await self._run(
            lambda db: db.execute(
                "INSERT OR REPLACE INTO launches (cluster, job_id, serve_json, recipe) "
                "VALUES (?,?,?,?)",
                (cluster, job_id, json.dumps(serve, sort_keys=True), recipe),
            )
        )

    async def clear_launch(self, cluster: str) -> None:
        await self._run(lambda db: db.execute("DELETE FROM launches WHERE cluster=?", (cluster,)))

    async def launch(self, cluster: str) -> dict[str, float]:
        """The serve settings the last successful `up` applied over the config ({} when none)."""
        row = await self._run(
            lambda db: db.execute(
                "SELECT serve_json FROM launches WHERE cluster=?", (cluster,)
            ).fetchone()
        )
        return json.loads(row["serve_json"]) if row else {}

    async def launched_recipe(self, cluster: str) -> str | None:
        """The recipe the last successful `up` launched (None: none, or the config's own)."""
        row = await self._run(
            lambda db: db.execute(
                "SELECT recipe FROM launches WHERE cluster=?", (cluster,)
            ).fetchone()
        )
        return row["recipe"] if row else None

    # -- audit and bench --------------------------------------------------------------------

    async def audit(
        self,
        user: str,
        channel: str,
        command: str,
        outcome: str,
        job_id: int | None = None,
        link: str | None = None,
    ) -> None:
        await self._run(
            lambda db: db.execute(
                "INSERT INTO audit (at, user, channel, command, outcome, job_id, link) VALUES (?,?,?,?,?,?,?)",
                (now().isoformat(), user, channel, redact(command), redact(outcome), job_id, link),
            )
        )

    async def audit_trail(self) -> list[dict[str, Any]]:
        rows = await self._run(lambda db: db.execute("SELECT * FROM audit ORDER BY id").fetchall())
        return [dict(r) for r in rows]

    async def add_bench(self, job_id: int, report_json: str) -> None:
        await self._run(
            lambda db: db.execute(
                "INSERT INTO bench_results (job_id, at, report_json) VALUES (?,?,?)",
                (job_id, now().isoformat(), report_json),
            )
        )

    async def recent_reports(self, setup_key: str, limit: int = 20) -> list[str]:
        """The report JSON of the last `limit` measurements of this setup (same fingerprint,
        prompt, max_tokens), newest first."""
        rows = await self._run(
            lambda db: db.execute(
                "SELECT report_json FROM bench_results WHERE json_extract(report_json, '$.setup_key')=? "
                "ORDER BY id DESC LIMIT ?",
                (setup_key, limit),
            ).fetchall()
        )
        return [row["report_json"] for row in rows]


def _migrate(db: sqlite3.Connection) -> None:
    with _transaction(db):
        version = db.execute("PRAGMA user_version").fetchone()[0]
        for statements in MIGRATIONS[version:]:
            for statement in statements:
                db.execute(statement)
        db.execute(f"PRAGMA user_version={len(MIGRATIONS)}")


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def _confirmation(row: sqlite3.Row) -> ConfirmationRecord:
    return ConfirmationRecord(
        nonce=row["nonce"],
        cluster=row["cluster"],
        user=row["user"],
        channel=row["channel"],
        command=row["command"],
        question=row["question"],
        replace_foreign=tuple(json.loads(row["replace_foreign"])),
        created=datetime.fromisoformat(row["created"]),
        expires=datetime.fromisoformat(row["expires"]),
        used_at=datetime.fromisoformat(row["used_at"]) if row["used_at"] else None,
        used_by=row["used_by"],
    )


def _instance(row: sqlite3.Row) -> InstanceRecord:
    return InstanceRecord(
        row["id"],
        row["pid"],
        row["host"],
        datetime.fromisoformat(row["started"]),
        datetime.fromisoformat(row["heartbeat"]),
    )


@contextmanager
def _transaction(db: sqlite3.Connection) -> Iterator[None]:
    """Statements that take effect together or not at all (the connection is in autocommit)."""
    db.execute("BEGIN IMMEDIATE")
    try:
        yield
        db.execute("COMMIT")
    except BaseException:
        if db.in_transaction:  # a failed COMMIT (busy, disk full) leaves it open
            db.execute("ROLLBACK")
        raise


def _job(row: sqlite3.Row) -> JobRecord:
    return JobRecord(
        id=row["id"],
        cluster=row["cluster"],
        command=row["command"],
        user=row["user"],
        channel=row["channel"],
        ts=row["ts"],
        link=row["link"],
        state=JobState(row["state"]),
        outcome=row["outcome"],
        started_at=datetime.fromisoformat(row["started_at"]),
        ended_at=datetime.fromisoformat(row["ended_at"]) if row["ended_at"] else None,
        parent_json=row["parent_json"],
        thread=row["thread"],
    )
