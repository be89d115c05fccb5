"""``repo.design_effects`` against real Postgres: labelled items (weight > 0) per conversation,
per group and over all groups, equal to the same figure counted in Python from the items'
rows, for the whole range and a window that cuts conversations."""

from __future__ import annotations

from collections import defaultdict
from datetime import UTC, datetime, timedelta

import asyncpg

from monitor.analytics import repo
from monitor.ingest.rows import event_row
from monitor.ingest.writer import EventWriter
from monitor.sim.traffic import Simulator
from monitor.store.engine import libpq_url, make_engine

NOW = datetime(2026, 11, 20, 12, 0, tzinfo=UTC)


def expected(rows: list[asyncpg.Record], keys: tuple[str, ...]) -> dict[tuple[object, ...], float]:
    items: dict[tuple[object, ...], int] = defaultdict(int)
    convs: dict[tuple[object, ...], set[str]] = defaultdict(set)
    for r in rows:
        for key in (tuple(r[k] for k in keys), ()):
            items[key] += 1
            convs[key].add(r["conversation_id"])
    return {k: max(1.0, items[k] / len(convs[k])) for k in items}


async def test_design_effects_equal_the_items_counted_in_python(database_url: str) -> None:
    sim = Simulator(seed=5, start=NOW - timedelta(hours=6), interval=timedelta(seconds=90))
    writer = EventWriter(database_url)
    try:
        await writer.write([event_row(e) for e in sim.events(200)])
    finally:
        await writer.close()
    engine = make_engine(database_url)
    conn = await asyncpg.connect(libpq_url(database_url))
    try:
        for lo, hi in ((NOW - timedelta(hours=7), NOW + timedelta(days=1)),
                       (NOW - timedelta(hours=3, minutes=7), NOW - timedelta(hours=1))):
            rows = await conn.fetch(
                "SELECT agent_id, domain, conversation_id FROM items WHERE label IS NOT NULL"
                " AND weight > 0 AND ts >= $1 AND ts < $2", lo, hi)
            assert len({r["conversation_id"] for r in rows}) >= 20
            for keys in (("agent_id",), ("agent_id", "domain")):
                want = expected(rows, keys)
                assert max(want.values()) > 1.0  # several items per conversation
                total = await repo.design_effects(engine, repo.Segment(), lo, hi,
                                                  group_by=keys, with_total=True)
                assert total == want
                groups = await repo.design_effects(engine, repo.Segment(), lo, hi, group_by=keys)
                assert groups == {k: v for k, v in want.items() if k != ()}
            alone = await repo.design_effects(engine, repo.Segment(), lo, hi, group_by=())
            assert alone == {(): want[()]}
    finally:
        await conn.close()
        await engine.dispose()
