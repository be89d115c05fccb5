"""unsampled events in their own leaf of each day: ``events.kept`` and LIST sub-partitions

``events`` gains ``kept boolean NOT NULL DEFAULT true``: false for an event of a conversation
outside the sample (not sampled by rate, no always-sample rule fired yet, not a gate event).
Each daily partition ``event_partitions.events_YYYYMMDD`` becomes a table partitioned by
``LIST (kept)`` with two leaves, ``events_YYYYMMDD_k`` (true) and ``events_YYYYMMDD_u`` (false),
so the retention job empties the unsampled leaf of a day with one TRUNCATE (a new empty file: no
row-by-row delete, no vacuum debt) once nothing was written into it for
``retention_unsampled_hours``, and a promotion (an always-sample rule firing later) moves the
conversation's rows from ``_u`` to ``_k`` with an UPDATE of ``kept`` (row movement between
partitions) in the batch's transaction.

Functions: ``ensure_event_partitions(date[])`` now creates a day as the partitioned table and
its two leaves (then attaches it: SHARE UPDATE EXCLUSIVE on ``events``, as before);
``truncate_unsampled_events(timestamptz)`` empties every non-empty ``_u`` leaf with no row
ingested at or after the given instant (checked again under the leaf's ACCESS EXCLUSIVE lock,
so a write committed meanwhile keeps it) and returns how many. ``drop_event_partitions`` is
unchanged (dropping a day drops both leaves).

The upgrade turns every existing day into the new shape: its table becomes the ``_k`` leaf (all
stored rows are kept: ``kept`` defaults to true) of a new partitioned day. The downgrade moves
the ``_u`` rows back into the ``_k`` table, makes that the plain day partition again, restores
0026's function and drops the column.

Revision ID: 0027
Revises: 0026
Create Date: 2026-11-27 18:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0027"
down_revision: str | None = "0026"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

SCHEMA = "event_partitions"
PARTITION_LOCK = "7302, 0"  # advisory lock (two int4 keys) serializing partition creation
DAYS = f"""
SELECT c.relname FROM pg_inherits i
JOIN pg_class c ON c.oid = i.inhrelid JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE i.inhparent = 'public.events'::regclass AND n.nspname = '{SCHEMA}'
  AND c.relname ~ '^events_[0-9]{{8}}$' ORDER BY 1"""
LZ4 = (
    "SELECT attcompression = 'l' FROM pg_attribute"
    " WHERE attrelid = 'public.events'::regclass AND attname = 'body'"
)


def ensure(split: bool, compression: bool) -> str:
    """The function as 0026 wrote it (``split`` False) or as this revision does."""
    like = "INCLUDING DEFAULTS INCLUDING CONSTRAINTS" + (
        " INCLUDING COMPRESSION" if compression else ""
    )
    create = f"""
        EXECUTE format('CREATE TABLE {SCHEMA}.%I (LIKE public.events {like})', part);"""
    if split:
        create = f"""
        EXECUTE format('CREATE TABLE {SCHEMA}.%I (LIKE public.events {like})'
                       ' PARTITION BY LIST (kept)', part);
        EXECUTE format('CREATE TABLE {SCHEMA}.%I PARTITION OF {SCHEMA}.%I FOR VALUES IN (true)',
                       part || '_k', part);
        EXECUTE format('CREATE TABLE {SCHEMA}.%I PARTITION OF {SCHEMA}.%I FOR VALUES IN (false)',
                       part || '_u', part);"""
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
        BEGIN{create}
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


TRUNCATE = f"""
CREATE FUNCTION truncate_unsampled_events(idle_since timestamptz) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
  r record;
  busy boolean;
  emptied integer := 0;
BEGIN
  FOR r IN
    SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
    WHERE n.nspname = '{SCHEMA}' AND c.relname ~ '^events_[0-9]{{8}}_u$' AND c.relkind = 'r'
    ORDER BY c.relname
  LOOP
    -- kept while anything was written into it within the window (or it is empty already);
    -- checked again under the lock, after the writes in flight into it committed
    EXECUTE format('SELECT NOT EXISTS (SELECT 1 FROM {SCHEMA}.%I)'
                   ' OR EXISTS (SELECT 1 FROM {SCHEMA}.%I WHERE ingested_at >= %L)',
                   r.relname, r.relname, idle_since) INTO busy;
    IF NOT busy THEN
      EXECUTE format('LOCK TABLE {SCHEMA}.%I IN ACCESS EXCLUSIVE MODE', r.relname);
      EXECUTE format('SELECT EXISTS (SELECT 1 FROM {SCHEMA}.%I WHERE ingested_at >= %L)',
                     r.relname, idle_since) INTO busy;
    END IF;
    IF NOT busy THEN
      EXECUTE format('TRUNCATE {SCHEMA}.%I', r.relname);
      emptied := emptied + 1;
    END IF;
  END LOOP;
  RETURN emptied;
END
$$"""


def upgrade() -> None:
    conn = op.get_bind()
    lz4 = bool(conn.execute(sa.text(LZ4)).scalar())
    op.execute("ALTER TABLE events ADD COLUMN kept boolean NOT NULL DEFAULT true")
    like = "INCLUDING DEFAULTS INCLUDING CONSTRAINTS" + (" INCLUDING COMPRESSION" if lz4 else "")
    for day in list(conn.execute(sa.text(DAYS)).scalars()):
        bounds = conn.execute(
            sa.text(
                "SELECT pg_get_expr(c.relpartbound, c.oid) FROM pg_class c"
                " WHERE c.oid = to_regclass(:t)"
            ),
            {"t": f"{SCHEMA}.{day}"},
        ).scalar_one()
        op.execute(f"ALTER TABLE events DETACH PARTITION {SCHEMA}.{day}")
        op.execute(f"ALTER TABLE {SCHEMA}.{day} RENAME TO {day}_k")
        op.execute(f"CREATE TABLE {SCHEMA}.{day} (LIKE events {like}) PARTITION BY LIST (kept)")
        op.execute(f"ALTER TABLE {SCHEMA}.{day}_k ADD CONSTRAINT {day}_kept CHECK (kept)")
        op.execute(
            f"ALTER TABLE {SCHEMA}.{day} ATTACH PARTITION {SCHEMA}.{day}_k FOR VALUES IN (true)"
        )
        op.execute(f"ALTER TABLE {SCHEMA}.{day}_k DROP CONSTRAINT {day}_kept")
        op.execute(
            f"CREATE TABLE {SCHEMA}.{day}_u PARTITION OF {SCHEMA}.{day} FOR VALUES IN (false)"
        )
        op.execute(f"ALTER TABLE events ATTACH PARTITION {SCHEMA}.{day} {bounds}")
    op.execute(ensure(split=True, compression=lz4))
    op.execute(TRUNCATE)


def downgrade() -> None:
    conn = op.get_bind()
    lz4 = bool(conn.execute(sa.text(LZ4)).scalar())
    op.execute("DROP FUNCTION truncate_unsampled_events(timestamptz)")
    for day in list(conn.execute(sa.text(DAYS)).scalars()):
        bounds = conn.execute(
            sa.text(
                "SELECT pg_get_expr(c.relpartbound, c.oid) FROM pg_class c"
                " WHERE c.oid = to_regclass(:t)"
            ),
            {"t": f"{SCHEMA}.{day}"},
        ).scalar_one()
        op.execute(f"ALTER TABLE events DETACH PARTITION {SCHEMA}.{day}")
        op.execute(f"ALTER TABLE {SCHEMA}.{day} DETACH PARTITION {SCHEMA}.{day}_k")
        op.execute(f"INSERT INTO {SCHEMA}.{day}_k SELECT * FROM {SCHEMA}.{day}_u")
        op.execute(f"DROP TABLE {SCHEMA}.{day}")  # and its _u leaf
        op.execute(f"ALTER TABLE {SCHEMA}.{day}_k RENAME TO {day}")
        op.execute(f"ALTER TABLE events ATTACH PARTITION {SCHEMA}.{day} {bounds}")
    op.execute(ensure(split=False, compression=lz4))
    op.execute("ALTER TABLE events DROP COLUMN kept")
