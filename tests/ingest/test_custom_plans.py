"""The writer's connections plan every execution with its parameters (``plan_cache_mode =
force_custom_plan``): a generic plan of the items statement, made without the arrays of
conversation ids, took 6.3 s per batch instead of ~0.1 s on a 1M-item store (docs/scaling.md)."""

from __future__ import annotations

import asyncpg

from monitor.ingest.items_sql import SYNC_ITEMS
from monitor.ingest.rollup_sql import CREATE_STAGING
from monitor.ingest.writer import EventWriter
from monitor.store.engine import CUSTOM_PLANS, libpq_url


async def test_writer_connections_use_custom_plans(database_url: str) -> None:
    writer = EventWriter(database_url)
    await writer.start()
    try:
        pool = writer._pool
        assert pool is not None
        async with pool.acquire() as conn:
            assert await conn.fetchval("SHOW plan_cache_mode") == "force_custom_plan"
            st = await conn.prepare("SELECT count(*) FROM items WHERE conversation_id = ANY($1)")
            for _ in range(7):  # past the five executions after which a generic plan may win
                await st.fetchval(["c1", "c2"])
            plan = "\n".join(
                r[0] for r in await conn.fetch("EXPLAIN EXECUTE " + st.get_name() + "('{c1}')")
            )
            assert "$1" not in plan  # planned with the value, not a placeholder
    finally:
        await writer.close()


async def test_relabel_step_reads_items_by_index_on_a_large_store(database_url: str) -> None:
    """The items statement's relabel step finds a batch's items through
    ``ix_items_conversation_id``: with both id arrays on ``items.conversation_id`` the planner
    expected a few rows, read ``items`` sequentially and nest-looped the conversations over
    them (~210 ms per batch at 1M items, growing with the table; monitor/ingest/items_sql.py)."""
    conn = await asyncpg.connect(libpq_url(database_url), server_settings=CUSTOM_PLANS)
    try:  # 60,000 conversations with two items each, analyzed (as autovacuum would)
        await conn.execute(
            "INSERT INTO conversations (conversation_id, agent_id, first_ts, last_ts,"
            " outcome_success, sample_weight)"
            " SELECT 'c' || g, 'a', now(), now(), g % 2 = 0, 1.0 FROM generate_series(1, 60000) g"
        )
        await conn.execute(
            "INSERT INTO items (event_id, conversation_id, ts, agent_id, confidence, weight)"
            " SELECT 'e' || g || '-' || k, 'c' || g, now(), 'a', 0.5, 1.0"
            " FROM generate_series(1, 60000) g, generate_series(1, 2) k"
        )
        await conn.execute("ANALYZE conversations; ANALYZE items")
        batch = [f"c{g}" for g in range(50_000, 50_700)]
        async with conn.transaction():
            await conn.execute(CREATE_STAGING)
            plan = "\n".join(
                r[0] for r in await conn.fetch("EXPLAIN " + SYNC_ITEMS, batch, batch[:650])
            )
        assert "Seq Scan on items" not in plan, plan
        assert "ix_items_conversation_id" in plan, plan
    finally:
        await conn.close()
