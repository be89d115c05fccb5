"""gate view: one row per ``gate`` decision event with its conversation's outcome (issue 11)

``v_gate_decisions`` is what the ``gate`` Grafana dashboard and ``monitor report`` read: each
decision event of ``POST /v1/gate`` (``events.type = 'gate'``) with its fields taken out of the
payload (decision, stated and calibrated confidence, threshold, latency, degraded, number of
findings) and the outcome of its conversation from the ``conversations`` roll-up. A time filter
on ``time`` (= the event's ``ts``) and the ``type = 'gate'`` condition are served by the partial
index ``ix_events_gate_ts`` (``events (ts) WHERE type = 'gate'``, migration 0015) and partition
pruning: the view reads only the gate events of the range, never all events.
``latest`` is not a column: a conversation's latest decision in a range is picked by the reader
(``DISTINCT ON (conversation_id) ... ORDER BY conversation_id, time DESC, event_id DESC``), as
``monitor gate`` does (monitor/gate/effect_repo.py), so both count the same conversations.

The read-only role of 0010 gets SELECT explicitly (its default privileges cover it too).

Revision ID: 0016
Revises: 0015
Create Date: 2026-11-23 21:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0016"
down_revision: str | None = "0015"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

GATE_DECISIONS = """
SELECT g.ts AS time, g.event_id, g.conversation_id, g.agent_id, NULLIF(g.domain, '') AS domain,
  g.tier, g.body->'gate'->>'decision' AS decision,
  (g.body->'gate'->>'confidence')::float8 AS confidence,
  (g.body->'gate'->>'calibrated')::float8 AS calibrated,
  (g.body->'gate'->>'threshold')::float8 AS threshold,
  (g.body->'gate'->>'latency_ms')::float8 AS latency_ms,
  coalesce(g.body->'gate'->>'degraded', '') <> '' AS degraded,
  NULLIF(g.body->'gate'->>'degraded', '') AS degraded_reason,
  coalesce(jsonb_array_length(g.body->'gate'->'findings'), 0) AS findings,
  c.outcome_success IS NOT NULL AS outcome_known, NOT c.outcome_success AS failed
FROM events g LEFT JOIN conversations c ON c.conversation_id = g.conversation_id
WHERE g.type = 'gate'"""

GRANT = """
DO $$
BEGIN
  IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'monitor_readonly') THEN
    GRANT SELECT ON v_gate_decisions TO monitor_readonly;
  END IF;
END
$$"""


def upgrade() -> None:
    op.execute(f"CREATE VIEW v_gate_decisions AS {GATE_DECISIONS}")
    op.execute(GRANT)


def downgrade() -> None:
    op.execute("DROP VIEW v_gate_decisions")
