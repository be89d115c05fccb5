"""One-shot reads of a test database, each on a connection of its own."""

from __future__ import annotations

from typing import Any

import asyncpg

from monitor.store.engine import libpq_url


async def fetch(url: str, sql: str, *args: Any) -> list[asyncpg.Record]:
    """The rows ``sql`` (with ``$n`` parameters ``args``) returns on the database at ``url``."""
    conn = await asyncpg.connect(libpq_url(url))
    try:
        return await conn.fetch(sql, *args)
    finally:
        await conn.close()
