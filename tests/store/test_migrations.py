"""Alembic migrations against real Postgres: up, down, up again, and no drift from the models."""

from __future__ import annotations

import asyncio

import asyncpg
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy.ext.asyncio import create_async_engine

from monitor.ingest.rows import EVENT_COLUMNS
from monitor.store.engine import downgrade, libpq_url, upgrade
from monitor.store.schema import metadata


async def tables(url: str) -> set[str]:
    conn = await asyncpg.connect(libpq_url(url))
    try:
        rows = await conn.fetch(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = 'public'"
        )
    finally:
        await conn.close()
    return {r["table_name"] for r in rows}


async def test_upgrade_downgrade_upgrade(database_url: str):
    assert {"events", "conversations", "dead_letters", "alembic_version"} <= await tables(
        database_url
    )
    await asyncio.to_thread(downgrade, database_url, "base")
    assert await tables(database_url) == {"alembic_version"}
    await asyncio.to_thread(upgrade, database_url, "head")
    assert {"events", "conversations", "dead_letters"} <= await tables(database_url)


async def test_autogenerate_finds_no_difference(database_url: str):
    engine = create_async_engine(database_url)
    try:
        async with engine.connect() as conn:
            diff = await conn.run_sync(
                lambda sync: compare_metadata(
                    MigrationContext.configure(sync, opts={"compare_type": True}), metadata
                )
            )
    finally:
        await engine.dispose()
    assert diff == []


async def readonly_can(url: str, sql: str) -> bool | None:
    """Run ``sql`` as the role monitor_readonly: True when allowed, False when refused for lack
    of privileges, None when the role does not exist (any other error propagates)."""
    conn = await asyncpg.connect(libpq_url(url))
    try:
        if not await conn.fetchval("SELECT 1 FROM pg_roles WHERE rolname = 'monitor_readonly'"):
            return None
        async with conn.transaction():
            await conn.execute("SET LOCAL ROLE monitor_readonly")
            try:
                async with conn.transaction():
                    await conn.execute(sql)
            except asyncpg.InsufficientPrivilegeError:
                return False
        return True
    finally:
        await conn.close()


async def test_readonly_role_reads_everything_and_writes_nothing(database_url: str) -> None:
    """Migration 0010: Grafana's group role selects tables and views (also ones created by a
    later migration), cannot write; its downgrade takes the privileges away; up again restores
    them."""
    select_view = "SELECT count(*) FROM v_calibration_bins"
    assert await readonly_can(database_url, "SELECT count(*) FROM events") is True
    assert await readonly_can(database_url, select_view) is True
    assert await readonly_can(database_url, "DELETE FROM events") is False
    assert await readonly_can(database_url, "INSERT INTO alert_silences DEFAULT VALUES") is False
    conn = await asyncpg.connect(libpq_url(database_url))
    try:  # a table a later migration would add (same migrating role)
        await conn.execute("CREATE TABLE later_table (x int)")
    finally:
        await conn.close()
    assert await readonly_can(database_url, "SELECT * FROM later_table") is True

    await asyncio.to_thread(downgrade, database_url, "0006")
    assert await readonly_can(database_url, "SELECT count(*) FROM events") in (False, None)
    await asyncio.to_thread(upgrade, database_url, "head")
    assert await readonly_can(database_url, "SELECT count(*) FROM events") is True
    assert await readonly_can(database_url, select_view) is True


async def _events(url: str) -> list[tuple[object, ...]]:
    conn = await asyncpg.connect(libpq_url(url))
    try:
        cols = ", ".join((*EVENT_COLUMNS, "ingested_at"))  # the columns of every revision
        return [tuple(r) for r in await conn.fetch(f"SELECT {cols} FROM events ORDER BY 1")]
    finally:
        await conn.close()


async def test_partitioning_converts_a_store_with_data_both_ways(database_url: str) -> None:
    """Migration 0015 with data: down to a plain table (0013) and up to the partitioned one
    again keeps every row, and the de-duplication key is rebuilt (a replay inserts nothing)."""
    from datetime import timedelta

    from monitor.ingest.rows import event_row
    from monitor.ingest.writer import EventWriter
    from monitor.sim.traffic import Simulator
    from tests.factories import T0

    sim = Simulator(seed=5, start=T0 - timedelta(days=3), interval=timedelta(minutes=30))
    rows = [event_row(e, 0, i) for i, e in enumerate(sim.events(150))]
    writer = EventWriter(database_url)
    try:
        assert (await writer.write(rows)).inserted == len(rows)
    finally:
        await writer.close()
    stored = await _events(database_url)
    assert len(stored) == len(rows) and len({str(r[3])[:10] for r in stored}) >= 4  # days

    await asyncio.to_thread(downgrade, database_url, "0013")
    assert await _events(database_url) == stored
    conn = await asyncpg.connect(libpq_url(database_url))
    try:
        kind = await conn.fetchval("SELECT relkind FROM pg_class WHERE relname = 'events'")
        assert kind in (b"r", "r")  # a plain table again, with its primary key and 4 indexes
        n = await conn.fetchval("SELECT count(*) FROM pg_indexes WHERE tablename = 'events'")
        assert n == 5
    finally:
        await conn.close()

    await asyncio.to_thread(upgrade, database_url, "head")
    assert await _events(database_url) == stored
    writer = EventWriter(database_url)
    try:
        again = await writer.write(rows)
        assert (again.inserted, again.duplicates, again.conflicting) == (0, len(rows), 0)
    finally:
        await writer.close()
    assert await _events(database_url) == stored


async def test_judge_labelling_migration_keeps_what_labelled(database_url: str) -> None:
    """Migration 0036: a judge that labelled before (no row, or a row not muted) gets a pooled
    row that labels, a muted one a row that does not, so the stored item labels stay in step
    until the worker's next measurement; downgrade gives back ``muted``."""
    await asyncio.to_thread(downgrade, database_url, "0035")
    conn = await asyncpg.connect(libpq_url(database_url))
    try:
        for judge in ("det.a", "det.b", "llm"):
            await conn.execute(
                "INSERT INTO verdicts (conversation_id, agent_id, judge, judge_version, status,"
                " label) VALUES ('c1', 'agent-a', $1, '1', 'ok', 0)",
                judge,
            )
        await conn.execute(
            "INSERT INTO judge_quality (judge, judge_version, pairs, flagged, floor, min_pairs,"
            " muted) VALUES ('det.a', '1', 40, 35, 0.7, 30, true),"
            " ('det.b', '1', 40, 5, 0.7, 30, false)"
        )
        await asyncio.to_thread(upgrade, database_url, "head")
        rows = await conn.fetch(
            "SELECT judge, agent_id, domain, decided_by, labels FROM judge_quality ORDER BY 1"
        )
        assert [tuple(r) for r in rows] == [
            ("det.a", "", "", "pooled", False),
            ("det.b", "", "", "pooled", True),
            ("llm", "", "", "pooled", True),
        ]
        await conn.execute(
            "INSERT INTO judge_quality (judge, judge_version, agent_id, domain, pairs, flagged,"
            " floor, min_pairs, decided_by, labels) VALUES"
            " ('det.a', '1', 'agent-a', 'retail', 40, 35, 0.7, 30, 'scope', true)"
        )
        await asyncio.to_thread(downgrade, database_url, "0035")
        rows = await conn.fetch("SELECT judge, muted FROM judge_quality ORDER BY 1")
        assert [tuple(r) for r in rows] == [("det.a", True), ("det.b", False), ("llm", False)]
        await asyncio.to_thread(upgrade, database_url, "head")
    finally:
        await conn.close()
