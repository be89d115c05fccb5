"""``v_alerts`` shows flapping alerts: the columns ``flapping``, ``flap_share`` (from the
alert state) and ``status``, and alerts marked flapping that are not firing at the moment
(their notifications are held; the latest history row is the notification that says why).
Readers that want firing alerts only filter on ``status = 'firing'``.

The alert state itself is JSONB (``alert_states.state``), so the new state fields (hysteresis
``clear_since``, flap ``changes``, ``flapping``, ``flap_share``) need no column. The
downgrade restores 0005's view.

Revision ID: 0025
Revises: 0024
Create Date: 2026-11-27 15:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0025"
down_revision: str | None = "0024"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_COLUMNS = """
SELECT (s.state->>'fired_at')::timestamptz AS time, s.fingerprint, s.rule,
  s.scope->>'agent' AS agent_id, s.scope->>'domain' AS domain,
  (s.scope->>'tier')::smallint AS tier, h.severity, h.summary,
  (s.state->>'last_value')::float8 AS value, h.threshold,
  (s.state->>'silenced')::boolean AS silenced, s.state->>'acked_by' AS acked_by, s.updated_at"""
_FROM = """
FROM alert_states s
LEFT JOIN LATERAL (SELECT severity, summary, threshold FROM alert_history a
                   WHERE a.fingerprint = s.fingerprint ORDER BY a.at DESC, a.id DESC LIMIT 1) h
  ON TRUE"""

NEW = (
    _COLUMNS
    + """,
  coalesce((s.state->>'flapping')::boolean, false) AS flapping,
  coalesce((s.state->>'flap_share')::float8, 0) AS flap_share, s.status"""
    + _FROM
    + """
WHERE s.status = 'firing' OR coalesce((s.state->>'flapping')::boolean, false)"""
)
OLD = _COLUMNS + _FROM + "\nWHERE s.status = 'firing'"


def upgrade() -> None:
    op.execute(f"CREATE OR REPLACE VIEW v_alerts AS {NEW}")


def downgrade() -> None:
    op.execute("DROP VIEW v_alerts")
    op.execute(f"CREATE VIEW v_alerts AS {OLD}")
    op.execute(
        "DO $$ BEGIN IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'monitor_readonly') THEN"
        " GRANT SELECT ON v_alerts TO monitor_readonly; END IF; END $$"
    )
