"""The SQL that keeps ``conversation_minutes`` in step with ``conversations``.

``conversation_minutes`` (:mod:`monitor.store.tables_rollups`) sums every conversation (sampled
or not) per (minute of ``first_ts``, agent, domain, tier): how many, how many escalated, with
an outcome, succeeded, with a minimum confidence and the sum of those (in millionths), tool
errors and tool results. Like ``escalation_bins`` it is kept from the before/after images of
the conversation rows the batch statement changes (:mod:`monitor.ingest.escalation_sql`): the
after image adds its values at its key, the before image subtracts its own, so the table equals
``GROUP BY`` over the current ``conversations`` whatever the order of the changes (a
conversation whose first event arrives late moves to its earlier minute; a replayed event
changes nothing). Exact: counts; the confidence sum is in integer millionths
(``round(min_confidence * 1e6)``), so a mean read back is within 5e-7 of the exact one.
"""

from __future__ import annotations

from monitor.store.tables_rollups import CONVERSATION_MINUTE_SUMS as SUMS

KEY = "minute, agent_id, domain, tier"


def _values(x: str) -> str:
    """The key and the summed values of the image ``x``, in ``KEY`` + :data:`SUMS` order."""
    return ", ".join(
        [
            f"date_trunc('minute', {x}.first_ts, 'UTC')",
            f"{x}.agent_id",
            f"coalesce({x}.domain, '')",
            f"coalesce({x}.tier, 0)::smallint",
            "1",
            f"{x}.escalated::int",
            f"({x}.outcome_success IS NOT NULL)::int",
            f"coalesce({x}.outcome_success::int, 0)",
            f"({x}.min_confidence IS NOT NULL)::int",
            f"coalesce(round({x}.min_confidence * 1000000)::bigint, 0)",
            f"{x}.tool_errors",
            f"{x}.tool_results",
        ]
    )


def upsert_deltas(after: str, before: str) -> str:
    """``INSERT ... ON CONFLICT`` adding the values of every row of ``after`` and subtracting
    those of ``before`` (relations with the columns of
    :data:`monitor.ingest.escalation_sql.IMAGE_COLUMNS`) per key, in key order; keys whose
    changes cancel are not written. Ends in ``RETURNING 1`` so it can be a CTE."""
    cols = f"{KEY}, {', '.join(SUMS)}"
    sums = ", ".join(f"sum(sign * {c})::bigint" for c in SUMS)
    changed = " OR ".join(f"sum(sign * {c}) <> 0" for c in SUMS)
    updates = ", ".join(f"{c} = cm.{c} + EXCLUDED.{c}" for c in SUMS)
    return f"""INSERT INTO conversation_minutes AS cm ({cols})
  SELECT {KEY}, {sums}
  FROM (SELECT 1, {_values("a")} FROM {after} a
        UNION ALL SELECT -1, {_values("o")} FROM {before} o) AS k(sign, {cols})
  GROUP BY {KEY} HAVING {changed}
  ORDER BY {KEY}
  ON CONFLICT ({KEY}) DO UPDATE SET {updates}
  RETURNING 1"""


def backfill() -> str:
    """The rows of ``conversation_minutes`` computed from ``conversations`` (the migration's
    back-fill and the tests' reference)."""
    cols = f"{KEY}, {', '.join(SUMS)}"
    sums = ", ".join(f"sum({c})::bigint" for c in SUMS)
    return (
        f"SELECT {KEY}, {sums} FROM (SELECT {_values('c')} FROM conversations c)"
        f" AS k({cols}) GROUP BY {KEY}"
    )
