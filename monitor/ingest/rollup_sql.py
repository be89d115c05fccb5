"""The SQL of the idempotent batch write: staged events -> ``events`` + ``conversations``.

One statement claims the staged event ids in ``event_ids`` (``ON CONFLICT DO NOTHING``: the
de-duplication key of the partitioned ``events``), inserts only the events whose id it claimed,
and folds ONLY those rows into the ``conversations`` roll-up, so a replayed or re-delivered
event changes nothing. The day partitions the rows need exist already
(:data:`monitor.store.partitions.ENSURE_DAYS`, run first in the same transaction).
Merge rules (order-independent across batches):

- agent_id: the agent of the conversation's earliest event by ts (a batch with an event
  earlier than the row's first_ts moves it; the sampling decision stays as it was made);
- the other segment columns: first non-null value wins;
- first_ts / last_ts: LEAST / GREATEST; counts: added;
- min_confidence: LEAST over assistant messages (NULLs ignored);
- last_confidence: the assistant confidence with the latest ts (ties: the batch whose statement
  runs later, which with two writes in flight need not be the later one in the topic);
- escalation: the earliest escalation event gives escalated_at, its turn and trigger;
  first_turn: LEAST (turns to escalation = escalation_turn - first_turn, without reading events);
- outcome: ranked by source, ``ground_truth`` > ``ticket``/``csat``/``other`` > ``human_review``
  (docs/design.md: outcome > human review > judge verdict; judges are not outcomes and
  label items elsewhere); within the same rank the latest ts wins, so a late outcome updates
  the row.

The same statement folds the inserted rows into the read roll-ups of
:mod:`monitor.store.tables_rollups` (events per minute by type and segment, the ingest-delay
histogram, the known segment values), so the dashboards never scan ``events``, and the
changes of the conversation rows into ``escalation_bins`` (entries ``esc_before`` / ``esc``,
:mod:`monitor.ingest.escalation_sql`) and ``conversation_minutes`` (``conv_minutes``,
:mod:`monitor.ingest.conversation_minutes_sql`: the writer holds the conversations' advisory lock
before this statement runs, so ``esc_before`` is the image the upsert changes).

Shape (for speed): the event insert returns only :data:`INSERTED`, the columns the
roll-ups read, with the few body fields they need extracted once per row (the bodies are not
carried through the statement); each roll-up is one entry of :data:`ROLLUPS`, a CTE that reads
``ins`` (or an earlier entry) and upserts its rows ONCE per batch, already aggregated, in key
order. To maintain another roll-up, add a ``(name, sql)`` entry to :data:`ROLLUPS` (and any
column it needs to :data:`INSERTED`); :func:`batch_statement` builds the statement.
"""

from __future__ import annotations

from monitor.ingest import conversation_minutes_sql
from monitor.ingest.decision_sql import DEC, DECISION_COLS, DECISION_VALUES, SAME_SEGMENT
from monitor.ingest.escalation_sql import IMAGE_COLUMNS, upsert_deltas
from monitor.ingest.owner_sql import MISMATCH, STAGED_STRAY
from monitor.ingest.rows import EVENT_COLUMNS
from monitor.store.tables import EVENT_KEY, SAMPLING_COLUMNS, SEGMENT_COLUMNS, conversations
from monitor.store.tables_rollups import DELAY_BASE_S, DELAY_LAST_BUCKET, DELAY_PER_DOUBLING

STAGING_TABLE = "staging_events"

CREATE_STAGING = (
    f"CREATE TEMP TABLE IF NOT EXISTS {STAGING_TABLE} "
    "(LIKE events INCLUDING DEFAULTS) ON COMMIT DELETE ROWS"
)

_SEGMENT = tuple(c for c in SEGMENT_COLUMNS if c != "agent_id")
_COLS = ", ".join((*EVENT_COLUMNS, "kept"))  # kept: chosen by the writer per row
_ASSISTANT = "type = 'message' AND role = 'assistant'"
_ESC = "type = 'escalation'"
_OUT = "type = 'outcome'"
_SOURCE = "outcome_source"


def _rank(source: str) -> str:
    """SQL rank of an outcome source (higher wins): ground truth, other outcomes, human review."""
    return f"(CASE {source} WHEN 'ground_truth' THEN 3 WHEN 'human_review' THEN 1 ELSE 2 END)"


_OUTCOME_ORDER = _rank(_SOURCE) + " DESC, ts DESC"


def delay_bucket_sql(seconds: str) -> str:
    """SQL for the ``ingest_delay_bins`` bucket of a delay of ``seconds`` (float8), see
    :mod:`monitor.store.tables_rollups`."""
    return (
        f"(CASE WHEN {seconds} <= {DELAY_BASE_S} THEN 0 ELSE least({DELAY_LAST_BUCKET}, "
        f"ceil({DELAY_PER_DOUBLING} * ln({seconds} / {DELAY_BASE_S}) / ln(2)))::int END)"
    )


#: The columns of ``ins`` (the rows this batch actually inserted) that roll-ups read, as
#: (name, expression over the inserted ``events`` row): event columns, the minute and the delay
#: bucket of ``ingested_at``, and body fields, extracted only from the event type that has them.
INSERTED: tuple[tuple[str, str], ...] = (
    *[(c, c) for c in ("conversation_id", "type", "ts", "agent_id", *_SEGMENT)],
    *[(c, c) for c in ("role", "confidence", "turn", "tool_ok")],
    ("minute", "date_trunc('minute', ingested_at, 'UTC')"),
    ("delay_bucket", delay_bucket_sql("extract(epoch FROM ingested_at - ts)::float8")),
    (
        "tool_calls",
        "CASE WHEN type = 'message' THEN jsonb_array_length("
        "coalesce(body->'message'->'tool_calls', '[]'::jsonb)) END",
    ),
    ("escalation_trigger", f"CASE WHEN {_ESC} THEN body->'escalation'->>'trigger' END"),
    ("outcome_success", f"CASE WHEN {_OUT} THEN (body->'outcome'->>'success')::boolean END"),
    ("outcome_reward", f"CASE WHEN {_OUT} THEN (body->'outcome'->>'reward')::float8 END"),
    ("outcome_source", f"CASE WHEN {_OUT} THEN body->'outcome'->>'source' END"),
)


def _first(expr: str, where: str = "TRUE", order: str = "ts") -> str:
    return f"(array_agg({expr} ORDER BY {order}) FILTER (WHERE {where}))[1]"


_AGG = ",\n    ".join(
    [
        "conversation_id",
        f"{_first('agent_id')} AS agent_id",
        *[f"{_first(c, f'{c} IS NOT NULL')} AS {c}" for c in _SEGMENT],
        "min(ts) AS first_ts",
        "max(ts) AS last_ts",
        "count(*) AS event_count",
        "count(*) FILTER (WHERE type = 'message') AS message_count",
        f"count(*) FILTER (WHERE {_ASSISTANT}) AS assistant_messages",
        "count(*) FILTER (WHERE type = 'message' AND role = 'user') AS user_messages",
        "coalesce(sum(tool_calls), 0) AS tool_calls",
        "count(*) FILTER (WHERE type = 'tool_result') AS tool_results",
        "count(*) FILTER (WHERE type = 'tool_result' AND NOT tool_ok) AS tool_errors",
        "count(*) FILTER (WHERE type = 'feedback') AS feedback_count",
        f"min(confidence) FILTER (WHERE {_ASSISTANT}) AS min_confidence",
        f"max(ts) FILTER (WHERE {_ASSISTANT} AND confidence IS NOT NULL) AS last_confidence_ts",
        "min(turn) AS first_turn",
        "bool_or(type = 'escalation') AS escalated",
        "min(ts) FILTER (WHERE type = 'escalation') AS escalated_at",
        f"{_first('turn', _ESC)} AS escalation_turn",
        f"{_first('escalation_trigger', _ESC)} AS escalation_trigger",
    ]
)

# every conversations column but the server-filled updated_at and the sampler's, in table order
_ROLLUP_COLS = tuple(
    c.name for c in conversations.c if c.name != "updated_at" and c.name not in SAMPLING_COLUMNS
)
_ADDITIVE = (
    "event_count",
    "message_count",
    "assistant_messages",
    "user_messages",
    "tool_calls",
    "tool_results",
    "tool_errors",
    "feedback_count",
)

_NEWER_CONF = (
    "EXCLUDED.last_confidence_ts IS NOT NULL AND "
    "(c.last_confidence_ts IS NULL OR EXCLUDED.last_confidence_ts >= c.last_confidence_ts)"
)
_EARLIER_ESC = (
    "EXCLUDED.escalated_at IS NOT NULL AND "
    "(c.escalated_at IS NULL OR EXCLUDED.escalated_at < c.escalated_at)"
)
_NEW_RANK = _rank("EXCLUDED.outcome_source")
_OLD_RANK = _rank("c.outcome_source")
_BETTER_OUTCOME = (
    "EXCLUDED.outcome_at IS NOT NULL AND (c.outcome_at IS NULL"
    f" OR {_NEW_RANK} > {_OLD_RANK}"
    f" OR ({_NEW_RANK} = {_OLD_RANK} AND EXCLUDED.outcome_at >= c.outcome_at))"
)


def _pick(cond: str, col: str) -> str:
    return f"{col} = CASE WHEN {cond} THEN EXCLUDED.{col} ELSE c.{col} END"


_UPDATES = ",\n    ".join(
    [
        # the agent of the earliest event by ts (an earlier event of a later batch moves it)
        "agent_id = CASE WHEN EXCLUDED.first_ts < c.first_ts"
        " THEN EXCLUDED.agent_id ELSE c.agent_id END",
        *[f"{c} = coalesce(c.{c}, EXCLUDED.{c})" for c in _SEGMENT],
        "first_ts = LEAST(c.first_ts, EXCLUDED.first_ts)",
        "last_ts = GREATEST(c.last_ts, EXCLUDED.last_ts)",
        *[f"{c} = c.{c} + EXCLUDED.{c}" for c in _ADDITIVE],
        "min_confidence = LEAST(c.min_confidence, EXCLUDED.min_confidence)",
        _pick(_NEWER_CONF, "last_confidence"),
        "last_confidence_ts = GREATEST(c.last_confidence_ts, EXCLUDED.last_confidence_ts)",
        "escalated = c.escalated OR EXCLUDED.escalated",
        *[_pick(_EARLIER_ESC, c) for c in ("escalation_turn", "escalation_trigger")],
        "escalated_at = LEAST(c.escalated_at, EXCLUDED.escalated_at)",
        "first_turn = LEAST(c.first_turn, EXCLUDED.first_turn)",
        *[
            _pick(_BETTER_OUTCOME, c)
            for c in ("outcome_success", "outcome_reward", "outcome_source")
        ],
        _pick(_BETTER_OUTCOME, "outcome_at"),
        "updated_at = now()",
    ]
)

# Every SET expression reads the pre-update row (c.*), so the CASE conditions above all compare
# against the old values and the order of assignments does not matter.

_MINUTE_KEY = "minute, type, agent_id, domain, tier"

#: The roll-ups of the batch statement, in order: (CTE name, statement). Each reads ``ins`` or
#: an earlier entry; data-modifying entries run once whether or not anything reads them.
ROLLUPS: tuple[tuple[str, str], ...] = (
    # the picks that order otherwise than by ts, from the few rows they read (so that every
    # ordered aggregate of agg orders by ts: one sort of the batch on Postgres 16+)
    (
        "best_outcome",
        f"""SELECT DISTINCT ON (conversation_id) conversation_id, outcome_success,
    outcome_reward, outcome_source, ts AS outcome_at
  FROM ins WHERE {_OUT} ORDER BY conversation_id, {_OUTCOME_ORDER}""",
    ),
    (
        "last_conf",
        f"""SELECT DISTINCT ON (conversation_id) conversation_id,
    confidence AS last_confidence
  FROM ins WHERE {_ASSISTANT} AND confidence IS NOT NULL ORDER BY conversation_id, ts DESC""",
    ),
    (
        "agg",
        f"""SELECT * FROM (SELECT
    {_AGG}
  FROM ins GROUP BY conversation_id) AS g
  LEFT JOIN last_conf USING (conversation_id) LEFT JOIN best_outcome USING (conversation_id)
  LEFT JOIN dec USING (conversation_id)""",
    ),
    # escalation roll-up: the before image of every row the upsert may change
    (
        "esc_before",
        f"""SELECT {", ".join(IMAGE_COLUMNS)} FROM conversations
  WHERE conversation_id IN (SELECT conversation_id FROM agg)""",
    ),
    # a new row takes the writer's decision when it was made from the row's own segment; the
    # update of an existing row leaves the sampling columns alone
    (
        "up",
        f"""INSERT INTO conversations AS c ({", ".join((*_ROLLUP_COLS, *DECISION_COLS))})
  SELECT {", ".join(_ROLLUP_COLS)}, {DECISION_VALUES}
  FROM agg CROSS JOIN LATERAL (SELECT {SAME_SEGMENT} AS ok) AS k ORDER BY conversation_id
  ON CONFLICT (conversation_id) DO UPDATE SET
    {_UPDATES}
  RETURNING {", ".join(f"c.{col}" for col in IMAGE_COLUMNS)}, c.xmax = 0 AS fresh""",
    ),
    # escalation roll-up: after image +1, before image -1
    ("esc", upsert_deltas("up", "esc_before")),
    # conversations per minute of first_ts (the pipeline panels), from the same images
    ("conv_minutes", conversation_minutes_sql.upsert_deltas("up", "esc_before")),
    # one pass over ins for both per-minute roll-ups (every row of a batch has the same
    # ingested_at, the transaction's now(), so this is a handful of rows)
    (
        "by_minute",
        f"""SELECT {_MINUTE_KEY}, delay_bucket, count(*) AS n FROM (
    SELECT minute, type, agent_id, coalesce(domain, '') AS domain, coalesce(tier, 0) AS tier,
      delay_bucket FROM ins) AS r
  GROUP BY {_MINUTE_KEY}, delay_bucket""",
    ),
    (
        "minutes",
        f"""INSERT INTO event_minutes AS m ({_MINUTE_KEY}, events)
  SELECT {_MINUTE_KEY}, sum(n)::bigint FROM by_minute
  GROUP BY {_MINUTE_KEY} ORDER BY {_MINUTE_KEY}
  ON CONFLICT ({_MINUTE_KEY}) DO UPDATE SET events = m.events + EXCLUDED.events""",
    ),
    (
        "delays",
        """INSERT INTO ingest_delay_bins AS d (minute, bucket, events)
  SELECT minute, delay_bucket, sum(n)::bigint FROM by_minute GROUP BY 1, 2 ORDER BY 1, 2
  ON CONFLICT (minute, bucket) DO UPDATE SET events = d.events + EXCLUDED.events""",
    ),
    (
        "segs",
        """INSERT INTO segment_values (kind, value)
  SELECT DISTINCT v.kind, v.value FROM up
  CROSS JOIN LATERAL (VALUES ('agent', up.agent_id), ('domain', up.domain), ('tier', up.tier::text))
    AS v(kind, value)
  WHERE v.value IS NOT NULL ORDER BY 1, 2
  ON CONFLICT (kind, value) DO NOTHING""",
    ),
)


#: the CTEs that insert the staged batch (``pick``: one row per event id, with its key;
#: ``ids``: the keys claimed in ``event_ids``, in key order as the direct path's claim, i.e. not
#: stored yet; ``stray``: those of them an agent may not write,
#: :mod:`monitor.ingest.owner_sql`; ``ins``: the rest, stored)
STAGED_INSERT = f"""pick AS MATERIALIZED (
  SELECT DISTINCT ON (event_id) {_COLS}, {EVENT_KEY.format("event_id")} AS event_key
  FROM {STAGING_TABLE}
  ORDER BY event_id, kafka_partition NULLS FIRST, kafka_offset NULLS FIRST
), ids AS (
  INSERT INTO event_ids (event_key, ts, conversation_id)
  SELECT event_key, ts, conversation_id FROM pick ORDER BY event_key
  ON CONFLICT (event_key) DO NOTHING
  RETURNING event_key
), {STAGED_STRAY}, ins AS (
  INSERT INTO events ({_COLS})
  SELECT {_COLS} FROM pick WHERE event_key IN (SELECT event_key FROM ids)
    AND event_id NOT IN (SELECT event_id FROM stray)
  RETURNING {", ".join(e if e == n else f"{e} AS {n}" for n, e in INSERTED)}
)"""


def batch_statement(
    rollups: tuple[tuple[str, str], ...] = ROLLUPS, inserted: str = STAGED_INSERT
) -> str:
    """The batch statement: ``inserted``, CTEs ending in ``ins`` (the events this batch
    stored, with the :data:`INSERTED` columns; :data:`STAGED_INSERT` by default) and defining
    ``refused`` (:mod:`monitor.ingest.owner_sql`), their dead letters, then ``rollups``.
    Parameters: the decisions and digest (:mod:`monitor.ingest.decision_sql`, ``$1``-``$9``)
    and ``$10`` the source of the dead letters. Its one row is ``inserted`` (new events),
    ``mismatched`` (events refused as another agent's truth), ``conversations`` (conversation
    rows inserted or updated, from the ``up`` entry), ``decided`` (new rows that took their
    sampling decision from the parameters, :data:`monitor.ingest.decision_sql.DECISION_PARAMS`)
    and ``undecided`` (rows of the batch still without one)."""
    ctes = "".join(f", {name} AS (\n  {sql}\n)" for name, sql in rollups)
    return f"""
WITH dec AS (
  {DEC}
), {inserted}, {MISMATCH}{ctes}
SELECT (SELECT count(*) FROM ins) AS inserted, (SELECT count(*) FROM mismatch) AS mismatched,
  (SELECT count(*) FROM up) AS conversations,
  (SELECT count(*) FROM up WHERE fresh AND sample_weight IS NOT NULL) AS decided,
  (SELECT count(*) FROM up WHERE sample_weight IS NULL) AS undecided
"""


WRITE_BATCH = batch_statement()
