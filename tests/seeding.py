"""Postgres databases seeded with agent events for tests: written through the ingest writer,
created and dropped around a test or module, copied from a seeded template."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Iterable, Iterator
from contextlib import asynccontextmanager, contextmanager

import asyncpg

from monitor.contract.events import AgentEvent
from monitor.ingest.rows import event_row
from monitor.ingest.writer import EventWriter
from monitor.store.engine import (
    drop_database,
    ensure_database,
    libpq_url,
    upgrade,
    with_database,
)

BATCH = 3000


async def write_events(url: str, events: list[AgentEvent]) -> None:
    """Store ``events`` in the migrated database at ``url`` in batches of ``BATCH`` rows."""
    w = EventWriter(url)
    try:
        for i in range(0, len(events), BATCH):
            await w.write([event_row(e) for e in events[i : i + BATCH]])
    finally:
        await w.close()


async def seed_database(url: str, events: list[AgentEvent]) -> None:
    """Create and migrate the database at ``url``, then store ``events`` in it."""
    await ensure_database(url)
    await asyncio.to_thread(upgrade, url)
    await write_events(url, events)


@contextmanager
def seeded_database(admin_url: str, prefix: str, events: Iterable[AgentEvent]) -> Iterator[str]:
    """The URL of a new database named ``prefix_<random>`` on ``admin_url``'s server, migrated
    and holding ``events``; dropped on exit. Synchronous, for module-scoped fixtures."""
    url = with_database(admin_url, f"{prefix}_{uuid.uuid4().hex[:10]}")
    asyncio.run(seed_database(url, list(events)))
    try:
        yield url
    finally:
        asyncio.run(drop_database(url))


@asynccontextmanager
async def database_copy(template_url: str, prefix: str) -> AsyncIterator[str]:
    """The URL of a fresh copy (``CREATE DATABASE ... TEMPLATE``) of the database at
    ``template_url``, named ``prefix_<random>``; dropped on exit."""
    name = f"{prefix}_{uuid.uuid4().hex[:10]}"
    admin = await asyncpg.connect(libpq_url(with_database(template_url, "postgres")))
    try:
        template = template_url.rsplit("/", 1)[1]
        await admin.execute(f'CREATE DATABASE "{name}" TEMPLATE "{template}"')
    finally:
        await admin.close()
    url = with_database(template_url, name)
    try:
        yield url
    finally:
        await drop_database(url)
