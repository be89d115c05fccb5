"""Alembic migrations against real Postgres: up, down, up again, and no drift from the models."""

from __future__ import annotations

import asyncio

import asyncpg
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy.ext.asyncio import create_async_engine

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
