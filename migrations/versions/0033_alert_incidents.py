"""alert incidents: ``alert_incidents``, ``alert_history.incident_id``, ``v_alerts.incident_id``

An incident gathers the alerts of one agent (the rules file's ``incident_by``) that are open
together, so they page once (monitor/alerts/incidents.py). ``alert_incidents`` holds each one
(its state as JSONB, plus the columns listings and dashboards filter on; ``members`` the JSON
array of its alerts' fingerprints); every history row names the incident of its notification;
``v_alerts`` gains the column ``incident_id`` (the latest incident the alert joined), so the
dashboards' alert tables show which alerts paged together.

The downgrade drops the table and the column and restores 0025's view.

Revision ID: 0033
Revises: 0032
Create Date: 2026-12-06 10:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision: str = "0033"
down_revision: str | None = "0032"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_COLUMNS = """
SELECT (s.state->>'fired_at')::timestamptz AS time, s.fingerprint, s.rule,
  s.scope->>'agent' AS agent_id, s.scope->>'domain' AS domain,
  (s.scope->>'tier')::smallint AS tier, h.severity, h.summary,
  (s.state->>'last_value')::float8 AS value, h.threshold,
  (s.state->>'silenced')::boolean AS silenced, s.state->>'acked_by' AS acked_by, s.updated_at,
  coalesce((s.state->>'flapping')::boolean, false) AS flapping,
  coalesce((s.state->>'flap_share')::float8, 0) AS flap_share, s.status"""
_FROM = """
FROM alert_states s
LEFT JOIN LATERAL (SELECT severity, summary, threshold FROM alert_history a
                   WHERE a.fingerprint = s.fingerprint ORDER BY a.at DESC, a.id DESC LIMIT 1) h
  ON TRUE"""
_WHERE = """
WHERE s.status = 'firing' OR coalesce((s.state->>'flapping')::boolean, false)"""

NEW = (
    _COLUMNS
    + ", i.id AS incident_id"
    + _FROM
    + """
LEFT JOIN LATERAL (SELECT id FROM alert_incidents c
                   WHERE c.members @> jsonb_build_array(s.fingerprint)
                   ORDER BY c.opened_at DESC LIMIT 1) i
  ON TRUE"""
    + _WHERE
)
OLD = _COLUMNS + _FROM + _WHERE
GRANT = (
    "DO $$ BEGIN IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'monitor_readonly') THEN"
    " GRANT SELECT ON v_alerts TO monitor_readonly; END IF; END $$"
)


def upgrade() -> None:
    op.create_table(
        "alert_incidents",
        sa.Column("id", sa.Text(), nullable=False),
        sa.Column("incident_key", sa.Text(), nullable=False),
        sa.Column("labels", JSONB(), nullable=False),
        sa.Column("status", sa.Text(), nullable=False),
        sa.Column("severity", sa.Text(), nullable=False),
        sa.Column("opened_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("resolved_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("members", JSONB(), nullable=False),
        sa.Column("pages", sa.Integer(), nullable=False),
        sa.Column("state", JSONB(), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column(
            "updated_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False
        ),
        sa.PrimaryKeyConstraint("id", name="pk_alert_incidents"),
    )
    op.create_index("ix_alert_incidents_status", "alert_incidents", ["status"])
    op.create_index(
        "ix_alert_incidents_incident_key_opened_at",
        "alert_incidents",
        ["incident_key", "opened_at"],
    )
    op.create_index("ix_alert_incidents_opened_at", "alert_incidents", ["opened_at"])
    # the evaluation's live incidents: open, or resolved within the window
    op.create_index("ix_alert_incidents_resolved_at", "alert_incidents", ["resolved_at"])
    op.add_column("alert_history", sa.Column("incident_id", sa.Text(), nullable=True))
    op.create_index("ix_alert_history_incident_id", "alert_history", ["incident_id"])
    op.execute(f"CREATE OR REPLACE VIEW v_alerts AS {NEW}")


def downgrade() -> None:
    op.execute("DROP VIEW v_alerts")
    op.execute(f"CREATE VIEW v_alerts AS {OLD}")
    op.execute(GRANT)
    op.drop_index("ix_alert_history_incident_id", table_name="alert_history")
    op.drop_column("alert_history", "incident_id")
    op.drop_table("alert_incidents")
