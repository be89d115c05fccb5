"""``ensure_event_partitions``: two transactions creating the same day both succeed

Two writers that need the same missing day at once (two workers, or a replay of an old day on
two partitions) were serialized by 0015's advisory lock, but the second one's recheck still
read the catalog as it was before the first one committed (an advisory lock does not make a
backend process catalog invalidations), so it created the table again and failed with
"relation ... already exists": its whole batch was then bisected as poison. The creation now
runs in a block that takes "already exists" (``duplicate_table``, or the catalog's unique
index when both create at the same instant) as "created by someone else": the partition is
there, attached by that other transaction's commit. The downgrade restores 0015's function.

Revision ID: 0022
Revises: 0021
Create Date: 2026-11-26 19:20:00
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0022"
down_revision: str | None = "0021"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

SCHEMA = "event_partitions"
PARTITION_LOCK = "7302, 0"  # advisory lock (two int4 keys) serializing partition creation


def ensure(tolerant: bool) -> str:
    """The function, as 0015 wrote it (``tolerant`` False) or as this revision does."""
    create = f"""
        EXECUTE format('CREATE TABLE {SCHEMA}.%I '
                       '(LIKE public.events INCLUDING DEFAULTS INCLUDING CONSTRAINTS)', part);
        EXECUTE format(
          'ALTER TABLE public.events ATTACH PARTITION {SCHEMA}.%I FOR VALUES FROM (%L) TO (%L)',
          part, to_char(d, 'YYYY-MM-DD') || ' 00:00:00+00',
          to_char(d + 1, 'YYYY-MM-DD') || ' 00:00:00+00');
        created := created + 1;"""
    if tolerant:
        create = f"""
        BEGIN{create}
        EXCEPTION WHEN duplicate_table OR unique_violation THEN
          NULL;  -- created and attached by a transaction that committed while we waited
        END;"""
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
      IF to_regclass('{SCHEMA}.' || part) IS NULL THEN{create}
      END IF;
    END IF;
  END LOOP;
  RETURN created;
END
$$"""


def upgrade() -> None:
    op.execute(ensure(tolerant=True))


def downgrade() -> None:
    op.execute(ensure(tolerant=False))
