"""partitioned events: daily range partitions of ``events`` on ``ts`` and the ``event_ids`` key

Issue 13 item 4 (a store that does not grow forever). ``events`` becomes a natively partitioned
table (``PARTITION BY RANGE (ts)``, one partition per UTC day, named
``event_partitions.events_YYYYMMDD``) so that retention drops whole days. A partitioned table's
unique key must contain the partition key, so event-id uniqueness moves to ``event_ids``
(event_id primary key, with ts and conversation_id to find the stored row). Only the indexes
the readers use are kept: (conversation_id, ts), ingested_at, and ts of gate events; the unused
(agent_id, ts) and (type, ts) go.

Two functions hold the partition DDL, used by the worker (:mod:`monitor.store.partitions`):
``ensure_event_partitions(date[])`` creates the missing days (an empty table attached with
ATTACH PARTITION, which does not block readers or writers; serialized by an advisory lock) and
``drop_event_partitions(date)`` drops every day before the given one that was not written into
since that day began (an old day replayed recently is kept until it is idle as long).

The upgrade copies every stored event (and its id) into the new table; no view depends on
``events`` at 0013. The downgrade copies them back into a plain table with the primary key and
the four indexes of 0001.

Revision ID: 0015
Revises: 0014
Create Date: 2026-11-23 21:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0015"
down_revision: str | None = "0014"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

SCHEMA = "event_partitions"
ROLE = "monitor_readonly"
PARTITION_LOCK = "7302, 0"  # advisory lock (two int4 keys) serializing partition creation

ENSURE = f"""
CREATE FUNCTION ensure_event_partitions(days date[]) RETURNS integer
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
        EXECUTE format('CREATE TABLE {SCHEMA}.%I '
                       '(LIKE public.events INCLUDING DEFAULTS INCLUDING CONSTRAINTS)', part);
        EXECUTE format(
          'ALTER TABLE public.events ATTACH PARTITION {SCHEMA}.%I FOR VALUES FROM (%L) TO (%L)',
          part, to_char(d, 'YYYY-MM-DD') || ' 00:00:00+00',
          to_char(d + 1, 'YYYY-MM-DD') || ' 00:00:00+00');
        created := created + 1;
      END IF;
    END IF;
  END LOOP;
  RETURN created;
END
$$"""

DROP_BEFORE = f"""
CREATE FUNCTION drop_event_partitions(before date) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
  r record;
  idle boolean;
  dropped integer := 0;
BEGIN
  FOR r IN
    SELECT c.relname FROM pg_inherits i
    JOIN pg_class c ON c.oid = i.inhrelid
    JOIN pg_namespace n ON n.oid = c.relnamespace
    WHERE i.inhparent = 'public.events'::regclass AND n.nspname = '{SCHEMA}'
      AND c.relname ~ '^events_[0-9]{{8}}$'
      AND to_date(substr(c.relname, 8, 8), 'YYYYMMDD') < before
    ORDER BY c.relname
  LOOP
    -- a day written into since the horizon (an old day replayed) is kept until it is idle
    EXECUTE format('SELECT NOT EXISTS (SELECT 1 FROM {SCHEMA}.%I WHERE ingested_at >= %L)',
                   r.relname, to_char(before, 'YYYY-MM-DD') || ' 00:00:00+00') INTO idle;
    IF idle THEN
      EXECUTE format('DROP TABLE {SCHEMA}.%I', r.relname);
      dropped := dropped + 1;
    END IF;
  END LOOP;
  RETURN dropped;
END
$$"""

_GRANT = f"""
DO $$
BEGIN
  IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = '{ROLE}') THEN
    GRANT SELECT ON events, event_ids TO {ROLE};
  END IF;
END
$$"""


def upgrade() -> None:
    op.execute(f"CREATE SCHEMA IF NOT EXISTS {SCHEMA}")
    for ix in ("agent_id_ts", "type_ts", "conversation_id_ts", "ingested_at"):
        op.execute(f"DROP INDEX ix_events_{ix}")
    op.execute("ALTER TABLE events RENAME TO events_unpartitioned")
    op.execute(
        "CREATE TABLE events (LIKE events_unpartitioned INCLUDING DEFAULTS) PARTITION BY RANGE (ts)"
    )
    op.execute(ENSURE)
    op.execute(DROP_BEFORE)
    op.execute(
        "SELECT ensure_event_partitions(ARRAY(SELECT DISTINCT (ts AT TIME ZONE 'UTC')::date"
        " FROM events_unpartitioned ORDER BY 1))"
    )
    op.execute("INSERT INTO events SELECT * FROM events_unpartitioned")
    op.execute("""
CREATE TABLE event_ids (
  event_id text NOT NULL, ts timestamptz NOT NULL, conversation_id text NOT NULL,
  CONSTRAINT pk_event_ids PRIMARY KEY (event_id))""")
    op.execute(
        "INSERT INTO event_ids (event_id, ts, conversation_id)"
        " SELECT event_id, ts, conversation_id FROM events_unpartitioned"
    )
    op.execute("DROP TABLE events_unpartitioned")
    op.execute("CREATE INDEX ix_events_conversation_id_ts ON events (conversation_id, ts)")
    op.execute("CREATE INDEX ix_events_ingested_at ON events (ingested_at)")
    op.execute("CREATE INDEX ix_events_gate_ts ON events (ts) WHERE type = 'gate'")
    op.execute("CREATE INDEX ix_event_ids_ts ON event_ids (ts)")
    op.execute(_GRANT)


def downgrade() -> None:
    for ix in ("conversation_id_ts", "ingested_at", "gate_ts"):
        op.execute(f"DROP INDEX ix_events_{ix}")
    op.execute("ALTER TABLE events RENAME TO events_partitioned")
    op.execute("CREATE TABLE events (LIKE events_partitioned INCLUDING DEFAULTS)")
    op.execute(
        "INSERT INTO events SELECT * FROM events_partitioned"
        " ORDER BY event_id, kafka_partition NULLS FIRST, kafka_offset NULLS FIRST"
    )
    op.execute("ALTER TABLE events ADD CONSTRAINT pk_events PRIMARY KEY (event_id)")
    op.execute("DROP TABLE events_partitioned")  # and every partition
    op.execute("DROP TABLE event_ids")
    op.execute("DROP FUNCTION drop_event_partitions(date)")
    op.execute("DROP FUNCTION ensure_event_partitions(date[])")
    op.execute(f"DROP SCHEMA {SCHEMA}")
    op.execute("CREATE INDEX ix_events_agent_id_ts ON events (agent_id, ts)")
    op.execute("CREATE INDEX ix_events_conversation_id_ts ON events (conversation_id, ts)")
    op.execute("CREATE INDEX ix_events_ingested_at ON events (ingested_at)")
    op.execute("CREATE INDEX ix_events_type_ts ON events (type, ts)")
    op.execute(_GRANT.replace("events, event_ids", "events"))
