"""The SQL that keeps ``items`` and ``calibration_bins`` in step with the events (issue 4).

Runs in the ingest transaction, after the batch's events and conversation roll-ups are written
(:mod:`monitor.store.rollup_sql`) and the batch's new conversations have a sampling decision.

:data:`SYNC_ITEMS` takes ``$1`` = the conversation ids of the batch and, in one statement:

1. inserts an item for every newly stored assistant message with a confidence (``ON CONFLICT
   DO NOTHING``: a replayed message changes nothing), with its conversation's sampling weight
   and current label;
2. relabels the already stored items of those conversations whose label differs from the
   conversation's current label (a late outcome, or a better outcome replacing another);
3. adds to ``calibration_bins``, at every resolution, the *difference* each change makes:
   a new labelled item adds its contribution, a relabelled item subtracts its old contribution
   and adds its new one. Items with weight 0 (not in the probability sample) add nothing.

Both steps compare stored state with wanted state, so running the statement again, or for a
conversation that did not change, writes nothing: the sums are idempotent under replays and
restarts, and a label moves without double counting. The label of an item is the outcome of
its conversation (``success`` -> 1, else 0; ``label_source`` = ``outcome:<source>``);
conversations without an outcome leave their items unlabelled.

Concurrency: rows are inserted and upserted in key order, so two workers writing the same bin
rows queue on row locks instead of deadlocking in the common case; a deadlock that still
happens fails the batch, which the ingest loop retries as a whole (idempotent).
"""

from __future__ import annotations

from monitor.metrics.bins import DEFAULT_BINS
from monitor.store.rollup_sql import STAGING_TABLE
from monitor.store.tables_analytics import RESOLUTIONS, SEGMENT_KEY

N_BINS = DEFAULT_BINS


def bin_sql(conf: str, n_bins: int = N_BINS) -> str:
    """SQL for the bin index of ``conf``, identical to :func:`monitor.metrics.bins.bin_index`.

    Counts the interior edges ``k / n_bins`` (float8 division, the same doubles numpy uses)
    that are <= ``conf``, so a value exactly on an edge lands in the upper bin and 1.0 in the
    last one.
    """
    terms = " + ".join(f"({conf} >= {k}::float8 / {n_bins})::int" for k in range(1, n_bins))
    return f"({terms})"


_SEG = ", ".join(SEGMENT_KEY)
_SUMS = ("count", "weight", "sum_conf", "sum_y", "sum_sq_err", "sum_w2")
_RES = ", ".join(f"('{name}', '{unit}')" for name, unit in RESOLUTIONS.items())


def _sq(y: str) -> str:
    return f"CASE WHEN {y} IS NULL THEN 0.0 ELSE (confidence - {y}) ^ 2 END"


_HAS = "((y_new IS NOT NULL)::int - (y_old IS NOT NULL)::int)"

SYNC_ITEMS = f"""
WITH conv AS (
  SELECT conversation_id, coalesce(sample_weight, 0.0) AS w,
         CASE WHEN outcome_success IS NULL THEN NULL::smallint
              WHEN outcome_success THEN 1::smallint ELSE 0::smallint END AS y,
         CASE WHEN outcome_success IS NULL THEN NULL
              ELSE 'outcome:' || coalesce(outcome_source, 'other') END AS src
  FROM conversations WHERE conversation_id = ANY($1::text[])
), new_items AS (
  INSERT INTO items (event_id, conversation_id, ts, {_SEG}, confidence, weight,
                     label, label_source, labelled_at)
  SELECT DISTINCT ON (s.event_id) s.event_id, s.conversation_id, s.ts, s.agent_id,
         coalesce(s.agent_version, ''), coalesce(s.domain, ''), coalesce(s.tier, 0),
         s.confidence, conv.w, conv.y, conv.src,
         CASE WHEN conv.y IS NULL THEN NULL ELSE now() END
  FROM {STAGING_TABLE} s JOIN conv USING (conversation_id)
  WHERE s.type = 'message' AND s.role = 'assistant' AND s.confidence IS NOT NULL
  ORDER BY s.event_id
  ON CONFLICT (event_id) DO NOTHING
  RETURNING ts, {_SEG}, confidence, weight, label AS y_new, NULL::smallint AS y_old
), old AS (
  SELECT i.event_id, i.label AS y_old, conv.y AS y_new, conv.src
  FROM items i JOIN conv USING (conversation_id)
  WHERE i.label IS DISTINCT FROM conv.y
  ORDER BY i.event_id
  FOR UPDATE OF i
), relabel AS (
  UPDATE items i SET label = old.y_new, label_source = old.src, labelled_at = now()
  FROM old WHERE i.event_id = old.event_id
  RETURNING i.ts, {", ".join(f"i.{c}" for c in SEGMENT_KEY)}, i.confidence, i.weight,
            old.y_new, old.y_old
), changes AS (
  SELECT * FROM new_items WHERE y_new IS NOT NULL
  UNION ALL
  SELECT * FROM relabel
), deltas AS (
  SELECT ts, {_SEG}, {bin_sql("confidence")} AS bin,
         {_HAS} AS count,
         weight * {_HAS} AS weight,
         weight * confidence * {_HAS} AS sum_conf,
         weight * (coalesce(y_new, 0) - coalesce(y_old, 0)) AS sum_y,
         weight * ({_sq("y_new")} - {_sq("y_old")}) AS sum_sq_err,
         weight * weight * {_HAS} AS sum_w2
  FROM changes WHERE weight > 0
), up AS (
  INSERT INTO calibration_bins AS b (resolution, window_start, {_SEG}, bin, {", ".join(_SUMS)})
  SELECT r.resolution, date_trunc(r.unit, d.ts, 'UTC'), {", ".join(f"d.{c}" for c in SEGMENT_KEY)},
         d.bin, {", ".join(f"sum(d.{c})" for c in _SUMS)}
  FROM deltas d CROSS JOIN (VALUES {_RES}) AS r(resolution, unit)
  GROUP BY 1, 2, 3, 4, 5, 6, 7
  ORDER BY 1, 2, 3, 4, 5, 6, 7
  ON CONFLICT (resolution, window_start, {_SEG}, bin) DO UPDATE SET
    {", ".join(f"{c} = b.{c} + EXCLUDED.{c}" for c in _SUMS)}
  RETURNING 1
)
SELECT (SELECT count(*) FROM new_items) AS new_items,
       (SELECT count(*) FROM relabel) AS relabelled,
       (SELECT count(*) FROM up) AS bin_rows
"""

UNDECIDED = """
SELECT conversation_id, agent_id, domain, tier FROM conversations
WHERE conversation_id = ANY($1::text[]) AND sample_rate IS NULL
ORDER BY conversation_id
"""

SET_DECISIONS = """
UPDATE conversations c SET sample_stratum = d.stratum, sample_rate = d.rate,
  sampled_by_rate = d.by_rate, sample_weight = d.weight, sample_policy = $6
FROM unnest($1::text[], $2::text[], $3::float8[], $4::bool[], $5::float8[])
  AS d(conversation_id, stratum, rate, by_rate, weight)
WHERE c.conversation_id = d.conversation_id AND c.sample_rate IS NULL
"""
