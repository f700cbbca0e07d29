"""SQLite persistence: jobs (with their channel and thread), the cluster lock, the watch, the serve
settings the running cluster was launched with, the audit trail and bench results (the bot's one
bench history: a new result is compared with the last of the same setup here). Every query runs
in a worker thread: nothing blocks the event loop. Command text and outcomes are stored redacted:
they may carry what a user pasted (a token typed after `/spark up`)."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import threading
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from cluster.errors import SparkBotError
from cluster.redact import redact

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


class StoreError(SparkBotError):
    """The database file cannot be used: names the file and what to do."""


def now() -> datetime:
    return datetime.now(timezone.utc)


@dataclass(frozen=True)
class JobRecord:
    id: int
    cluster: str
    command: str
    user: str
    channel: str
    ts: str | None
    link: str | None
    state: str
    outcome: str | None
    started_at: datetime
    ended_at: datetime | None
    parent_json: str | None


@dataclass(frozen=True)
class LockRecord:
    cluster: str
    job: JobRecord
    instance: str
    since: datetime


class Store:
    def __init__(self, path: Path | str):
        self.path = Path(path)
        self._db: sqlite3.Connection | None = None
        self._mutex = threading.Lock()

    async def open(self) -> None:
        """Open (or create) the database; StoreError says which file is unusable and what to do."""

        def connect() -> sqlite3.Connection:
            if str(self.path) != ":memory:":
                self.path.parent.mkdir(parents=True, exist_ok=True)
            db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
            try:
                db.row_factory = sqlite3.Row
                db.execute("PRAGMA journal_mode=WAL")
                # damaged pages do not fail the statements above: find them now, not mid-job
                problems = [row[0] for row in db.execute("PRAGMA quick_check(1)")]
                if problems != ["ok"]:
                    found = " ".join(" ".join(problems).replace("*** in database main ***", "").split())
                    raise sqlite3.DatabaseError(f"damaged: {found[:160]}")
                db.executescript(SCHEMA)
            except BaseException:
                db.close()
                raise
            return db

        try:
            self._db = await asyncio.to_thread(connect)
        except sqlite3.DatabaseError as error:
            raise StoreError(
                f"{self.path} is not a usable spark-bot database ({error}): move it aside (or restore "
                "it from a backup) and start again; a new, empty one is created in its place"
            ) from None
        except OSError as error:
            raise StoreError(f"{self.path}: cannot create the database ({error.strerror}): "
                             "check that its folder can be written") from None

    async def close(self) -> None:
        def close() -> None:
            # Under the mutex: a query whose awaiting task was cancelled may still be running.
            with self._mutex:
                if self._db is not None:
                    self._db.close()
                    self._db = None

        await asyncio.to_thread(close)

    async def _run(self, fn, *args) -> Any:
        def locked():
            with self._mutex:
                if self._db is None:
                    raise RuntimeError("the store is closed (Store.open() first)")
                return fn(self._db, *args)

        return await asyncio.to_thread(locked)

    # -- jobs -------------------------------------------------------------------------------

    async def create_job(self, cluster: str, command: str, user: str, channel: str) -> JobRecord:
        def insert(db: sqlite3.Connection) -> int:
            cursor = db.execute(
                "INSERT INTO jobs (cluster, command, user, channel, state, started_at) VALUES (?,?,?,?,?,?)",
                (cluster, redact(command), user, channel, "starting", now().isoformat()),
            )
            return int(cursor.lastrowid)

        return await self.job(await self._run(insert))

    async def job(self, job_id: int) -> JobRecord:
        row = await self._run(lambda db: db.execute("SELECT * FROM jobs WHERE id=?", (job_id,)).fetchone())
        if row is None:
            raise KeyError(job_id)
        return _job(row)

    async def set_parent(self, job_id: int, ts: str, link: str | None, parent_json: str) -> None:
        await self._run(lambda db: db.execute(
            "UPDATE jobs SET ts=?, link=?, parent_json=?, state='running' WHERE id=?",
            (ts, link, parent_json, job_id)))

    async def save_parent(self, job_id: int, parent_json: str) -> None:
        await self._run(lambda db: db.execute("UPDATE jobs SET parent_json=? WHERE id=?", (parent_json, job_id)))

    async def finish_job(self, job_id: int, state: str, outcome: str) -> None:
        await self._run(lambda db: db.execute(
            "UPDATE jobs SET state=?, outcome=?, ended_at=? WHERE id=?",
            (state, redact(outcome), now().isoformat(), job_id)))

    # -- the cluster lock -------------------------------------------------------------------

    async def acquire(self, cluster: str, job_id: int, instance: str) -> LockRecord | None:
        """Take the lock for `job_id`; when another job holds it, return that holder instead."""

        def take(db: sqlite3.Connection):
            db.execute("INSERT OR IGNORE INTO locks (cluster, job_id, instance, since) VALUES (?,?,?,?)",
                       (cluster, job_id, instance, now().isoformat()))
            return db.execute("SELECT * FROM locks WHERE cluster=?", (cluster,)).fetchone()

        row = await self._run(take)
        if row["job_id"] == job_id:
            return None
        return await self._lock(row)

    async def release(self, cluster: str, job_id: int) -> None:
        await self._run(lambda db: db.execute("DELETE FROM locks WHERE cluster=? AND job_id=?", (cluster, job_id)))

    async def locks(self) -> list[LockRecord]:
        rows = await self._run(lambda db: db.execute("SELECT * FROM locks").fetchall())
        return [await self._lock(r) for r in rows]

    async def _lock(self, row: sqlite3.Row) -> LockRecord:
        return LockRecord(row["cluster"], await self.job(row["job_id"]), row["instance"],
                          datetime.fromisoformat(row["since"]))

    # -- the watch: which job's thread hears about a running cluster ------------------------

    async def set_watch(self, cluster: str, job_id: int) -> None:
        await self._run(lambda db: db.execute(
            "INSERT OR REPLACE INTO watches (cluster, job_id) VALUES (?,?)", (cluster, job_id)))

    async def clear_watch(self, cluster: str) -> None:
        await self._run(lambda db: db.execute("DELETE FROM watches WHERE cluster=?", (cluster,)))

    async def watch(self, cluster: str) -> JobRecord | None:
        row = await self._run(lambda db: db.execute(
            "SELECT job_id FROM watches WHERE cluster=?", (cluster,)).fetchone())
        return await self.job(row["job_id"]) if row else None

    # -- what the running cluster was launched with: `/spark up` overrides ------------------

    async def set_launch(self, cluster: str, job_id: int, serve: dict[str, float]) -> None:
        await self._run(lambda db: db.execute(
            "INSERT OR REPLACE INTO launches (cluster, job_id, serve_json) VALUES (?,?,?)",
            (cluster, job_id, json.dumps(serve, sort_keys=True))))

    async def clear_launch(self, cluster: str) -> None:
        await self._run(lambda db: db.execute("DELETE FROM launches WHERE cluster=?", (cluster,)))

    async def launch(self, cluster: str) -> dict[str, float]:
        """The serve settings the last successful `up` applied over the config ({} when none)."""
        row = await self._run(lambda db: db.execute(
            "SELECT serve_json FROM launches WHERE cluster=?", (cluster,)).fetchone())
        return json.loads(row["serve_json"]) if row else {}

    # -- audit and bench --------------------------------------------------------------------

    async def audit(self, user: str, channel: str, command: str, outcome: str,
                    job_id: int | None = None, link: str | None = None) -> None:
        await self._run(lambda db: db.execute(
            "INSERT INTO audit (at, user, channel, command, outcome, job_id, link) VALUES (?,?,?,?,?,?,?)",
            (now().isoformat(), user, channel, redact(command), redact(outcome), job_id, link)))

    async def audit_trail(self) -> list[dict[str, Any]]:
        rows = await self._run(lambda db: db.execute("SELECT * FROM audit ORDER BY id").fetchall())
        return [dict(r) for r in rows]

    async def add_bench(self, job_id: int, report_json: str) -> None:
        await self._run(lambda db: db.execute(
            "INSERT INTO bench_results (job_id, at, report_json) VALUES (?,?,?)",
            (job_id, now().isoformat(), report_json)))

    async def previous_bench(self, setup_key: str) -> str | None:
        """The report JSON of the last bench of this setup (same fingerprint, prompt, max_tokens)."""
        row = await self._run(lambda db: db.execute(
            "SELECT report_json FROM bench_results WHERE json_extract(report_json, '$.setup_key')=? "
            "ORDER BY id DESC LIMIT 1", (setup_key,)).fetchone())
        return row["report_json"] if row else None


def _job(row: sqlite3.Row) -> JobRecord:
    return JobRecord(
        id=row["id"], cluster=row["cluster"], command=row["command"], user=row["user"],
        channel=row["channel"], ts=row["ts"], link=row["link"], state=row["state"], outcome=row["outcome"],
        started_at=datetime.fromisoformat(row["started_at"]),
        ended_at=datetime.fromisoformat(row["ended_at"]) if row["ended_at"] else None,
        parent_json=row["parent_json"],
    )
