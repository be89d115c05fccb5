"""The batch writer's connections: how they are opened, kept and warmed before the first batch.

:func:`open_pool` makes the writer's asyncpg pool. A new connection gets the write's two
temporary tables once (``ON COMMIT DELETE ROWS``: their rows go at every commit), so a write
does not create them; a released one is not reset (asyncpg still rolls back an open
transaction): the writer takes transaction-level advisory locks only and sets nothing, and the
default reset (``pg_advisory_unlock_all(); CLOSE ALL; UNLISTEN *; RESET ALL``) cost a round
trip per write. Connections plan every execution with its parameters
(:data:`monitor.store.engine.CUSTOM_PLANS`).

A worker's first batches otherwise pay, inside the ingest path, for what later ones do not: the
pool's connections opened (TCP, authentication, the session's temporary tables), every batch
statement parsed and described by asyncpg, and the server backend's cold catalog and relation
caches. :func:`warm` does it ahead: it opens ``size`` connections of the pool and runs each
given statement once on every one, with empty arguments, in a transaction it rolls back (so
nothing is stored and no lock is held afterwards). asyncpg keeps the prepared statements in the
connection's statement cache, so the batch write reuses them.

Best effort, bounded: the store may be down or not migrated yet when a worker starts, which
the write path already handles (retries with backoff, :mod:`monitor.ingest.paused_retry`). So
:func:`warm` never raises for a store error nor waits longer than ``timeout_s``; it returns why
it stopped (for the log), or None when every connection was warmed.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence

import asyncpg

from monitor.ingest.direct_sql import CREATE_ROLLUP_TABLE
from monitor.ingest.rollup_sql import CREATE_STAGING
from monitor.store.engine import CUSTOM_PLANS

#: a statement and the (empty) arguments it is rehearsed with
Rehearsal = tuple[str, tuple[object, ...]]

WARM_TIMEOUT_S = 5.0

_STORE_ERRORS = (OSError, asyncpg.PostgresError, asyncpg.InterfaceError, TimeoutError)


async def _session(conn: asyncpg.Connection) -> None:
    await conn.execute(f"{CREATE_ROLLUP_TABLE}; {CREATE_STAGING}")


async def _keep_session(conn: asyncpg.Connection) -> None:
    """Nothing to reset (module docstring)."""


async def open_pool(dsn: str, size: int) -> asyncpg.Pool:
    """The writer's pool of at most ``size`` connections to ``dsn`` (module docstring); opens
    none yet (:func:`warm` does)."""
    pool: asyncpg.Pool = await asyncpg.create_pool(
        dsn,
        min_size=0,
        max_size=size,
        command_timeout=120,
        server_settings=CUSTOM_PLANS,
        init=_session,
        reset=_keep_session,
    )
    return pool


class _RolledBack(Exception):
    """Ends a rehearsal's transaction."""


async def rehearse(conn: asyncpg.Connection, statements: Sequence[Rehearsal]) -> None:
    """Run every statement of ``statements`` once on ``conn`` in a rolled-back transaction."""
    with contextlib.suppress(_RolledBack):
        async with conn.transaction():
            for sql, args in statements:
                await conn.fetch(sql, *args)
            raise _RolledBack


async def warm(
    pool: asyncpg.Pool,
    size: int,
    statements: Sequence[Rehearsal],
    timeout_s: float = WARM_TIMEOUT_S,
) -> str | None:
    """Open ``size`` connections of ``pool`` and rehearse ``statements`` on each (module
    docstring); returns None when done, else why it stopped (a store error, the timeout)."""
    held: list[asyncpg.Connection] = []
    try:
        async with asyncio.timeout(timeout_s):
            for _ in range(size):  # held at once, so that the pool opens `size` of them
                held.append(await pool.acquire())
            for conn in held:
                await rehearse(conn, statements)
    except _STORE_ERRORS as exc:
        return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    finally:
        for conn in held:
            await pool.release(conn)
    return None
