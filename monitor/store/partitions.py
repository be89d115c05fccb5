"""Daily partitions of ``events`` (migration 0015): which days a batch needs, creation, listing.

``events`` is partitioned by range of ``ts``, one partition per UTC day, named
``event_partitions.events_YYYYMMDD`` (a schema of their own: the public schema holds only what
the table metadata declares). Each day is itself partitioned by ``LIST (kept)`` (migration 0027):
its leaf ``events_YYYYMMDD_k`` holds the events of the sample, ``events_YYYYMMDD_u`` the others,
which retention empties after ``retention_unsampled_hours`` (:mod:`monitor.store.retention`).
Policy:

- the worker creates today's and the next ``partitions_ahead_days`` partitions at start and at
  every retention run (:mod:`monitor.store.retention`);
- the writer never fails on a day without a partition: it runs :data:`ENSURE_DAYS` for the
  days of its batch first, in the batch's transaction, which creates any missing one (an old
  replayed event, or one ahead of the pre-created range within the accepted clock skew). A day
  it has not seen yet it creates before, in a short transaction of its own, so that a partition
  made for one batch is not invisible to the other batch in flight until the first commits
  (:mod:`monitor.ingest.writer`). There is no default partition (rows in it would block
  creating their day's partition later);
- the database function also takes ROW EXCLUSIVE on ``events`` for the rest of the
  transaction, so a partition it found cannot be dropped by a concurrent retention run before
  the insert (the drop waits for the commit);
- creation attaches an empty table (ATTACH PARTITION: SHARE UPDATE EXCLUSIVE on the parent,
  which blocks neither readers nor writers), serialized between workers by an advisory lock.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, date, datetime, timedelta

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection

SCHEMA = "event_partitions"

#: asyncpg statement: ensure the partitions of ``$1`` (date[]) exist; returns how many it made
ENSURE_DAYS = "SELECT ensure_event_partitions($1::date[])"

_ENSURE = text("SELECT ensure_event_partitions(CAST(:days AS date[]))")
_LIST = text(f"""
SELECT c.relname FROM pg_inherits i
JOIN pg_class c ON c.oid = i.inhrelid
JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE i.inhparent = 'public.events'::regclass AND n.nspname = '{SCHEMA}'
ORDER BY c.relname""")


def days_of(stamps: Iterable[datetime]) -> list[date]:
    """The distinct UTC days of ``stamps`` (aware datetimes), sorted: the partitions needed."""
    return sorted({t.astimezone(UTC).date() for t in stamps})


def partition_name(day: date) -> str:
    """The partition of ``day`` (without the schema)."""
    return f"events_{day.year:04d}{day.month:02d}{day.day:02d}"


def day_of(name: str) -> date | None:
    """The day of partition ``name`` (``None`` when it is not a day partition)."""
    digits = name.removeprefix("events_")
    if len(digits) != 8 or not digits.isdigit() or digits == name:
        return None
    return date(int(digits[:4]), int(digits[4:6]), int(digits[6:]))


def ahead(today: date, days_ahead: int) -> list[date]:
    """Today and the ``days_ahead`` following days."""
    return [today + timedelta(days=i) for i in range(days_ahead + 1)]


async def ensure(conn: AsyncConnection, days: list[date]) -> int:
    """Create the missing partitions of ``days`` in ``conn``'s transaction; returns how many."""
    return int((await conn.execute(_ENSURE, {"days": days})).scalar_one())


async def partition_days(conn: AsyncConnection) -> list[date]:
    """The days that have a partition, ascending."""
    names = [str(r[0]) for r in (await conn.execute(_LIST)).all()]
    return sorted(d for d in map(day_of, names) if d is not None)
