"""read roll-ups: every dashboard and CLI read from pre-aggregated state (issue 13)

- ``conversations.first_turn`` (the smallest turn of its events): ``v_escalation_conversations``
  and the CLI's escalation reads no longer run ``min(turn)`` over ``events`` per conversation;
- ``event_minutes`` (events per minute of ``ingested_at``, type, agent, domain, tier) and
  ``ingest_delay_bins`` (ingest-delay histogram per minute), kept by the batch write like
  ``calibration_bins``; ``v_pipeline`` reads them and filters before it aggregates;
  ``v_event_minutes`` shows ``event_minutes`` with NULL for a missing domain / tier;
- ``segment_values``: every agent / domain / tier seen on a conversation, for the template
  variables (no ``SELECT DISTINCT`` over ``conversations``).

The upgrade back-fills all of them from the stored events and conversations; the downgrade
restores the views of 0005 and drops the roll-ups.

Revision ID: 0013
Revises: 0011
Create Date: 2026-11-23 19:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0013"
down_revision: str | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

N_BINS = 10  # frozen copies of what this revision was written with
DELAY = "extract(epoch FROM ingested_at - ts)::float8"
BUCKET = (f"(CASE WHEN {DELAY} <= 0.001 THEN 0 ELSE least(120, "
          f"ceil(4 * ln({DELAY} / 0.001) / ln(2)))::int END)")


def _bin(conf: str) -> str:
    terms = " + ".join(f"({conf} >= {k}::float8 / {N_BINS})::int" for k in range(1, N_BINS))
    return f"({terms})"


def _escalation_view(first_turn: str, join: str) -> str:
    return f"""
SELECT c.first_ts AS time, c.conversation_id, c.agent_id, c.agent_version, c.domain, c.tier,
  c.min_confidence,
  CASE WHEN c.min_confidence IS NOT NULL THEN {_bin("c.min_confidence")} END AS confidence_bin,
  c.escalated, c.escalation_trigger, c.escalated_at,
  c.outcome_success IS NOT NULL AS outcome_known, NOT c.outcome_success AS failed,
  c.sample_weight AS weight,
  CASE WHEN c.escalated THEN c.escalation_turn - coalesce({first_turn}, 0) END
    AS turns_to_escalation,
  CASE WHEN c.escalated THEN greatest(0, extract(epoch FROM c.escalated_at - c.first_ts))::float8
  END AS seconds_to_escalation
FROM conversations c{join}
WHERE c.sample_weight > 0"""


OLD_ESCALATION = _escalation_view("t.first_turn", """
LEFT JOIN LATERAL (SELECT min(e.turn) AS first_turn FROM events e
                   WHERE e.conversation_id = c.conversation_id) t ON c.escalated""")
NEW_ESCALATION = _escalation_view("c.first_turn", "")

OLD_PIPELINE = """
WITH e AS (
  SELECT date_trunc('minute', ingested_at) AS minute, count(*) AS events,
    percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM ingested_at - ts))
      AS delay_p50_s,
    percentile_cont(0.95) WITHIN GROUP (ORDER BY extract(epoch FROM ingested_at - ts))
      AS delay_p95_s
  FROM events GROUP BY 1),
d AS (SELECT date_trunc('minute', received_at) AS minute, count(*) AS dead_letters
      FROM dead_letters GROUP BY 1)
SELECT coalesce(e.minute, d.minute) AS time, coalesce(e.events, 0) AS events,
  coalesce(d.dead_letters, 0) AS dead_letters,
  coalesce(d.dead_letters, 0)::float8 / NULLIF(coalesce(e.events, 0) + coalesce(d.dead_letters, 0),
    0) AS dead_letter_share,
  e.delay_p50_s, e.delay_p95_s
FROM e FULL JOIN d ON d.minute = e.minute"""


def _quantile(q: float) -> str:
    return f"min(0.001 * power(2, bucket / 4.0)) FILTER (WHERE cum >= {q} * total)::float8"


# A filter on ``time`` is pushed into both branches of the UNION (it is the grouping key) and
# the delay quantiles are computed only for the minutes that pass it.
NEW_PIPELINE = f"""
SELECT m.minute AS time, m.events, m.dead_letters,
  m.dead_letters::float8 / NULLIF(m.events + m.dead_letters, 0) AS dead_letter_share,
  q.delay_p50_s, q.delay_p95_s
FROM (
  SELECT minute, sum(events)::bigint AS events, sum(dead_letters)::bigint AS dead_letters
  FROM (SELECT minute, events, 0::bigint AS dead_letters FROM event_minutes
        UNION ALL
        SELECT date_trunc('minute', received_at, 'UTC'), 0::bigint, 1::bigint FROM dead_letters
       ) u
  GROUP BY minute) m
LEFT JOIN LATERAL (
  SELECT {_quantile(0.5)} AS delay_p50_s, {_quantile(0.95)} AS delay_p95_s
  FROM (SELECT bucket, sum(events) OVER (ORDER BY bucket) AS cum, sum(events) OVER () AS total
        FROM ingest_delay_bins b WHERE b.minute = m.minute) h
) q ON m.events > 0"""

EVENT_MINUTES = """
SELECT minute AS time, type, agent_id, NULLIF(domain, '') AS domain, NULLIF(tier, 0) AS tier,
  events
FROM event_minutes"""


def upgrade() -> None:
    op.add_column("conversations", sa.Column("first_turn", sa.Integer(), nullable=True))
    op.create_table(
        "event_minutes",
        sa.Column("minute", sa.DateTime(timezone=True), nullable=False),
        sa.Column("type", sa.Text(), nullable=False),
        sa.Column("agent_id", sa.Text(), nullable=False),
        sa.Column("domain", sa.Text(), server_default="", nullable=False),
        sa.Column("tier", sa.SmallInteger(), server_default="0", nullable=False),
        sa.Column("events", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("minute", "type", "agent_id", "domain", "tier",
                                name="pk_event_minutes"),
    )
    op.create_table(
        "ingest_delay_bins",
        sa.Column("minute", sa.DateTime(timezone=True), nullable=False),
        sa.Column("bucket", sa.SmallInteger(), nullable=False),
        sa.Column("events", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("minute", "bucket", name="pk_ingest_delay_bins"),
    )
    op.create_table(
        "segment_values",
        sa.Column("kind", sa.Text(), nullable=False),
        sa.Column("value", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("kind", "value", name="pk_segment_values"),
    )
    op.execute("""
UPDATE conversations c SET first_turn = t.first_turn
FROM (SELECT conversation_id, min(turn) AS first_turn FROM events GROUP BY 1) t
WHERE t.conversation_id = c.conversation_id AND t.first_turn IS NOT NULL""")
    op.execute("""
INSERT INTO event_minutes (minute, type, agent_id, domain, tier, events)
SELECT date_trunc('minute', ingested_at, 'UTC'), type, agent_id, coalesce(domain, ''),
  coalesce(tier, 0), count(*)
FROM events GROUP BY 1, 2, 3, 4, 5""")
    op.execute(f"""
INSERT INTO ingest_delay_bins (minute, bucket, events)
SELECT date_trunc('minute', ingested_at, 'UTC'), {BUCKET}, count(*) FROM events GROUP BY 1, 2""")
    op.execute("""
INSERT INTO segment_values (kind, value)
SELECT DISTINCT v.kind, v.value FROM conversations c
CROSS JOIN LATERAL (VALUES ('agent', c.agent_id), ('domain', c.domain), ('tier', c.tier::text))
  AS v(kind, value)
WHERE v.value IS NOT NULL""")
    op.execute("DROP VIEW v_escalation_conversations")
    op.execute(f"CREATE VIEW v_escalation_conversations AS {NEW_ESCALATION}")
    op.execute("DROP VIEW v_pipeline")
    op.execute(f"CREATE VIEW v_pipeline AS {NEW_PIPELINE}")
    op.execute(f"CREATE VIEW v_event_minutes AS {EVENT_MINUTES}")


def downgrade() -> None:
    op.execute("DROP VIEW v_event_minutes")
    op.execute("DROP VIEW v_pipeline")
    op.execute(f"CREATE VIEW v_pipeline AS {OLD_PIPELINE}")
    op.execute("DROP VIEW v_escalation_conversations")
    op.execute(f"CREATE VIEW v_escalation_conversations AS {OLD_ESCALATION}")
    op.drop_table("segment_values")
    op.drop_table("ingest_delay_bins")
    op.drop_table("event_minutes")
    op.drop_column("conversations", "first_turn")
