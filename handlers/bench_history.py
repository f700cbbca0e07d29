"""The bot's history of measurements: the store's bench results table, which holds any report
with a `setup_key` (bench's, fabric-test's), one job's report recorded through the journal (a
store that cannot be read or written leaves the report as measured)."""

from __future__ import annotations

import logging
import sqlite3
from typing import Generic, TypeVar

from pydantic import BaseModel, ValidationError

from handlers.journal import Journal
from handlers.store import Store

log = logging.getLogger(__name__)

R = TypeVar("R", bound=BaseModel)


class StoreHistory(Generic[R]):
    """`model`: the kind of report; a report of another kind under the same key is not one."""

    def __init__(self, store: Store, journal: Journal, job_id: int, model: type[R]):
        self.store = store
        self.journal = journal
        self.job_id = job_id
        self.model = model

    async def previous(self, key: str) -> R | None:
        """The newest report of this kind under `key`; one of another kind, or of an older
        format, is passed over (a comparison never costs the job its figures)."""
        try:
            found = await self.store.recent_reports(key)
        except sqlite3.Error as error:
            log.error("the report of job %s not compared: %s", self.job_id, error)
            return None
        for report in found:
            try:
                return self.model.model_validate_json(report)
            except ValidationError:
                continue
        return None

    async def record(self, report: R) -> None:
        await self.journal.write(
            f"job {self.job_id}'s result",
            lambda: self.store.add_bench(self.job_id, report.model_dump_json()),
        )
