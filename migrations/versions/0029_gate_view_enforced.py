"""gate view: the ``enforced`` column, so readers show shadow decisions apart

``v_gate_decisions`` (migration 0016) gains ``enforced`` (last column): false for a decision of a
policy rule in ``mode: shadow`` (the agent was answered ``proceed`` and sent its own answer, so
the conversation's outcome measures what enforcing would prevent and cost), true otherwise
(events written before shadow mode have no ``enforced`` field: they were enforced). The gate
Grafana dashboard splits its effectiveness table and its decision series by it and keeps its
headline rates to enforced decisions. ``CREATE OR REPLACE VIEW`` keeps the grants of 0016.

Downgrade drops the column (drop and re-create the view of 0016, grant included).

Revision ID: 0029
Revises: 0028
Create Date: 2026-11-27 17:40:00
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0029"
down_revision: str | None = "0028"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_COLUMNS = """
SELECT g.ts AS time, g.event_id, g.conversation_id, g.agent_id, NULLIF(g.domain, '') AS domain,
  g.tier, g.body->'gate'->>'decision' AS decision,
  (g.body->'gate'->>'confidence')::float8 AS confidence,
  (g.body->'gate'->>'calibrated')::float8 AS calibrated,
  (g.body->'gate'->>'threshold')::float8 AS threshold,
  (g.body->'gate'->>'latency_ms')::float8 AS latency_ms,
  coalesce(g.body->'gate'->>'degraded', '') <> '' AS degraded,
  NULLIF(g.body->'gate'->>'degraded', '') AS degraded_reason,
  coalesce(jsonb_array_length(g.body->'gate'->'findings'), 0) AS findings,
  c.outcome_success IS NOT NULL AS outcome_known, NOT c.outcome_success AS failed"""
_FROM = """
FROM events g LEFT JOIN conversations c ON c.conversation_id = g.conversation_id
WHERE g.type = 'gate'"""
_ENFORCED = """,
  coalesce((g.body->'gate'->>'enforced')::boolean, true) AS enforced"""

GRANT = """
DO $$
BEGIN
  IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'monitor_readonly') THEN
    GRANT SELECT ON v_gate_decisions TO monitor_readonly;
  END IF;
END
$$"""


def upgrade() -> None:
    op.execute(f"CREATE OR REPLACE VIEW v_gate_decisions AS {_COLUMNS}{_ENFORCED}{_FROM}")


def downgrade() -> None:
    op.execute("DROP VIEW v_gate_decisions")
    op.execute(f"CREATE VIEW v_gate_decisions AS {_COLUMNS}{_FROM}")
    op.execute(GRANT)
