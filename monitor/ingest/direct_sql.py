"""The SQL of the direct batch write: the common case, a batch whose events are all new.

The staging path (:mod:`monitor.ingest.rollup_sql`) COPYs every event, body included, into a
temporary table and then inserts the ones whose id it could claim: every body is written twice
and sorted once. When a batch holds no id twice, the writer first claims all its ids (a COPY
into :data:`CLAIM_TABLE`, first in the transaction); if it got every one, none of the events is
stored yet, so it COPYs them straight into ``events`` and only the columns the roll-ups read
into the narrow temporary table :data:`ROLLUP_TABLE`, from which :data:`DIRECT_BATCH` (the same
roll-ups, :data:`monitor.ingest.rollup_sql.ROLLUPS`) and :data:`SYNC_ITEMS_DIRECT` read. If one
id was stored already (a replay, a re-delivered batch, another worker's write of the same ids),
it rolls the transaction back and writes the batch again through the staging path, which skips
the stored ids and finds conflicting duplicates. Both paths store the same rows
(tests/ingest/test_direct_write.py).

The claim COPYs in key order, like the staging path inserts, so two writers claiming the same
ids queue on the key instead of deadlocking; the second gets a unique violation once the first
commits (a COPY has no ``ON CONFLICT``: one stored id fails the whole COPY, which is the
all-or-nothing the claim wants), rolls its transaction back and goes the staging way. A COPY
costs Postgres about half an ``INSERT ... SELECT FROM unnest(...) ON CONFLICT DO NOTHING``
(docs/benchmarks.md, "The SDK's own batches and a COPY claim").
"""

from __future__ import annotations

from monitor.ingest.items_sql import sync_statement
from monitor.ingest.owner_sql import direct_stray
from monitor.ingest.rollup_sql import INSERTED, batch_statement, delay_bucket_sql
from monitor.ingest.rows import ROW_FIELDS

ROLLUP_TABLE = "staging_rollup"

#: the columns of :data:`ROLLUP_TABLE` with their types: what the roll-ups and the new items
#: read of an event (the ``events`` types; the body fields as the roll-ups extract them)
_TYPES: tuple[tuple[str, str], ...] = (
    ("event_id", "text"),
    ("conversation_id", "text"),
    ("type", "text"),
    ("ts", "timestamptz"),
    ("agent_id", "text"),
    ("agent_version", "text"),
    ("agent_model", "text"),
    ("domain", "text"),
    ("tier", "smallint"),
    ("channel", "text"),
    ("intent", "text"),
    ("segment", "text"),
    ("task_id", "text"),
    ("trial", "integer"),
    ("turn", "integer"),
    ("role", "text"),
    ("confidence", "float8"),
    ("tool_ok", "boolean"),
    ("tool_calls", "integer"),
    ("escalation_trigger", "text"),
    ("outcome_success", "boolean"),
    ("outcome_reward", "float8"),
    ("outcome_source", "text"),
)

ROLLUP_COLUMNS: tuple[str, ...] = tuple(name for name, _ in _TYPES)

#: positions of :data:`ROLLUP_COLUMNS` in an ``EventRow`` (:data:`monitor.ingest.rows.ROW_FIELDS`)
ROLLUP_INDEXES: tuple[int, ...] = tuple(ROW_FIELDS.index(c) for c in ROLLUP_COLUMNS)

CREATE_ROLLUP_TABLE = (
    f"CREATE TEMP TABLE IF NOT EXISTS {ROLLUP_TABLE} "
    f"({', '.join(f'{name} {sql_type}' for name, sql_type in _TYPES)}) ON COMMIT DELETE ROWS"
)

#: the table and columns the claim COPYs a batch's (event key, ts, conversation id) into (the
#: key: :func:`monitor.ingest.rows.event_key` of the id)
CLAIM_TABLE = "event_ids"
CLAIM_COLUMNS: tuple[str, ...] = ("event_key", "ts", "conversation_id")

#: the :data:`~monitor.ingest.rollup_sql.INSERTED` columns that are not columns of
#: :data:`ROLLUP_TABLE`, computed as the staging path's RETURNING computes them: every event of
#: the batch was inserted, with ingested_at = now() (the column's default)
COMPUTED = {
    "minute": "date_trunc('minute', now(), 'UTC')",
    "delay_bucket": delay_bucket_sql("extract(epoch FROM now() - ts)::float8"),
}

#: the batch's events but the ones refused as another agent's truth (deleted from ``events``
#: again, :func:`monitor.ingest.owner_sql.direct_stray`)
DIRECT_INSERT = f"""{direct_stray(ROLLUP_TABLE)}, ins AS (
  SELECT {", ".join(f"{COMPUTED[n]} AS {n}" if n in COMPUTED else n for n, _ in INSERTED)}
  FROM {ROLLUP_TABLE} WHERE event_id NOT IN (SELECT event_id FROM stray)
)"""

#: the batch statement of the direct path: :data:`DIRECT_INSERT` then the roll-ups; same
#: parameters and result as :data:`monitor.ingest.rollup_sql.WRITE_BATCH`
DIRECT_BATCH = batch_statement(inserted=DIRECT_INSERT)

#: :data:`monitor.ingest.items_sql.SYNC_ITEMS`, its new items from :data:`ROLLUP_TABLE`
SYNC_ITEMS_DIRECT = sync_statement(ROLLUP_TABLE)
