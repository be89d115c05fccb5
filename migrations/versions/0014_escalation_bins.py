"""escalation roll-up: ``escalation_bins`` (issue 13, item 1)

Sampled conversations counted per hour / day of ``first_ts`` and escalation key (segment,
minimum confidence in thousandths, escalated, outcome, sampling weight, turns and seconds to
escalation), so the escalation reads (CLI thresholds / escalation, alerts, dashboards) sum a
few rows instead of reading one row per conversation; ``v_escalation_bins`` shows it decoded.
An index on ``conversations.first_ts`` serves the partial-hour edges those reads take from
``conversations`` directly. The upgrade back-fills the roll-up from the stored conversations;
the downgrade drops all of it.

Revision ID: 0014
Revises: 0013
Create Date: 2026-11-23 21:20:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0014"
down_revision: str | None = "0013"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

ROLE = "monitor_readonly"
# frozen copies of monitor.ingest.escalation_sql.key_select("c", 0 / 1) as this revision was
# written (kind 0: the conversation; kind 1: the timing of an escalated one)
KEY0 = """
0::smallint, c.agent_id, coalesce(c.agent_version, ''), coalesce(c.domain, ''), coalesce(c.tier,
0)::smallint, coalesce(round(c.min_confidence * 1000)::smallint, -1::smallint), c.escalated,
(CASE WHEN c.outcome_success IS NULL THEN -1 WHEN c.outcome_success THEN 1 ELSE 0
END)::smallint, c.sample_weight, -1, -1::smallint"""
KEY1 = """
1::smallint, c.agent_id, coalesce(c.agent_version, ''), coalesce(c.domain, ''), coalesce(c.tier,
0)::smallint, -1::smallint, true, -1::smallint, c.sample_weight, coalesce(c.escalation_turn -
coalesce(c.first_turn, 0), -1), (CASE WHEN c.escalated_at IS NOT NULL THEN (CASE WHEN
greatest(0, extract(epoch FROM c.escalated_at - c.first_ts))::float8 <= 0.001 THEN 0 ELSE
ceil(16 * ln(greatest(0, extract(epoch FROM c.escalated_at - c.first_ts))::float8 / 0.001) /
ln(2))::int END) ELSE -1 END)::smallint"""
KEY_COLUMNS = ("kind", "agent_id", "agent_version", "domain", "tier", "conf_milli", "escalated",
               "outcome", "weight", "turns", "seconds_bucket")
N_BINS = 10  # the dashboards' confidence bins, as in v_escalation_conversations (0013)


def _bin(conf: str) -> str:
    terms = " + ".join(f"({conf} >= {k}::float8 / {N_BINS})::int" for k in range(1, N_BINS))
    return f"({terms})"


VIEW = f"""
SELECT resolution, window_start AS time, kind, agent_id,
  nullif(agent_version, '') AS agent_version, nullif(domain, '') AS domain, nullif(tier, 0) AS tier,
  CASE WHEN conf_milli >= 0 THEN conf_milli::float8 / 1000 END AS min_confidence,
  CASE WHEN conf_milli >= 0 THEN {_bin("(conf_milli::float8 / 1000)")} END AS confidence_bin,
  escalated, CASE outcome WHEN 1 THEN true WHEN 0 THEN false END AS outcome_success,
  outcome >= 0 AS outcome_known, outcome = 0 AS failed,
  weight, conversations, weight * conversations AS weight_sum,
  CASE WHEN turns >= 0 THEN turns END AS turns_to_escalation,
  CASE WHEN seconds_bucket = 0 THEN 0.0::float8
       WHEN seconds_bucket > 0 THEN 0.001 * power(2.0::float8, seconds_bucket / 16.0::float8)
  END AS seconds_to_escalation
FROM escalation_bins WHERE conversations > 0"""

# the rows of v_escalation_bins for the hours whose start is in [lo, hi] (Grafana's
# $__timeFilter), read as whole UTC days (1d rows) in the middle and hours (1h rows) at the
# ends: the same sums as the 1h rows alone, about 24 times fewer rows over a week
BINS_IN = """
CREATE FUNCTION escalation_bins_in(lo timestamptz, hi timestamptz)
RETURNS SETOF v_escalation_bins LANGUAGE sql STABLE AS $$
  SELECT v.* FROM v_escalation_bins v
  CROSS JOIN LATERAL (SELECT
    date_trunc('day', lo, 'UTC') + CASE WHEN lo = date_trunc('day', lo, 'UTC')
      THEN interval '0' ELSE interval '1 day' END AS d_lo,
    date_trunc('day', hi, 'UTC') AS d_hi) AS d
  WHERE (v.resolution = '1d' AND v.time >= d.d_lo AND v.time < d.d_hi)
     OR (v.resolution = '1h' AND v.time >= lo AND v.time <= hi
         AND NOT (v.time >= d.d_lo AND v.time < d.d_hi))
$$"""


def upgrade() -> None:
    op.create_table(
        "escalation_bins",
        sa.Column("resolution", sa.Text(), nullable=False),
        sa.Column("window_start", sa.DateTime(timezone=True), nullable=False),
        sa.Column("kind", sa.SmallInteger(), nullable=False),
        sa.Column("agent_id", sa.Text(), nullable=False),
        sa.Column("agent_version", sa.Text(), nullable=False),
        sa.Column("domain", sa.Text(), nullable=False),
        sa.Column("tier", sa.SmallInteger(), nullable=False),
        sa.Column("conf_milli", sa.SmallInteger(), nullable=False),
        sa.Column("escalated", sa.Boolean(), nullable=False),
        sa.Column("outcome", sa.SmallInteger(), nullable=False),
        sa.Column("weight", sa.Double(), nullable=False),
        sa.Column("turns", sa.Integer(), nullable=False),
        sa.Column("seconds_bucket", sa.SmallInteger(), nullable=False),
        sa.Column("conversations", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint(
            "resolution", "window_start", *KEY_COLUMNS, name="pk_escalation_bins"
        ),
    )
    op.create_index("ix_conversations_first_ts", "conversations", ["first_ts"])
    op.execute(f"""
INSERT INTO escalation_bins (resolution, window_start, {", ".join(KEY_COLUMNS)}, conversations)
SELECT r.resolution, date_trunc(r.unit, k.first_ts, 'UTC'), {", ".join(KEY_COLUMNS)}, count(*)
FROM (SELECT c.first_ts, {KEY0} FROM conversations c WHERE c.sample_weight > 0
      UNION ALL
      SELECT c.first_ts, {KEY1} FROM conversations c WHERE c.sample_weight > 0 AND c.escalated
     ) AS k(first_ts, {", ".join(KEY_COLUMNS)})
CROSS JOIN (VALUES ('1h', 'hour'), ('1d', 'day')) AS r(resolution, unit)
GROUP BY {", ".join(str(i) for i in range(1, len(KEY_COLUMNS) + 3))}""")
    op.execute(f"CREATE VIEW v_escalation_bins AS {VIEW}")
    op.execute(BINS_IN)
    op.execute(f"GRANT SELECT ON escalation_bins, v_escalation_bins TO {ROLE}")


def downgrade() -> None:
    op.execute("DROP FUNCTION escalation_bins_in(timestamptz, timestamptz)")
    op.execute("DROP VIEW v_escalation_bins")
    op.drop_index("ix_conversations_first_ts", table_name="conversations")
    op.drop_table("escalation_bins")
