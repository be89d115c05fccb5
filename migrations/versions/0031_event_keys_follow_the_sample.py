"""event keys follow the sample: ``event_ids`` keyed by a 16-byte digest, emptied with the leaf

``event_ids.event_id text`` becomes ``event_key uuid``, ``md5(event_id)::uuid``: a fixed 16
bytes instead of the id's text (the primary key and its index shrink with it). The writer
computes the same digest for its COPY claim (:func:`monitor.ingest.rows.event_key`).

``truncate_unsampled_events(timestamptz)`` deletes the keys of a day's unsampled leaf, under the
leaf's ACCESS EXCLUSIVE lock and in the same transaction, before it empties the leaf: the key of
an event outside the sample lives as long as the event (a promoted event's key stays: its row
is in the kept leaf). What de-duplication remains for an event whose leaf was emptied: none;
a copy delivered again later (a topic re-read from its start after lost offsets, a replayed
file) is stored and counted again. Hence the window, ``retention_unsampled_hours``, must cover
how far back the topics can be re-delivered (docs/scaling.md).

The downgrade rebuilds the text keys from the stored events (a key whose event is no longer
stored, an agent-mismatch refusal or a day dropped before its keys, cannot be recovered from
its digest and is not restored) and restores 0027's function.

Revision ID: 0031
Revises: 0030
Create Date: 2026-11-27 21:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0031"
down_revision: str | None = "0030"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

SCHEMA = "event_partitions"
ROLE = "monitor_readonly"
GRANT = f"""
DO $$
BEGIN
  IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = '{ROLE}') THEN
    GRANT SELECT ON event_ids TO {ROLE};
  END IF;
END
$$"""


def truncate(delete_keys: bool) -> str:
    """The function as 0027 wrote it (``delete_keys`` False) or as this revision does."""
    # the keys of the leaf's day only (ix_event_ids_ts bounds the join to that day's keys)
    keys = (
        f"""
      day := to_date(substring(r.relname from 8 for 8), 'YYYYMMDD');
      EXECUTE format('DELETE FROM public.event_ids k USING {SCHEMA}.%I e'
                     ' WHERE k.ts >= %L AND k.ts < %L'
                     ' AND k.event_key = md5(e.event_id)::uuid AND k.ts = e.ts', r.relname,
                     day::timestamp AT TIME ZONE 'UTC', (day + 1)::timestamp AT TIME ZONE 'UTC');"""
        if delete_keys
        else ""
    )
    declare = "\n  day date;" if delete_keys else ""
    return f"""
CREATE OR REPLACE FUNCTION truncate_unsampled_events(idle_since timestamptz) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
  r record;
  busy boolean;
  emptied integer := 0;{declare}
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
    IF NOT busy THEN{keys}
      EXECUTE format('TRUNCATE {SCHEMA}.%I', r.relname);
      emptied := emptied + 1;
    END IF;
  END LOOP;
  RETURN emptied;
END
$$"""


def _swap(select: str, key: str) -> None:
    """Rebuild ``event_ids`` as ``(key, ts, conversation_id)`` from ``select``."""
    op.execute(
        f"CREATE TABLE event_ids_next ({key} NOT NULL, ts timestamptz NOT NULL,"
        " conversation_id text NOT NULL)"
    )
    op.execute(f"INSERT INTO event_ids_next {select} ORDER BY 1")
    op.execute("DROP TABLE event_ids")
    op.execute("ALTER TABLE event_ids_next RENAME TO event_ids")
    name = key.split()[0]
    op.execute(f"ALTER TABLE event_ids ADD CONSTRAINT pk_event_ids PRIMARY KEY ({name})")
    op.execute("CREATE INDEX ix_event_ids_ts ON event_ids (ts)")
    op.execute(GRANT)


def upgrade() -> None:
    _swap("SELECT md5(event_id)::uuid, ts, conversation_id FROM event_ids", "event_key uuid")
    op.execute(truncate(delete_keys=True))


def downgrade() -> None:
    _swap(
        "SELECT DISTINCT ON (e.event_id) e.event_id, k.ts, k.conversation_id FROM event_ids k"
        " JOIN events e ON md5(e.event_id)::uuid = k.event_key"
        " AND e.conversation_id = k.conversation_id AND e.ts = k.ts",
        "event_id text",
    )
    op.execute(truncate(delete_keys=False))
