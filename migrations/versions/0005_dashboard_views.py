"""dashboard views: the SQL contract of the Grafana dashboards and `monitor report`

Views only (no data is moved); panels query these instead of the tables, so a table change
only has to keep the views' columns. Segment sentinels of the analytics tables (``''`` for a
missing agent version or domain, ``0`` for a missing tier) are NULL in every view, and every
view has ``agent_id``, ``domain``, ``tier`` columns where the scope applies.

- ``v_calibration_bins``: one row per (resolution, window, segment, confidence bin) with the
  additive sums and the weight-normalised ``accuracy`` / ``mean_confidence`` of that row.
- ``v_calibration_windows``: one row per (resolution, window, segment) with ``weight``,
  ``sum_sq_err`` and ``d0 .. d9`` = ``Σw·y - Σw·conf`` of bin 0 .. 9. Any roll-up of rows is
  exact: ``ECE = (|Σd0| + ... + |Σd9|) / Σweight`` and ``Brier = Σsum_sq_err / Σweight``
  (sum the rows first; never average per-window ECEs).
- ``v_calibration_maps``: the latest recalibration map per (agent, domain), ECE before/after.
- ``v_escalation_conversations``: sampled conversations (sample weight > 0) with their minimum
  confidence, its bin, escalated, failed, weight, turns and seconds to escalation.
- ``v_drift_checks``: drift checks with ``time`` = end of the recent window.
- ``v_verdicts``: one row per (verdict, category), categories unnested (``category`` NULL when
  none; ``verdict_row`` true on exactly one row per verdict), with the conversation's outcome.
- ``v_alerts``: firing alerts (alert_states) with scope, severity and summary.
- ``v_alert_annotations``: alert_history as Grafana annotations (time, text, tags).
- ``v_pipeline``: per minute: events ingested, dead letters, ingest delay percentiles.

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-23 09:00:00.000000+00:00
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

N_BINS = 10  # monitor.analytics.bins.DEFAULT_BINS when this revision was written


def _bin(conf: str) -> str:
    """Bin index of ``conf`` exactly as monitor.analytics.bins.bin_index (frozen copy)."""
    terms = " + ".join(f"({conf} >= {k}::float8 / {N_BINS})::int" for k in range(1, N_BINS))
    return f"({terms})"


_SEGMENT = "agent_id, NULLIF(agent_version, '') AS agent_version, NULLIF(domain, '') AS domain, " \
    "NULLIF(tier, 0) AS tier"

_WINDOW_END = (
    "window_start + CASE resolution WHEN '1m' THEN interval '1 minute' "
    "WHEN '1h' THEN interval '1 hour' ELSE interval '1 day' END"
)

_DIFFS = ",\n  ".join(
    f"sum(sum_y - sum_conf) FILTER (WHERE bin = {b}) AS d{b}" for b in range(N_BINS)
)
_ABS = " + ".join(f"abs(coalesce(sum(sum_y - sum_conf) FILTER (WHERE bin = {b}), 0))"
                  for b in range(N_BINS))

VIEWS: dict[str, str] = {
    "v_calibration_bins": f"""
SELECT resolution, window_start AS time, window_start, {_WINDOW_END} AS window_end,
  {_SEGMENT}, bin, bin::float8 / {N_BINS} AS bin_lo, (bin + 1)::float8 / {N_BINS} AS bin_hi,
  count, weight, sum_conf, sum_y, sum_sq_err, sum_w2,
  sum_y / NULLIF(weight, 0) AS accuracy, sum_conf / NULLIF(weight, 0) AS mean_confidence
FROM calibration_bins""",
    "v_calibration_windows": f"""
SELECT resolution, window_start AS time, window_start, min({_WINDOW_END}) AS window_end,
  {_SEGMENT}, sum(count)::bigint AS count, sum(weight) AS weight, sum(sum_conf) AS sum_conf,
  sum(sum_y) AS sum_y, sum(sum_sq_err) AS sum_sq_err, sum(sum_w2) AS sum_w2,
  {_DIFFS},
  ({_ABS}) / NULLIF(sum(weight), 0) AS ece,
  sum(sum_sq_err) / NULLIF(sum(weight), 0) AS brier
FROM calibration_bins
GROUP BY resolution, window_start, agent_id, agent_version, domain, tier""",
    "v_calibration_maps": """
SELECT m.fitted_at AS time, m.agent_id, NULLIF(m.domain, '') AS domain, m.version, m.method,
  m.n_train, m.n_holdout, m.ece_before, m.ece_after, m.brier_before, m.brier_after,
  m.data_from, m.data_to, m.fitted_at
FROM calibration_maps m
WHERE m.version = (SELECT max(version) FROM calibration_maps l
                   WHERE l.agent_id = m.agent_id AND l.domain = m.domain)""",
    "v_escalation_conversations": f"""
SELECT c.first_ts AS time, c.conversation_id, c.agent_id, c.agent_version, c.domain, c.tier,
  c.min_confidence,
  CASE WHEN c.min_confidence IS NOT NULL THEN {_bin("c.min_confidence")} END AS confidence_bin,
  c.escalated, c.escalation_trigger, c.escalated_at,
  c.outcome_success IS NOT NULL AS outcome_known, NOT c.outcome_success AS failed,
  c.sample_weight AS weight,
  CASE WHEN c.escalated THEN c.escalation_turn - coalesce(t.first_turn, 0) END
    AS turns_to_escalation,
  CASE WHEN c.escalated THEN greatest(0, extract(epoch FROM c.escalated_at - c.first_ts))::float8
  END AS seconds_to_escalation
FROM conversations c
LEFT JOIN LATERAL (SELECT min(e.turn) AS first_turn FROM events e
                   WHERE e.conversation_id = c.conversation_id) t ON c.escalated
WHERE c.sample_weight > 0""",
    "v_drift_checks": f"""
SELECT recent_to AS time, id, checked_at, {_SEGMENT}, baseline_from, baseline_to, recent_from,
  recent_to, n_baseline, n_recent, psi, ks_statistic, ks_pvalue, accuracy_baseline,
  accuracy_recent, accuracy_pvalue, ece_baseline, ece_recent, ece_delta, ece_pvalue, fired,
  fired_tests, reason
FROM drift_checks""",
    "v_verdicts": """
SELECT v.created_at AS time, v.id AS verdict_id, v.conversation_id, NULLIF(v.item_id, '')
  AS item_id, v.agent_id, c.domain, c.tier, v.judge, v.judge_version, v.status, v.label,
  v.score, cat.category,
  CASE WHEN cat.category LIKE 'fabrication:%' THEN substr(cat.category, 13) END
    AS fabrication_type,
  coalesce(cat.n, 1) = 1 AS verdict_row, v.latency_ms, v.error,
  c.outcome_success,
  CASE WHEN v.label IS NOT NULL AND c.outcome_success IS NOT NULL
    THEN (v.label = 1) = c.outcome_success END AS agrees_with_outcome
FROM verdicts v
LEFT JOIN conversations c ON c.conversation_id = v.conversation_id
LEFT JOIN LATERAL jsonb_array_elements_text(
  CASE WHEN jsonb_typeof(v.categories) = 'array' THEN v.categories ELSE '[]' END)
  WITH ORDINALITY AS cat(category, n) ON TRUE""",
    "v_alerts": """
SELECT (s.state->>'fired_at')::timestamptz AS time, s.fingerprint, s.rule,
  s.scope->>'agent' AS agent_id, s.scope->>'domain' AS domain,
  (s.scope->>'tier')::smallint AS tier, h.severity, h.summary,
  (s.state->>'last_value')::float8 AS value, h.threshold,
  (s.state->>'silenced')::boolean AS silenced, s.state->>'acked_by' AS acked_by, s.updated_at
FROM alert_states s
LEFT JOIN LATERAL (SELECT severity, summary, threshold FROM alert_history a
                   WHERE a.fingerprint = s.fingerprint ORDER BY a.at DESC, a.id DESC LIMIT 1) h
  ON TRUE
WHERE s.status = 'firing'""",
    "v_alert_annotations": """
SELECT a.at AS time, a.at AS time_end, a.kind, a.rule, a.severity, a.fingerprint,
  a.scope->>'agent' AS agent_id, a.scope->>'domain' AS domain,
  (a.scope->>'tier')::smallint AS tier, a.value, a.threshold,
  upper(a.kind) || ': ' || a.summary AS text,
  concat_ws(',', 'alert', a.kind, a.severity, a.rule) AS tags
FROM alert_history a""",
    "v_pipeline": """
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
FROM e FULL JOIN d ON d.minute = e.minute""",
}


def upgrade() -> None:
    for name, sql in VIEWS.items():
        op.execute(f"CREATE VIEW {name} AS {sql}")


def downgrade() -> None:
    for name in reversed(VIEWS):
        op.execute(f"DROP VIEW IF EXISTS {name}")
