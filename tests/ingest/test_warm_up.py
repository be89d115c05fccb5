"""EventWriter.warm: connections opened and statements prepared before the first batch, nothing
stored, and never an error or a long wait when the store is not there (real Postgres)."""

from __future__ import annotations

import time
import uuid

import asyncpg

from monitor.ingest.rows import event_row
from monitor.ingest.writer import EventWriter
from monitor.stack.ports import free_port
from monitor.store.engine import drop_database, ensure_database, libpq_url, with_database
from tests.factories import event


async def test_warm_opens_every_connection_prepares_and_stores_nothing(database_url: str) -> None:
    writer = EventWriter(database_url, pool_size=2)
    try:
        assert await writer.warm() is None
        pool = writer._pool
        assert pool is not None and pool.get_size() == 2  # both opened, before any batch
        async with pool.acquire() as conn:
            assert len(conn._stmt_cache) >= 4  # the four rehearsed statements, kept for the write
            assert not conn.is_in_transaction()
            assert await conn.fetchval("SELECT count(*) FROM conversations") == 0
            assert await conn.fetchval("SELECT count(*) FROM escalation_bins") == 0
            # nothing held: no advisory lock left behind by the rehearsal
            locks = (  # of this database: other tests may share the server
                "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND database = "
                "(SELECT oid FROM pg_database WHERE datname = current_database())"
            )
            assert await conn.fetchval(locks) == 0
        result = await writer.write([event_row(event("e1", "c1"))])
        assert result.inserted == 1 and result.staged == 0
    finally:
        await writer.close()


async def test_warm_without_a_server_returns_why_at_once() -> None:
    url = f"postgresql://postgres@127.0.0.1:{free_port()}/nothing"  # nothing listens there
    writer = EventWriter(url, pool_size=2)
    started = time.monotonic()
    try:
        why = await writer.warm(timeout_s=5)
    finally:
        await writer.close()
    assert why is not None and "Connect" in why  # ConnectionRefusedError: ...
    assert time.monotonic() - started < 5


async def test_warm_on_a_store_not_migrated_yet_returns_why(pg_admin_url: str) -> None:
    url = with_database(pg_admin_url, f"mon_test_{uuid.uuid4().hex[:10]}")
    await ensure_database(url)  # the worker may start before `monitor migrate` ran
    try:
        writer = EventWriter(url, pool_size=1)
        try:
            why = await writer.warm()
        finally:
            await writer.close()
        assert why is not None and "does not exist" in why
        conn = await asyncpg.connect(libpq_url(url))
        try:
            assert (
                await conn.fetchval(
                    "SELECT count(*) FROM pg_stat_activity "
                    "WHERE datname = current_database() "
                    "AND state = 'idle in transaction'"
                )
                == 0
            )
        finally:
            await conn.close()
    finally:
        await drop_database(url)
