"""The SQL of the dead letters the batch write stores (in the batch's transaction).

:data:`INSERT_DEAD_LETTER` stores one invalid input (unique per source, partition, offset and
raw bytes: a re-delivered one is skipped); :data:`INSERT_CONFLICTS` turns the staged events whose
id is stored with a different body into dead letters with reason ``conflicting_duplicate``.
"""

from __future__ import annotations

from monitor.contract.limits import printable
from monitor.ingest.rollup_sql import STAGING_TABLE
from monitor.ingest.rows import DeadLetter
from monitor.store.tables import EVENT_KEY

MAX_DETAIL_CHARS = 4000


def storable_dead_letter(d: DeadLetter) -> tuple[object, ...]:
    """The :data:`INSERT_DEAD_LETTER` arguments of ``d``, with every text made storable."""
    detail = printable(d.detail)
    if len(detail) > MAX_DETAIL_CHARS:
        detail = detail[: MAX_DETAIL_CHARS - 1] + "…"
    field = printable(d.field) if d.field is not None else None
    return (printable(d.source), d.partition, d.offset, printable(d.reason), field, detail, d.raw)


INSERT_DEAD_LETTER = """
INSERT INTO dead_letters
  (source, source_partition, source_offset, reason, field, detail, raw, raw_md5)
VALUES ($1, $2, $3, $4, $5, $6, $7::bytea, md5($7::bytea))
ON CONFLICT (source, source_partition, source_offset, raw_md5) DO NOTHING
"""

# staged events whose event_id is stored with a different body (the first stays): one dead
# letter each, reason conflicting_duplicate; a re-delivered batch adds nothing (unique key).
# The stored row is found through event_ids (its ts picks one partition); an id whose events
# partition was already dropped by retention counts as a plain duplicate.
INSERT_CONFLICTS = f"""
WITH c AS (
  SELECT s.event_id, s.kafka_partition, s.kafka_offset, convert_to(s.body::text, 'UTF8') AS raw
  FROM {STAGING_TABLE} s JOIN event_ids i ON i.event_key = {EVENT_KEY.format("s.event_id")}
  JOIN events e ON e.conversation_id = i.conversation_id AND e.ts = i.ts
    AND e.event_id = s.event_id
  WHERE s.body <> e.body
)
INSERT INTO dead_letters
  (source, source_partition, source_offset, reason, field, detail, raw, raw_md5)
SELECT $1, kafka_partition, kafka_offset, 'conflicting_duplicate', 'event_id',
  'event_id ' || event_id || ' is already stored with a different body; the first one stays',
  raw, md5(raw)
FROM c
ON CONFLICT (source, source_partition, source_offset, raw_md5) DO NOTHING
RETURNING 1
"""
