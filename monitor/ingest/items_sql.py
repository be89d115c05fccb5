"""The SQL that keeps ``items`` and ``calibration_bins`` in step with the events.

Runs in the ingest transaction, after the batch's events and conversation roll-ups are written
(:mod:`monitor.ingest.rollup_sql`) and the batch's new conversations have a sampling decision.

:data:`SYNC_ITEMS` takes ``$1`` = the conversation ids of the batch (every conversation of the
staged rows) and ``$2`` = those of them whose label inputs may have changed (the ingest path:
conversations with an outcome event in the batch; the judge path: the judged conversations),
and, in one statement (``$2`` must be a subset of ``$1``: the judges' labels are read for
``$1``; the relabel step filters ``items`` by ``$2`` alone, see "Plans" below):

1. inserts an item for every newly stored assistant message with a confidence (``ON CONFLICT
   DO NOTHING``: a replayed message changes nothing), with its conversation's sampling weight
   and current label;
2. relabels the already stored items of the ``$2`` conversations whose label differs from the
   best label available now: the conversation's outcome, else the judges' verdicts on the item
   (a late outcome supersedes a judge label; the verdicts stay stored);
3. adds to ``calibration_bins``, at every resolution, the *difference* each change makes:
   a new labelled item adds its contribution, a relabelled item subtracts its old contribution
   and adds its new one. Items with weight 0 (not in the probability sample) add nothing;
4. keeps ``item_hours`` and ``design_hours`` (labelled items per conversation-hour, for the
   design effect) from the same changes: :mod:`monitor.ingest.design_sql`; and
   ``label_hours`` (labelled items per hour and label source): :mod:`monitor.ingest.label_sql`.

Both steps compare stored state with wanted state, so running the statement again, or for a
conversation that did not change, writes nothing: the sums are idempotent under replays and
restarts, and a label moves without double counting. The label of an item is the outcome of
its conversation (``success`` -> 1, else 0; ``label_source`` = ``outcome:<source>``), else
the judges' (see ``_JUDGED``; ``label_source`` = ``judge:<names>``), else none.

Callers take :data:`LOCK_CONVERSATIONS` first in the same transaction, so the ingest writer and
the verdict writer never compute a label for one conversation from each other's stale view.

Plans: the relabel step filters ``items`` by ``$2`` only. Both arrays on the same column made
the planner multiply their selectivities (a few rows expected for ~1,300 found), so it read
``items`` sequentially and nest-looped the conversations over them: ~210 ms per batch at 1M
items, growing with the table; with one array it uses ``ix_items_conversation_id`` and merges
with the conversations' primary key (~11 ms; docs/scaling.md "Query plans of the write path").

Concurrency: rows are inserted and upserted in key order, so two workers writing the same bin
rows queue on row locks instead of deadlocking in the common case; a deadlock that still
happens fails the batch, which the ingest loop retries as a whole (idempotent).
"""

from __future__ import annotations

from monitor.analytics.bins import DEFAULT_BINS
from monitor.ingest.design_sql import DESIGN_CTES
from monitor.ingest.escalation_sql import IMAGE_COLUMNS, upsert_deltas
from monitor.ingest.label_sql import LABEL_CTES
from monitor.ingest.rollup_sql import STAGING_TABLE
from monitor.store.tables_analytics import RESOLUTIONS, SEGMENT_KEY

N_BINS = DEFAULT_BINS


def bin_sql(conf: str, n_bins: int = N_BINS) -> str:
    """SQL for the bin index of ``conf``, identical to :func:`monitor.analytics.bins.bin_index`.

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

#: Judge labels per item: a failure found by any judge (label 0) makes the item wrong; a
#: judge whose name starts with ``llm`` can also say it is right (label 1). Deterministic
#: checks that pass say nothing about correctness, so they never label an item 1. A judge
#: labels only the conversations of the scopes (agent x domain) where ``judge_quality`` says
#: it does: the scope's row, else the judge's pooled row (``agent_id`` ''), else not at all
#: (:mod:`monitor.judges.quality`).
_JUDGED = """
  SELECT v.item_id,
         CASE WHEN bool_or(v.label = 0) THEN 0::smallint
              WHEN bool_or(v.label = 1 AND v.judge LIKE 'llm%') THEN 1::smallint END AS y,
         'judge:' || string_agg(DISTINCT v.judge, ',' ORDER BY v.judge)
           FILTER (WHERE v.label = 0 OR v.judge LIKE 'llm%') AS src
  FROM verdicts v JOIN conversations vc ON vc.conversation_id = v.conversation_id
  WHERE v.conversation_id = ANY($1::text[]) AND v.status = 'ok' AND v.item_id <> ''
    AND v.label IS NOT NULL
    AND coalesce(
      (SELECT q.labels FROM judge_quality q WHERE q.judge = v.judge
         AND q.judge_version = v.judge_version AND q.agent_id = vc.agent_id
         AND q.domain = coalesce(vc.domain, '')),
      (SELECT q.labels FROM judge_quality q WHERE q.judge = v.judge
         AND q.judge_version = v.judge_version AND q.agent_id = '' AND q.domain = ''),
      false)
  GROUP BY v.item_id
"""

#: Serialises label maintenance per conversation (ingest and judge writers): two-int keys,
#: a key space apart from single-bigint advisory locks; taken in key order (no deadlock).
LOCK_CONVERSATIONS = """
SELECT count(pg_advisory_xact_lock(7301, h)) FROM (
  SELECT DISTINCT hashtext(c) AS h FROM unnest($1::text[]) AS c ORDER BY 1
) AS keys
"""


#: Label inputs of a conversation: its sampling weight and outcome label. A subquery, not a
#: CTE: the planner joins ``conversations`` by its primary key with real statistics (a CTE's
#: row estimate once made Postgres 18 nest-loop the batch over it, 0.4 s per batch).
_CONV = """(
  SELECT conversation_id, coalesce(sample_weight, 0.0) AS w,
         CASE WHEN outcome_success IS NULL THEN NULL::smallint
              WHEN outcome_success THEN 1::smallint ELSE 0::smallint END AS y,
         CASE WHEN outcome_success IS NULL THEN NULL
              ELSE 'outcome:' || coalesce(outcome_source, 'other') END AS src
  FROM conversations) AS conv"""


def sync_statement(new_items_from: str | None) -> str:
    """The statement (module docstring); its new items are the assistant messages with a
    confidence of the table ``new_items_from`` (the batch's events, staged), none when None."""
    new_items = (
        f"""
  INSERT INTO items (event_id, conversation_id, ts, {_SEG}, confidence, weight,
                     label, label_source, labelled_at)
  SELECT DISTINCT ON (s.event_id) s.event_id, s.conversation_id, s.ts, s.agent_id,
         coalesce(s.agent_version, ''), coalesce(s.domain, ''), coalesce(s.tier, 0),
         s.confidence, conv.w, coalesce(conv.y, j.y), CASE WHEN conv.y IS NOT NULL
         THEN conv.src ELSE j.src END,
         CASE WHEN coalesce(conv.y, j.y) IS NULL THEN NULL ELSE now() END
  FROM {new_items_from} s JOIN {_CONV} USING (conversation_id)
  LEFT JOIN judged j ON j.item_id = s.event_id
  WHERE s.type = 'message' AND s.role = 'assistant' AND s.confidence IS NOT NULL
  ORDER BY s.event_id
  ON CONFLICT (event_id) DO NOTHING
  RETURNING conversation_id, ts, {_SEG}, confidence, weight, label AS y_new,
            NULL::smallint AS y_old, label_source AS src_new, NULL::text AS src_old"""
        if (new_items_from is not None)
        else f"""
  SELECT NULL::text AS conversation_id, NULL::timestamptz AS ts,
         {", ".join(f"NULL::{t} AS {c}" for c, t in _SEG_TYPES)},
         NULL::float8 AS confidence, NULL::float8 AS weight, NULL::smallint AS y_new,
         NULL::smallint AS y_old, NULL::text AS src_new, NULL::text AS src_old WHERE FALSE"""
    )
    return f"""
WITH judged AS ({_JUDGED}), new_items AS ({new_items}
), old AS (
  SELECT i.event_id, i.label AS y_old, i.label_source AS src_old, coalesce(conv.y, j.y) AS y_new,
         CASE WHEN conv.y IS NOT NULL THEN conv.src ELSE j.src END AS src
  FROM items i JOIN {_CONV} USING (conversation_id) LEFT JOIN judged j ON j.item_id = i.event_id
  WHERE i.conversation_id = ANY($2::text[]) AND conv.conversation_id = ANY($2::text[])
    AND (i.label, i.label_source) IS DISTINCT FROM
        (coalesce(conv.y, j.y), CASE WHEN conv.y IS NOT NULL THEN conv.src ELSE j.src END)
  ORDER BY i.event_id
  FOR UPDATE OF i
), relabel AS (
  UPDATE items i SET label = old.y_new, label_source = old.src,
                     labelled_at = CASE WHEN old.y_new IS NULL THEN NULL ELSE now() END
  FROM old WHERE i.event_id = ANY(ARRAY(SELECT event_id FROM old)) AND i.event_id = old.event_id
  RETURNING i.conversation_id, i.ts, {", ".join(f"i.{c}" for c in SEGMENT_KEY)},
            i.confidence, i.weight,
            old.y_new, old.y_old, old.src AS src_new, old.src_old
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
){DESIGN_CTES}{LABEL_CTES}
SELECT (SELECT count(*) FROM new_items) AS new_items,
       (SELECT count(*) FROM relabel) AS relabelled,
       (SELECT count(*) FROM up) AS bin_rows,
       (SELECT count(*) FROM hour_rows) AS hour_rows,
       (SELECT count(*) FROM label_rows) AS label_rows
"""


_SEG_TYPES = (
    ("agent_id", "text"),
    ("agent_version", "text"),
    ("domain", "text"),
    ("tier", "smallint"),
)

#: New items from the staged batch + relabel of the batch's conversations (ingest path).
SYNC_ITEMS = sync_statement(STAGING_TABLE)
#: Relabel only (after new verdicts); ``$1`` = ``$2`` = the judged conversation ids.
RELABEL_ITEMS = sync_statement(None)

UNDECIDED = """
SELECT conversation_id, agent_id, domain, tier FROM conversations
WHERE conversation_id = ANY($1::text[]) AND sample_rate IS NULL
ORDER BY conversation_id
"""

# the decision gives a conversation its weight: a sampled one enters escalation_bins here
# (before, without a weight, it counted nothing; monitor.ingest.escalation_sql)
SET_DECISIONS = f"""
WITH decided AS (
  UPDATE conversations c SET sample_stratum = d.stratum, sample_rate = d.rate,
    sampled_by_rate = d.by_rate, sample_weight = d.weight, sample_policy = $6
  FROM unnest($1::text[], $2::text[], $3::float8[], $4::bool[], $5::float8[])
    AS d(conversation_id, stratum, rate, by_rate, weight)
  WHERE c.conversation_id = d.conversation_id AND c.sample_rate IS NULL
  RETURNING {", ".join(f"c.{col}" for col in IMAGE_COLUMNS)}
), esc AS (
  {upsert_deltas("decided", None)}
)
SELECT (SELECT count(*) FROM decided) AS decided
"""
