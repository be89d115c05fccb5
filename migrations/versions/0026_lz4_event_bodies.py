"""Event bodies are compressed with lz4: ``events.body`` (the parent, every day partition, and
the partitions ``ensure_event_partitions`` creates from now on) and ``dead_letters.raw``.

Postgres compresses a value only when its row passes the TOAST threshold (about 2 kB), so small
events are stored as before; large ones (tool results, long messages) are written with less CPU
than pglz's and kept in about the same bytes (docs/benchmarks.md "Body compression"). Values
stored before keep their pglz compression until rewritten; both are read alike.

A partition made by ``CREATE TABLE ... (LIKE events)`` does not take the parent's column
compression (nor does ATTACH PARTITION give it), so the function now copies it with
``INCLUDING COMPRESSION``. ``ALTER TABLE events ... SET COMPRESSION`` does not recurse into
existing partitions: each is altered.

On a server without lz4 (Postgres < 14, or built without it) the upgrade changes nothing and
logs why. The downgrade restores the default compression and 0022's function.

Revision ID: 0026
Revises: 0025
Create Date: 2026-11-27 16:00:00
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0026"
down_revision: str | None = "0025"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

SCHEMA = "event_partitions"
PARTITION_LOCK = "7302, 0"  # advisory lock (two int4 keys) serializing partition creation
LZ4 = (
    "SELECT coalesce(bool_or('lz4' = ANY(enumvals)), false) FROM pg_settings"
    " WHERE name = 'default_toast_compression'"
)
PARTITIONS = """
SELECT format('%I.%I', n.nspname, c.relname) FROM pg_inherits i
JOIN pg_class c ON c.oid = i.inhrelid JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE i.inhparent = 'public.events'::regclass ORDER BY 1"""

log = logging.getLogger("alembic.runtime.migration")


def ensure(compression: bool) -> str:
    """The function as 0022 wrote it (``compression`` False) or as this revision does."""
    like = "INCLUDING DEFAULTS INCLUDING CONSTRAINTS" + (
        " INCLUDING COMPRESSION" if compression else ""
    )
    return f"""
CREATE OR REPLACE FUNCTION ensure_event_partitions(days date[]) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
  d date;
  part text;
  created integer := 0;
BEGIN
  -- held to the end of the caller's transaction: a partition found here cannot be dropped
  -- (drop_event_partitions needs ACCESS EXCLUSIVE) before the caller's insert into it
  LOCK TABLE public.events IN ROW EXCLUSIVE MODE;
  FOREACH d IN ARRAY coalesce(days, '{{}}'::date[]) LOOP
    part := 'events_' || to_char(d, 'YYYYMMDD');
    IF to_regclass('{SCHEMA}.' || part) IS NULL THEN
      PERFORM pg_advisory_xact_lock({PARTITION_LOCK});
      IF to_regclass('{SCHEMA}.' || part) IS NULL THEN
        BEGIN
        EXECUTE format('CREATE TABLE {SCHEMA}.%I '
                       '(LIKE public.events {like})', part);
        EXECUTE format(
          'ALTER TABLE public.events ATTACH PARTITION {SCHEMA}.%I FOR VALUES FROM (%L) TO (%L)',
          part, to_char(d, 'YYYY-MM-DD') || ' 00:00:00+00',
          to_char(d + 1, 'YYYY-MM-DD') || ' 00:00:00+00');
        created := created + 1;
        EXCEPTION WHEN duplicate_table OR unique_violation THEN
          NULL;  -- created and attached by a transaction that committed while we waited
        END;
      END IF;
    END IF;
  END LOOP;
  RETURN created;
END
$$"""


def _set(method: str) -> None:
    conn = op.get_bind()
    tables = ["public.events", *conn.execute(sa.text(PARTITIONS)).scalars()]
    for table in tables:
        op.execute(f"ALTER TABLE {table} ALTER COLUMN body SET COMPRESSION {method}")
    op.execute(f"ALTER TABLE dead_letters ALTER COLUMN raw SET COMPRESSION {method}")


def upgrade() -> None:
    if not op.get_bind().execute(sa.text(LZ4)).scalar():
        log.warning("0026: this Postgres has no lz4 compression: event bodies stay on pglz")
        return
    _set("lz4")
    op.execute(ensure(compression=True))


def downgrade() -> None:
    version = op.get_bind().execute(sa.text("SHOW server_version_num")).scalar()
    if int(str(version)) >= 140000:  # SET COMPRESSION exists from 14 on
        _set("default")
    op.execute(ensure(compression=False))
