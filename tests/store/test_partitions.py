"""The daily partitions of ``events`` against real Postgres (migration 0015, store/partitions).

The writer never fails on a day without a partition (it creates it, for any age of event);
de-duplication holds across partitions (``event_ids``): the same event_id at another ts is a
duplicate, with another body a conflicting duplicate, and the first row stays.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, date, datetime, timedelta

import asyncpg

from monitor.contract.limits import MIN_TS
from monitor.ingest.rows import event_row
from monitor.ingest.writer import EventWriter
from monitor.store import partitions
from monitor.store.engine import libpq_url, make_engine
from tests.db import fetch
from tests.factories import T0, event
from tests.migrations import load_migration

T0_DAY = T0.date()


async def days_and_rows(url: str) -> tuple[list[date], list[tuple[str, date, str]]]:
    engine = make_engine(url)
    try:
        async with engine.connect() as conn:
            days = await partitions.partition_days(conn)
    finally:
        await engine.dispose()
    rows = await fetch(
        url,
        "SELECT e.event_id, (e.ts AT TIME ZONE 'UTC')::date AS day, c.relname"
        " FROM events e JOIN pg_inherits i ON i.inhrelid = e.tableoid"
        " JOIN pg_class c ON c.oid = i.inhparent ORDER BY 1",  # the day (a leaf's parent)
    )
    return days, [(r["event_id"], r["day"], r["relname"]) for r in rows]


async def test_writer_creates_the_partition_of_any_day(database_url: str) -> None:
    old = event("old", "c-old", at=(datetime(1, 1, 2, 12, tzinfo=UTC) - T0).total_seconds())
    assert old.ts.date() == MIN_TS.date()  # the oldest day the contract accepts
    ahead = event("ahead", "c-new", at=86400 * 3 + 5)
    today = event("today", "c-new", at=5)
    writer = EventWriter(database_url)
    try:
        result = await writer.write([event_row(e) for e in (old, ahead, today)])
        assert result.inserted == 3
        again = await writer.write([event_row(e) for e in (old, ahead, today)])  # days exist
        assert (again.inserted, again.duplicates) == (0, 3)
    finally:
        await writer.close()
    days, rows = await days_and_rows(database_url)
    assert days == [date(1, 1, 2), T0_DAY, T0_DAY + timedelta(days=3)]
    assert rows == [
        ("ahead", T0_DAY + timedelta(days=3), "events_20260104"),
        ("old", date(1, 1, 2), "events_00010102"),
        ("today", T0_DAY, "events_20260101"),
    ]


async def test_two_writers_creating_the_same_day_both_succeed(database_url: str) -> None:
    """Two transactions need the same missing day at once (two workers, or two batches in
    flight): the second waits for the first's partition and uses it instead of failing with
    "relation already exists" (its catalog view predates the first's commit)."""
    first = await asyncpg.connect(libpq_url(database_url))
    second = await asyncpg.connect(libpq_url(database_url))
    day = date(2031, 5, 17)
    try:
        tx = first.transaction()
        await tx.start()
        assert await first.fetchval(partitions.ENSURE_DAYS, [day]) == 1
        async with second.transaction():
            waiting = asyncio.ensure_future(second.fetchval(partitions.ENSURE_DAYS, [day]))
            await asyncio.sleep(0.3)
            assert not waiting.done()  # serialized behind the first's creation
            await tx.commit()
            assert await asyncio.wait_for(waiting, 10) == 0  # found it, created nothing
    finally:
        await first.close()
        await second.close()
    days, _ = await days_and_rows(database_url)
    assert days == [day]


async def test_a_write_does_not_queue_behind_another_writes_new_day(database_url: str) -> None:
    """Two batches in flight need the same day that has no partition: the first creates it in a
    short transaction of its own, so the second runs while the first's transaction is still
    open. (Created inside the first's transaction, the partition stayed invisible to the second
    until that commit, and the second waited for the whole first write.)"""
    holder = await asyncpg.connect(libpq_url(database_url))
    writer = EventWriter(database_url)
    day_later = 86400 * 400  # a day no test created
    try:
        # the first write stops at its conversation lock, after its day and COPYs, held here
        await holder.execute("SELECT pg_advisory_lock(7301, hashtext('c-held'))")
        first = asyncio.ensure_future(
            writer.write([event_row(event("held", "c-held", at=day_later + 1))])
        )
        await asyncio.sleep(0.5)
        assert not first.done()
        second = await asyncio.wait_for(
            writer.write([event_row(event("free", "c-free", at=day_later + 2))]), 10
        )
        assert second.inserted == 1
        assert not first.done()  # the second finished while the first was still in flight
        await holder.execute("SELECT pg_advisory_unlock(7301, hashtext('c-held'))")
        assert (await asyncio.wait_for(first, 10)).inserted == 1
    finally:
        await holder.close()
        await writer.close()
    days, rows = await days_and_rows(database_url)
    assert days == [T0_DAY + timedelta(days=400)]
    assert [r[0] for r in rows] == ["free", "held"]


async def test_duplicates_across_partitions(database_url: str) -> None:
    first = event("e1", "c1", at=10, content="first")
    same_other_day = first.model_copy(update={"ts": first.ts + timedelta(days=2)})
    changed_other_day = event("e1", "c1", at=86400 * 5, content="changed")
    writer = EventWriter(database_url)
    try:
        assert (await writer.write([event_row(first)])).inserted == 1
        dup = await writer.write([event_row(same_other_day, 0, 7)])
        assert (dup.inserted, dup.duplicates, dup.conflicting) == (0, 0, 1)  # body has ts
        clash = await writer.write([event_row(changed_other_day, 0, 8)])
        assert (clash.inserted, clash.duplicates, clash.conflicting) == (0, 0, 1)
        same = await writer.write([event_row(first, 0, 9)])
        assert (same.inserted, same.duplicates, same.conflicting) == (0, 1, 0)
    finally:
        await writer.close()
    _, rows = await days_and_rows(database_url)
    assert rows == [("e1", T0_DAY, "events_20260101")]  # the first stays, in its day
    conn = await asyncpg.connect(libpq_url(database_url))
    try:
        dead = await conn.fetch(
            "SELECT reason, source_offset FROM dead_letters ORDER BY source_offset"
        )
        count = await conn.fetchval("SELECT event_count FROM conversations")
    finally:
        await conn.close()
    assert [(d["reason"], d["source_offset"]) for d in dead] == [
        ("conflicting_duplicate", 7),
        ("conflicting_duplicate", 8),
    ]
    assert count == 1  # neither duplicate reached the roll-up


def test_partition_names_round_trip() -> None:
    for day in (date(1, 1, 2), date(2026, 11, 23), date(9999, 12, 31)):
        assert partitions.day_of(partitions.partition_name(day)) == day
    assert partitions.day_of("events_default") is None
    assert partitions.day_of("event_ids") is None
    assert partitions.ahead(date(2026, 12, 30), 2) == [
        date(2026, 12, 30),
        date(2026, 12, 31),
        date(2027, 1, 1),
    ]


def test_migration_0022_downgrades_to_0015s_function() -> None:
    """0022's downgrade re-creates ensure_event_partitions exactly as 0015 wrote it."""
    old = load_migration("0015_partitioned_events").ENSURE
    new = load_migration("0022_concurrent_partition_creation").ensure
    assert " ".join(new(tolerant=False).split()) == " ".join(
        old.replace("CREATE FUNCTION", "CREATE OR REPLACE FUNCTION").split()
    )
    assert "duplicate_table" in new(tolerant=True)
