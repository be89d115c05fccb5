"""dashboard reads: ``v_alerts`` shows its summary's numbers; ``v_verdict_rows``

``v_alerts`` gains ``estimate``, ``bound``, ``samples`` and ``notified_at``, all from the
notification its summary was rendered from: the latest ``firing`` or ``repeat`` row of the
alert's current episode (as ``monitor report``'s alert table reads it). For a rule on a bound
(``estimate: lower_bound``) ``estimate`` is the point estimate and ``bound`` the bound the rule
compared; for any other rule ``estimate`` is the value it compared and ``bound`` is NULL.
``summary`` and ``threshold`` come from that row too (else, for an alert not notified in its
episode, silenced or held as flapping, from its latest history row as before: the numbers are
then NULL). ``value`` stays the state's latest observed value (it moves after the summary).

``v_verdict_rows``: one row per verdict (``v_verdicts`` without the categories unnested), for
the judges panels that count verdicts, not categories; ``ix_verdicts_created_at_rows`` replaces
``ix_verdicts_created_at`` with the same key and the columns those panels read included, so a
range of verdicts is read from the index alone (no categories unnested, no heap visited; the
conversation is joined only for a domain or tier filter or the outcome).

``ix_escalation_bins_seconds_1h``: the hourly seconds-to-escalation marginals (kind 2) by window
with the columns "Time to escalation per agent" reads, so the panel reads its rows from the index
alone (one row in six of the table at 7 days) instead of filtering the heap of every kind.

The downgrade restores 0033's ``v_alerts`` and ``ix_verdicts_created_at`` and drops the rest.

Revision ID: 0038
Revises: 0037
Create Date: 2026-12-07 18:30:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0038"
down_revision: str | None = "0037"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_HEAD = """
SELECT (s.state->>'fired_at')::timestamptz AS time, s.fingerprint, s.rule,
  s.scope->>'agent' AS agent_id, s.scope->>'domain' AS domain,
  (s.scope->>'tier')::smallint AS tier, h.severity, {summary} AS summary,
  (s.state->>'last_value')::float8 AS value, {threshold} AS threshold,
  (s.state->>'silenced')::boolean AS silenced, s.state->>'acked_by' AS acked_by, s.updated_at,
  coalesce((s.state->>'flapping')::boolean, false) AS flapping,
  coalesce((s.state->>'flap_share')::float8, 0) AS flap_share, s.status, i.id AS incident_id"""
_FROM = """
FROM alert_states s
LEFT JOIN LATERAL (SELECT severity, summary, threshold FROM alert_history a
                   WHERE a.fingerprint = s.fingerprint ORDER BY a.at DESC, a.id DESC LIMIT 1) h
  ON TRUE
LEFT JOIN LATERAL (SELECT id FROM alert_incidents c
                   WHERE c.members @> jsonb_build_array(s.fingerprint)
                   ORDER BY c.opened_at DESC LIMIT 1) i
  ON TRUE"""
_NOTIFIED = """
LEFT JOIN LATERAL (SELECT summary, value, estimate, threshold, samples, at
  FROM alert_history a
  WHERE a.fingerprint = s.fingerprint AND a.kind IN ('firing', 'repeat')
    AND a.at >= (s.state->>'fired_at')::timestamptz
  ORDER BY a.at DESC, a.id DESC LIMIT 1) n ON TRUE"""
_WHERE = """
WHERE s.status = 'firing' OR coalesce((s.state->>'flapping')::boolean, false)"""

OLD_ALERTS = _HEAD.format(summary="h.summary", threshold="h.threshold") + _FROM + _WHERE
NEW_ALERTS = (
    _HEAD.format(
        summary="CASE WHEN n.at IS NOT NULL THEN n.summary ELSE h.summary END",
        threshold="CASE WHEN n.at IS NOT NULL THEN n.threshold ELSE h.threshold END",
    )
    + """,
  coalesce(n.estimate, n.value) AS estimate,
  CASE WHEN n.estimate IS NOT NULL THEN n.value END AS bound,
  n.samples, n.at AS notified_at"""
    + _FROM
    + _NOTIFIED
    + _WHERE
)

VERDICT_ROWS = """
SELECT v.created_at AS time, v.id AS verdict_id, v.conversation_id, NULLIF(v.item_id, '')
  AS item_id, v.agent_id, c.domain, c.tier, v.judge, v.judge_version, v.status, v.label,
  v.score, v.latency_ms, v.error, c.outcome_success
FROM verdicts v
LEFT JOIN conversations c ON c.conversation_id = v.conversation_id"""

_GRANT = (
    "DO $$ BEGIN IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'monitor_readonly') THEN"
    " GRANT SELECT ON {name} TO monitor_readonly; END IF; END $$"
)


#: what the judges panels read of a verdict besides its time
VERDICT_ROW_COLUMNS = [
    "agent_id",
    "judge",
    "judge_version",
    "status",
    "label",
    "latency_ms",
    "conversation_id",
]


def upgrade() -> None:
    op.execute(f"CREATE OR REPLACE VIEW v_alerts AS {NEW_ALERTS}")
    op.execute(f"CREATE VIEW v_verdict_rows AS {VERDICT_ROWS}")
    op.execute(_GRANT.format(name="v_verdict_rows"))
    op.create_index(
        "ix_verdicts_created_at_rows",
        "verdicts",
        ["created_at"],
        postgresql_include=VERDICT_ROW_COLUMNS,
    )
    op.drop_index("ix_verdicts_created_at", table_name="verdicts")
    op.create_index(
        "ix_escalation_bins_seconds_1h",
        "escalation_bins",
        ["window_start"],
        postgresql_include=["agent_id", "domain", "tier", "seconds_bucket", "conversations"],
        postgresql_where=sa.text("resolution = '1h' AND kind = 2"),
    )


def downgrade() -> None:
    op.drop_index("ix_escalation_bins_seconds_1h", table_name="escalation_bins")
    op.create_index("ix_verdicts_created_at", "verdicts", ["created_at"])
    op.drop_index("ix_verdicts_created_at_rows", table_name="verdicts")
    op.execute("DROP VIEW v_verdict_rows")
    op.execute("DROP VIEW v_alerts")
    op.execute(f"CREATE VIEW v_alerts AS {OLD_ALERTS}")
    op.execute(_GRANT.format(name="v_alerts"))
