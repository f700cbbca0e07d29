"""The bot's bench history: the store's bench results, one job's result recorded through the
journal (a store that cannot be read or written leaves the result as measured)."""

from __future__ import annotations

import logging
import sqlite3

from cluster.bench.models import BenchReport
from handlers.journal import Journal
from handlers.store import Store

log = logging.getLogger(__name__)


class StoreHistory:
    def __init__(self, store: Store, journal: Journal, job_id: int):
        self.store = store
        self.journal = journal
        self.job_id = job_id

    async def previous(self, key: str) -> BenchReport | None:
        try:
            found = await self.store.previous_bench(key)
        except sqlite3.Error as error:
            log.error("bench of job %s not compared: %s", self.job_id, error)
            return None
        return BenchReport.model_validate_json(found) if found else None

    async def record(self, report: BenchReport) -> None:
        await self.journal.write(
            f"job {self.job_id}'s bench result",
            lambda: self.store.add_bench(self.job_id, report.model_dump_json()),
        )
