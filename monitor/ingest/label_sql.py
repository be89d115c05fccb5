"""The SQL that keeps ``label_hours`` in step with the items' labels.

``label_hours`` counts labelled items (any weight) per (hour of ``ts``, segment,
``label_source``), the figures the calibration report gives on where its labels come from
(:func:`monitor.judges.judge_noise.judge_labels`: outcomes or judges), which used to count
the window's ``items``.

:data:`LABEL_CTES` continues the items statement (:mod:`monitor.ingest.items_sql`) from its
``changes`` CTE, which carries every new labelled item and every relabelled one with its label
and source before (``y_old``, ``src_old``) and after (``y_new``, ``src_new``): a label after
adds 1 at its source, a label before subtracts 1 at its own, rows upserted in key order.
Idempotent with the rest of the statement: no change, no write.
"""

from __future__ import annotations

from monitor.store.tables_analytics import SEGMENT_KEY

_SEG = ", ".join(SEGMENT_KEY)
_HOUR = "date_trunc('hour', ts, 'UTC')"

#: CTEs to append after ``changes`` (starts with a comma); ``label_rows`` counts the upserts.
LABEL_CTES = f""", label_deltas AS (
  SELECT {_HOUR} AS hour, {_SEG}, coalesce(src_new, '') AS label_source, 1 AS d
  FROM changes WHERE y_new IS NOT NULL
  UNION ALL
  SELECT {_HOUR}, {_SEG}, coalesce(src_old, ''), -1 FROM changes WHERE y_old IS NOT NULL
), label_rows AS (
  INSERT INTO label_hours AS l (hour, {_SEG}, label_source, items)
  SELECT hour, {_SEG}, label_source, sum(d) FROM label_deltas
  GROUP BY hour, {_SEG}, label_source HAVING sum(d) <> 0
  ORDER BY hour, {_SEG}, label_source
  ON CONFLICT (hour, {_SEG}, label_source) DO UPDATE SET items = l.items + EXCLUDED.items
  RETURNING 1
)"""
