"""The bot's history of measurements: the newest report of the asked kind under a setup key,
passing over another kind's report and one of an older format (issue 24 review, finding 6)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from handlers.bench_history import StoreHistory
from handlers.journal import Journal
from handlers.store import Store


class Report(BaseModel):
    model_config = ConfigDict(extra="forbid")
    setup_key: str
    tok_s: float


class OtherKind(BaseModel):
    model_config = ConfigDict(extra="forbid")
    setup_key: str
    gbps: float


async def test_the_newest_report_of_its_kind_is_the_one_compared(tmp_path):
    store = Store(tmp_path / "bot.db")
    await store.open()
    try:
        history = StoreHistory(store, Journal(), 7, Report)
        assert await history.previous("pair-a") is None, "nothing measured yet"
        await history.record(Report(setup_key="pair-a", tok_s=27.1))
        await store.add_bench(8, OtherKind(setup_key="pair-a", gbps=93.0).model_dump_json())
        await store.add_bench(9, '{"setup_key": "pair-a", "tok_s": 26.0, "removed_field": 1}')
        await store.add_bench(10, Report(setup_key="pair-b", tok_s=11.0).model_dump_json())
        found = await history.previous("pair-a")
        assert found == Report(setup_key="pair-a", tok_s=27.1)
        fabric = StoreHistory(store, Journal(), 11, OtherKind)
        assert await fabric.previous("pair-a") == OtherKind(setup_key="pair-a", gbps=93.0)
    finally:
        await store.close()
