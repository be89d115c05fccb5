"""The direct write (``monitor.ingest.direct_sql``) stores exactly what the staging path stores.

A batch whose event ids are all new is COPYed straight into ``events`` and its roll-ups read
the payload fields ``event_row`` took from the event, instead of the body the database parses
on the staging path. Here the same simulated traffic (messages with tool calls, escalations,
outcomes of every source, feedback), in shuffled batches, is written once with the default
writer and once with every batch staged (``direct=False``), into two databases, and every table
the write maintains is compared row by row. Then what must not take the direct path: a batch
holding an id that is stored already (it claims nothing, not even its new ids, and the staging
path stores the rest), an id twice in one batch, and the same batch written by two writers at
once (one stores it, the other finds every id taken).
"""

from __future__ import annotations

import asyncio
import random
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import asyncpg

from monitor.ingest.direct_sql import COMPUTED, ROLLUP_COLUMNS
from monitor.ingest.rollup_sql import INSERTED, delay_bucket_sql
from monitor.ingest.rows import ROLLUP_FIELDS, ROW_FIELDS, event_row
from monitor.ingest.writer import EventWriter
from monitor.sim.traffic import Simulator
from monitor.store.engine import libpq_url

TOOL_CALLS = ROW_FIELDS.index("tool_calls")
WRITE_TIMES = {"ingested_at", "updated_at", "labelled_at", "created_at"}
# every table the batch write keeps; the two keyed by ingest time are compared without it
# (the two stores were written at different moments) and with a recomputation from the events
TABLES = (
    "events",
    "event_ids",
    "conversations",
    "items",
    "item_hours",
    "design_hours",
    "label_hours",
    "calibration_bins",
    "escalation_bins",
    "conversation_minutes",
    "segment_values",
)
BY_INGEST_TIME = {
    "event_minutes": "SELECT type, agent_id, domain, tier, sum(events) FROM event_minutes"
    " GROUP BY 1, 2, 3, 4",
    "ingest_delay_bins": "SELECT sum(events) FROM ingest_delay_bins",
}
_MINUTE = "date_trunc('minute', ingested_at, 'UTC')"
RECOMPUTED = {  # (stored, recomputed from events)
    "event_minutes": (
        "SELECT minute, type, agent_id, domain, tier, events FROM event_minutes",
        f"SELECT {_MINUTE}, type, agent_id, coalesce(domain, ''), coalesce(tier, 0), count(*)"
        " FROM events GROUP BY 1, 2, 3, 4, 5",
    ),
    "ingest_delay_bins": (
        "SELECT minute, bucket, events FROM ingest_delay_bins",
        f"SELECT {_MINUTE}, {delay_bucket_sql('extract(epoch FROM ingested_at - ts)::float8')},"
        " count(*) FROM events GROUP BY 1, 2",
    ),
}


def _norm(value: object) -> object:
    return float(f"{value:.9g}") if isinstance(value, float) else value


async def dump(url: str) -> dict[str, list[tuple[object, ...]]]:
    """Every row of the write's tables, write times left out, floats to 9 digits, sorted."""
    conn = await asyncpg.connect(libpq_url(url))
    try:
        out = {}
        for table in TABLES:
            cols = [
                r[0]
                for r in await conn.fetch(
                    "SELECT column_name FROM information_schema.columns WHERE table_name = $1"
                    " AND table_schema = 'public' ORDER BY ordinal_position",
                    table,
                )
            ]
            query = f"SELECT {', '.join(c for c in cols if c not in WRITE_TIMES)} FROM {table}"
            out[table] = await conn.fetch(query)
        for table, query in BY_INGEST_TIME.items():
            out[table] = await conn.fetch(query)
        for table, (stored, recomputed) in RECOMPUTED.items():
            assert sorted(await conn.fetch(stored)) == sorted(await conn.fetch(recomputed)), table
    finally:
        await conn.close()
    return {
        t: sorted((tuple(_norm(v) for v in r) for r in rows), key=repr) for t, rows in out.items()
    }


def traffic(seed: int, n: int) -> list[list[tuple[object, ...]]]:
    """``n`` simulated events of the last two hours as rows, shuffled into batches of 1-250."""
    now = datetime.now(UTC).replace(microsecond=0)
    sim = Simulator(seed=seed, start=now - timedelta(hours=2), interval=timedelta(seconds=9))
    rows = [event_row(e) for e in sim.events(n) if e.ts <= now]
    rng = random.Random(seed)
    rng.shuffle(rows)
    batches, i = [], 0
    while i < len(rows):
        size = rng.choice((1, 9, 120, 250))
        batches.append(rows[i : i + size])
        i += size
    return batches


def test_the_direct_statement_has_every_column_the_roll_ups_read() -> None:
    assert set(ROLLUP_FIELDS) <= set(ROLLUP_COLUMNS)
    assert {name for name, _ in INSERTED} - set(COMPUTED) <= set(ROLLUP_COLUMNS)


async def test_direct_and_staged_writes_store_the_same_rows(
    database_url: str, second_database_url: str
) -> None:
    batches = traffic(seed=23, n=2500)
    kinds = {r[2] for b in batches for r in b}
    assert {"message", "tool_result", "escalation", "outcome"} <= kinds
    assert any(r[TOOL_CALLS] for b in batches for r in b)  # messages with tool calls
    direct, staged = EventWriter(database_url), EventWriter(second_database_url, direct=False)
    try:
        for batch in batches:
            a, b = await direct.write(batch), await staged.write(batch)
            assert (a.staged, b.staged) == (0, 1)
            assert replace(a, staged=1) == b
    finally:
        await direct.close()
        await staged.close()
    got, want = await dump(database_url), await dump(second_database_url)
    assert len(got["events"]) == sum(map(len, batches))
    assert len(got["escalation_bins"]) > 20 and len(got["calibration_bins"]) > 20
    for table in want:
        assert got[table] == want[table], table


async def test_a_batch_with_a_stored_id_claims_nothing_and_is_staged(database_url: str) -> None:
    first, second = traffic(seed=5, n=400)[:2]
    again = [*second, first[0]]  # one id stored already
    twice = traffic(seed=6, n=60)[0]
    twice = [*twice, twice[0]]  # the same event twice in one batch
    writer = EventWriter(database_url)
    try:
        result = await writer.write(first)
        assert (result.inserted, result.staged) == (len(first), 0)
        result = await writer.write(again)
        assert (result.inserted, result.duplicates, result.staged) == (len(second), 1, 1)
        result = await writer.write(twice)
        assert (result.inserted, result.duplicates, result.staged) == (len(twice) - 1, 1, 1)
    finally:
        await writer.close()
    conn = await asyncpg.connect(libpq_url(database_url))
    try:
        stored = len(first) + len(second) + len(twice) - 1
        assert await conn.fetchval("SELECT count(*) FROM events") == stored
        assert await conn.fetchval("SELECT count(*) FROM event_ids") == stored
        assert await conn.fetchval("SELECT sum(event_count) FROM conversations") == stored
    finally:
        await conn.close()


async def test_two_writers_with_the_same_batch_at_once(database_url: str) -> None:
    batch = [r for b in traffic(seed=8, n=900) for r in b]
    writers = [EventWriter(database_url), EventWriter(database_url)]
    try:
        results = await asyncio.gather(*(w.write(batch) for w in writers))
    finally:
        for w in writers:
            await w.close()
    assert sorted(r.inserted for r in results) == [0, len(batch)]
    assert sorted(r.duplicates for r in results) == [0, len(batch)]
    assert sorted(r.staged for r in results) == [0, 1]  # one direct, one staged
    conn = await asyncpg.connect(libpq_url(database_url))
    try:
        assert await conn.fetchval("SELECT count(*) FROM events") == len(batch)
        assert await conn.fetchval("SELECT sum(event_count) FROM conversations") == len(batch)
        assert await conn.fetchval("SELECT count(*) FROM dead_letters") == 0
    finally:
        await conn.close()
