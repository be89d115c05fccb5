"""Engines and databases: async engine creation, database create/drop, migrations.

Nothing connects at import time. URLs may be given as postgres://, postgresql:// or
postgresql+asyncpg://; they are normalized to the asyncpg driver.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import asyncpg
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from monitor.config import normalize_db_url

#: Session settings of the writers' connections. asyncpg prepares and caches every statement;
#: after five executions Postgres may switch a prepared statement to a generic plan, made
#: without the arrays of conversation ids. Measured on a 1M-item store: the relabel step of the
#: items statement went from ~110 ms to 6.3 s per batch on the sixth execution (a generic plan
#: over all of ``items``); with custom plans it stayed at ~110 ms, for a few ms of planning
#: (~11 ms since it filters by one id array, monitor/ingest/items_sql.py "Plans").
CUSTOM_PLANS = {"plan_cache_mode": "force_custom_plan"}


def make_engine(url: str, pool_size: int = 5) -> AsyncEngine:
    """An AsyncEngine on ``url`` with pre-ping (a restarted Postgres is reconnected to)."""
    return create_async_engine(normalize_db_url(url), pool_size=pool_size, pool_pre_ping=True)


def libpq_url(url: str) -> str:
    """``url`` as a plain postgresql:// URL for asyncpg.connect / psql."""
    return normalize_db_url(url).replace("postgresql+asyncpg://", "postgresql://", 1)


def with_database(url: str, database: str) -> str:
    """``url`` pointing at another database on the same server."""
    return (
        make_url(normalize_db_url(url)).set(database=database).render_as_string(hide_password=False)
    )


async def ensure_database(url: str) -> bool:
    """Create the database named in ``url`` if missing (via ``postgres``); True if created."""
    name = make_url(normalize_db_url(url)).database
    if not name:
        raise ValueError("database URL names no database")
    admin = await asyncpg.connect(libpq_url(with_database(url, "postgres")))
    try:
        exists = await admin.fetchval("SELECT 1 FROM pg_database WHERE datname = $1", name)
        if exists:
            return False
        await admin.execute(f'CREATE DATABASE "{name}"')
        return True
    finally:
        await admin.close()


async def drop_database(url: str) -> None:
    """Drop the database named in ``url``, disconnecting its sessions first."""
    name = make_url(normalize_db_url(url)).database
    admin = await asyncpg.connect(libpq_url(with_database(url, "postgres")))
    try:
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        await admin.close()


async def wait_for_database(url: str, timeout_s: float = 30.0) -> None:
    """Return once ``SELECT 1`` succeeds on ``url``; raise the last error after ``timeout_s``."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while True:
        try:
            conn = await asyncpg.connect(libpq_url(url), timeout=5)
            await conn.close()
            return
        except (OSError, asyncpg.PostgresError):
            if loop.time() > deadline:
                raise
            await asyncio.sleep(0.2)


def migrations_dir() -> Path:
    """The Alembic script directory: beside the source tree, else ./migrations."""
    here = Path(__file__).resolve().parents[2] / "migrations"
    return here if here.is_dir() else Path.cwd() / "migrations"


def alembic_config(url: str) -> object:
    """An Alembic Config bound to ``url`` (without reading alembic.ini's logging setup)."""
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(migrations_dir()))
    cfg.attributes["database_url"] = normalize_db_url(url)
    return cfg


def upgrade(url: str, revision: str = "head") -> None:
    """Run migrations up to ``revision`` (synchronous; env.py runs its own event loop)."""
    from alembic import command

    command.upgrade(alembic_config(url), revision)  # type: ignore[arg-type]


def downgrade(url: str, revision: str = "base") -> None:
    """Run migrations down to ``revision``."""
    from alembic import command

    command.downgrade(alembic_config(url), revision)  # type: ignore[arg-type]
