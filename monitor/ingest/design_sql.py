"""The SQL that keeps ``item_hours`` and ``design_hours`` in step with the items' labels.

The design effect of a window is labelled items (weight > 0) per *distinct* conversation with
such items in it: not additive over hours, so it used to scan ``items``. These two tables make
it a sum (:mod:`monitor.analytics.design_effect` reads them):

- ``item_hours``: per (conversation, hour of ``ts``, segment) the count ``n`` of its labelled
  items with weight > 0, and ``multi``: the conversation has more than one such row;
- ``design_hours``: per (hour, segment) the sum of ``n`` and the number of rows with ``n > 0``.

Over whole hours, a conversation with one row is counted once by ``design_hours``; only the
``multi`` rows (conversations whose items span hours or segments: a minority) need reading to
count each of their conversations once.

:data:`DESIGN_CTES` continues the items statement (:mod:`monitor.ingest.items_sql`) from its
``changes`` CTE (``conversation_id, ts, segment, confidence, weight, y_new, y_old`` of every new
labelled item and every relabelled one): each change adds ``(y_new IS NOT NULL) - (y_old IS NOT
NULL)`` to its row's ``n``, rows are upserted in key order, ``design_hours`` gets the row
differences (``n`` before is read with the conversation's stored rows; a row moving between
``0`` and positive changes ``conversations``), and when a conversation ends up with more than
one row, all its rows are flagged ``multi`` (never unflagged: a flagged conversation is only
read, never miscounted). Callers hold :data:`monitor.ingest.items_sql.LOCK_CONVERSATIONS` for the
conversations, so no other transaction changes their rows meanwhile. Idempotent like the rest
of the statement: no change, no write.
"""

from __future__ import annotations

from monitor.store.tables_analytics import SEGMENT_KEY

_SEG = ", ".join(SEGMENT_KEY)
_KEY = f"conversation_id, hour, {_SEG}"
_HAS = "((y_new IS NOT NULL)::int - (y_old IS NOT NULL)::int)"


def _key_of(x: str) -> str:
    return ", ".join(f"{x}.{c}" for c in ("conversation_id", "hour", *SEGMENT_KEY))


#: CTEs to append after ``changes`` (each starts with a comma); counted by ``hour_rows``.
#: ``hour_keys`` holds every row of the changed conversations, stored or new, with ``n``
#: before (``n0``), the change (``dn``, 0 for rows the batch does not touch) and ``multi``:
#: one grouping pass instead of joins between CTEs (whose row counts the planner does not
#: know: a nested loop of the batch's rows over themselves took 65 ms per 5,000 events).
DESIGN_CTES = f""", hour_deltas AS (
  SELECT conversation_id, date_trunc('hour', ts, 'UTC') AS hour, {_SEG},
         sum({_HAS})::bigint AS dn
  FROM changes WHERE weight > 0
  GROUP BY {_KEY} HAVING sum({_HAS}) <> 0
), hour_keys AS (
  SELECT {_KEY}, sum(dn)::bigint AS dn, sum(n0)::bigint AS n0, bool_or(multi) AS multi
  FROM (
    SELECT {_KEY}, dn, 0::bigint AS n0, false AS multi FROM hour_deltas
    UNION ALL
    SELECT {_KEY}, 0, n, multi FROM item_hours
    WHERE conversation_id = ANY(ARRAY(SELECT DISTINCT conversation_id FROM hour_deltas))
  ) AS u GROUP BY {_KEY}
), multi_convs AS (
  SELECT conversation_id FROM hour_keys GROUP BY conversation_id HAVING count(*) > 1
), hour_rows AS (
  INSERT INTO item_hours AS h ({_KEY}, n, multi)
  SELECT {_KEY}, dn, conversation_id IN (SELECT conversation_id FROM multi_convs)
  FROM hour_deltas ORDER BY {_KEY}
  ON CONFLICT ({_KEY}) DO UPDATE SET n = h.n + EXCLUDED.n, multi = h.multi OR EXCLUDED.multi
  RETURNING 1
), flag_multi AS (
  UPDATE item_hours h SET multi = true
  WHERE h.conversation_id = ANY(ARRAY(SELECT conversation_id FROM multi_convs)) AND NOT h.multi
    AND ({_key_of("h")}) IN (SELECT {_KEY} FROM hour_keys WHERE dn = 0 AND NOT multi)
  RETURNING 1
), design_up AS (
  INSERT INTO design_hours AS s (hour, {_SEG}, items, conversations)
  SELECT hour, {_SEG}, sum(dn), sum((n0 + dn > 0)::int - (n0 > 0)::int)
  FROM hour_keys WHERE dn <> 0
  GROUP BY hour, {_SEG} ORDER BY hour, {_SEG}
  ON CONFLICT (hour, {_SEG}) DO UPDATE SET items = s.items + EXCLUDED.items,
    conversations = s.conversations + EXCLUDED.conversations
  RETURNING 1
)"""
