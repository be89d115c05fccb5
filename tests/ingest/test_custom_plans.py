"""The writer's connections plan every execution with its parameters (``plan_cache_mode =
force_custom_plan``): a generic plan of the items statement, made without the arrays of
conversation ids, took 6.3 s per batch instead of ~0.1 s on a 1M-item store (docs/scaling.md)."""

from __future__ import annotations

from monitor.ingest.writer import EventWriter


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
            plan = "\n".join(r[0] for r in await conn.fetch(
                "EXPLAIN EXECUTE " + st.get_name() + "('{c1}')"))
            assert "$1" not in plan  # planned with the value, not a placeholder
    finally:
        await writer.close()
