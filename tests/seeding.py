"""Postgres databases seeded with agent events for tests: written through the ingest writer,
created and dropped around a test or module, copied from a seeded template."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Iterable, Iterator
from contextlib import asynccontextmanager, contextmanager

import asyncpg
from sqlalchemy.ext.asyncio import AsyncEngine

from monitor.contract.events import AgentEvent
from monitor.ingest.rows import event_row
from monitor.ingest.writer import EventWriter
from monitor.store.engine import drop_database, libpq_url, make_engine, with_database

BATCH = 3000


async def write_events(url: str, events: list[AgentEvent]) -> None:
    """Store ``events`` in the migrated database at ``url`` in batches of ``BATCH`` rows."""
    w = EventWriter(url)
    try:
        for i in range(0, len(events), BATCH):
            await w.write([event_row(e) for e in events[i : i + BATCH]])
    finally:
        await w.close()


async def copy_database(template_url: str, prefix: str) -> str:
    """The URL of a new database named ``prefix_<random>``, a copy (``CREATE DATABASE ...
    TEMPLATE``) of the database at ``template_url``, which nothing may be connected to."""
    name = f"{prefix}_{uuid.uuid4().hex[:10]}"
    admin = await asyncpg.connect(libpq_url(with_database(template_url, "postgres")))
    try:
        template = template_url.rsplit("/", 1)[1]
        await admin.execute(f'CREATE DATABASE "{name}" TEMPLATE "{template}"')
    finally:
        await admin.close()
    return with_database(template_url, name)


@asynccontextmanager
async def database_copy(template_url: str, prefix: str) -> AsyncIterator[str]:
    """A copy of the database at ``template_url`` (:func:`copy_database`), dropped on exit."""
    url = await copy_database(template_url, prefix)
    try:
        yield url
    finally:
        await drop_database(url)


@asynccontextmanager
async def engine_on_copy(template_url: str, prefix: str) -> AsyncIterator[tuple[str, AsyncEngine]]:
    """A copy of the database at ``template_url`` (:func:`database_copy`) and an engine on it,
    disposed and dropped on exit."""
    async with database_copy(template_url, prefix) as url:
        engine = make_engine(url)
        try:
            yield url, engine
        finally:
            await engine.dispose()


async def seed_copy(migrated_url: str, prefix: str, events: list[AgentEvent]) -> str:
    """The URL of a copy of the migrated database at ``migrated_url`` holding ``events``."""
    url = await copy_database(migrated_url, prefix)
    await write_events(url, events)
    return url


@contextmanager
def seeded_database(migrated_url: str, prefix: str, events: Iterable[AgentEvent]) -> Iterator[str]:
    """The URL of a new database named ``prefix_<random>``, a copy of the migrated (empty)
    database at ``migrated_url`` (the ``migrated_template_url`` fixture) holding ``events``;
    dropped on exit. Synchronous, for module-scoped fixtures."""
    url = asyncio.run(seed_copy(migrated_url, prefix, list(events)))
    try:
        yield url
    finally:
        asyncio.run(drop_database(url))
