"""conversations one step from every number: the Conversation dashboard's views, the Examples
panels' rules, SQL redaction, and the alert's estimate in its history

- ``monitor_redact(text)``: the redaction of ``monitor.alerts.redact.redact`` in SQL (same
  patterns in the same order, Luhn check of card numbers, 8-15 digits of international phone
  numbers; a test compares the two on a corpus), so the dashboards never show a stored secret.
- ``v_conversations``: one row per conversation: its roll-up, its sampling decision and how
  many of its stored events are kept (``sample`` = kept / unsampled / not decided).
- ``v_conversation_events``: one row per stored event with a redacted one-line ``text`` (what
  was said or done: content and tool calls, tool result with its error, escalation trigger
  and turn, outcome with source and arrival, feedback, gate decision with its findings).
- ``v_conversation_verdicts``: one row per verdict with the turn of its message, categories,
  and redacted rationale, evidence and error.
- ``examples_calibration | examples_drift | examples_escalation | examples_judges(lo, hi,
  agents, domains, tiers, n)``: the worst conversations in ``[lo, hi]`` by one rule each (the
  dashboards' "Examples" panels and ``monitor report`` call the same functions); ``agents``,
  ``domains``, ``tiers`` are the dashboards' selections (``'__all__'`` for All; with All a
  conversation without a domain or tier is included too). Each returns ``time``,
  ``conversation_id``, ``agent_id``, ``domain``, ``tier``, ``confidence`` and ``why``:

  - calibration: conversations of the weighted sample with a wrong answer (item label 0) stated
    with the highest confidence (each conversation by its most confident wrong answer, among
    the ``50 * n`` most confident wrong answers of the range);
  - drift: per segment, its latest drift check ending in the range (a fired one first), the
    confidence bin whose accuracy moved most between the check's baseline and recent windows
    (bins with at least 10 labelled items in both first), and the latest answers of the recent
    window in that bin that went the way it moved (wrong ones where accuracy fell);
  - escalation: up to ``n`` escalated conversations with the highest minimum confidence and up
    to ``n`` failed, not escalated ones with the lowest (the weighted sample);
  - judges: the latest conversations a judge flagged (an ok verdict with label 0), each by its
    latest flag (among the ``50 * n`` latest flags of the range).
- ``alert_history.estimate`` and ``samples``: the point estimate behind ``value`` when the rule
  compares a bound (``estimate: lower_bound``; NULL for a rule that compares the estimate
  itself) and the sample size behind it, so the report's alert table shows the estimate, the
  bound, the threshold and the sample size of the very notification its summary was rendered
  from. Rows written before have NULL in both.

Every function is granted to ``monitor_readonly`` (the views are covered by its default
privileges). The downgrade drops what the upgrade adds.

Revision ID: 0035
Revises: 0034
Create Date: 2026-12-07 16:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0035"
down_revision: str | None = "0034"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

ROLE = "monitor_readonly"
N_BINS = 10  # monitor.analytics.bins.DEFAULT_BINS when this revision was written


def _ci(word: str) -> str:
    """A case-insensitive ARE for ``word`` (ARE has no scoped ``(?i:...)`` group)."""
    return "".join(f"[{c.upper()}{c.lower()}]" if c.isalpha() else c for c in word)


def _bin(conf: str) -> str:
    """Bin index of ``conf`` exactly as monitor.analytics.bins.bin_index (frozen copy)."""
    terms = " + ".join(f"({conf} >= {k}::float8 / {N_BINS})::int" for k in range(1, N_BINS))
    return f"({terms})"


# the patterns of monitor.core.redact as POSIX AREs: \m / \M for a word's start / end,
# [[:alnum:]_] for \w
_W = "[:alnum:]_"
_KEY = (
    f"\\m(?:{_ci('password')}|{_ci('passwd')}|{_ci('token')}|{_ci('secret')}"
    f"|{_ci('api')}[_-]?{_ci('key')}|(?<!\\.){_ci('authorization')})\\M[\"']?\\s*[=:]\\s*[\"']?"
)
_SCHEME = f"(?:(?:{_ci('bearer')}|{_ci('basic')}|{_ci('token')})\\s+)?"
SECRET_RE = (
    "\\mxox[abposr]-[A-Za-z0-9-]{10,}"
    "|\\mBearer\\s+[A-Za-z0-9._~+/=-]{16,}"
    "|\\msk-[A-Za-z0-9_-]{20,}"
    "|\\mmk_[A-Za-z0-9_-]{20,}"
    "|\\mAKIA[0-9A-Z]{16}\\M"
    f"|{_KEY}{_SCHEME}[^\\s,;\"']+"
)
CARD_RE = f"(?<![{_W}.,])[0-9](?:[ -]?[0-9]){{12,18}}(?![{_W}]|[.,][0-9])"
EMAIL_RE = f"(?<![{_W}.%+-])[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\\.[A-Za-z0-9-]+)*\\.[A-Za-z]{{2,}}"
INTL_RE = f"(?<![{_W}+])\\+[0-9](?:[ .-]?\\(?[0-9]+\\)?)+(?![{_W}]|[.,][0-9])"
NA_RE = (
    f"(?<![{_W}(.,-])(?:\\([0-9]{{3}}\\) ?|[0-9]{{3}}[ .-])[0-9]{{3}}[ .-][0-9]{{4}}"
    f"(?![{_W}]|[.,-][0-9])"
)

# Each pass scans the text as the previous pass left it, match by match (as re.sub does: a
# look-behind sees the text before this pass, not what this pass already replaced).
REDACT = f"""
CREATE FUNCTION monitor_redact(t text) RETURNS text
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $fn$
DECLARE
  src text;
  res text;
  pos int;
  at int;
  m text;
  digits text;
  total int;
  k int;
BEGIN
  IF t IS NULL THEN
    RETURN NULL;
  END IF;
  -- secrets (a credential key keeps its `key=`)
  src := t; res := ''; pos := 1;
  LOOP
    at := regexp_instr(src, $re${SECRET_RE}$re$, pos);
    EXIT WHEN at = 0;
    m := regexp_substr(src, $re${SECRET_RE}$re$, pos);
    res := res || substr(src, pos, at - pos)
      || coalesce(substring(m FROM $re$^({_KEY})$re$), '') || '[secret]';
    pos := at + length(m);
  END LOOP;
  -- card numbers: the digit runs that pass the Luhn check
  src := res || substr(src, pos); res := ''; pos := 1;
  LOOP
    at := regexp_instr(src, $re${CARD_RE}$re$, pos);
    EXIT WHEN at = 0;
    m := regexp_substr(src, $re${CARD_RE}$re$, pos);
    digits := regexp_replace(m, '[ -]', '', 'g');
    total := 0;
    FOR i IN 1..length(digits) LOOP
      k := substr(digits, length(digits) - i + 1, 1)::int;
      IF i % 2 = 0 THEN
        k := k * 2;
        IF k > 9 THEN
          k := k - 9;
        END IF;
      END IF;
      total := total + k;
    END LOOP;
    res := res || substr(src, pos, at - pos)
      || CASE WHEN total % 10 = 0 THEN '[card]' ELSE m END;
    pos := at + length(m);
  END LOOP;
  src := regexp_replace(res || substr(src, pos), $re${EMAIL_RE}$re$, '[email]', 'g');
  -- international phone numbers: 8 to 15 digits
  res := ''; pos := 1;
  LOOP
    at := regexp_instr(src, $re${INTL_RE}$re$, pos);
    EXIT WHEN at = 0;
    m := regexp_substr(src, $re${INTL_RE}$re$, pos);
    k := length(regexp_replace(m, '[^0-9]', '', 'g'));
    res := res || substr(src, pos, at - pos)
      || CASE WHEN k BETWEEN 8 AND 15 THEN '[phone]' ELSE m END;
    pos := at + length(m);
  END LOOP;
  RETURN regexp_replace(res || substr(src, pos), $re${NA_RE}$re$, '[phone]', 'g');
END
$fn$"""

_TS = "to_char({} AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS') || ' UTC'"

VIEWS: dict[str, str] = {
    "v_conversations": """
SELECT c.first_ts AS time, c.conversation_id, c.agent_id, c.agent_version, c.agent_model,
  c.domain, c.tier, c.channel, c.intent, c.segment, c.task_id, c.trial, c.first_ts, c.last_ts,
  c.event_count, c.message_count, c.tool_calls, c.tool_results, c.tool_errors, c.feedback_count,
  c.min_confidence, c.last_confidence, c.escalated, c.escalation_trigger, c.escalation_turn,
  c.escalated_at, c.outcome_success, c.outcome_reward, c.outcome_source, c.outcome_at,
  c.sample_stratum, c.sample_rate, c.sampled_by_rate, c.sample_weight, c.sample_policy,
  c.judge_requested_at, k.stored_events, k.kept_events,
  CASE WHEN c.sample_rate IS NULL THEN 'not decided'
       WHEN k.stored_events > 0 AND k.kept_events = k.stored_events THEN 'kept'
       ELSE 'unsampled' END AS sample
FROM conversations c
LEFT JOIN LATERAL (SELECT count(*) AS stored_events, count(*) FILTER (WHERE e.kept) AS kept_events
                   FROM events e WHERE e.conversation_id = c.conversation_id) k ON TRUE""",
    "v_conversation_events": f"""
SELECT e.ts AS time, e.conversation_id, e.event_id, e.ingested_at AS arrived, e.turn, e.type,
  CASE e.type WHEN 'message' THEN e.role WHEN 'tool_result' THEN 'tool ' || e.tool_name
    ELSE e.type END AS who,
  CASE WHEN e.type = 'gate' THEN (e.body->'gate'->>'confidence')::float8 ELSE e.confidence END
    AS confidence,
  e.tool_ok AS ok, e.kept,
  CASE e.type
    WHEN 'message' THEN concat_ws(E'\\n', monitor_redact(e.body->'message'->>'content'),
      (SELECT string_agg('-> ' || (tc->>'name') || '(' || monitor_redact((tc->'arguments')::text)
                         || ')', E'\\n')
       FROM jsonb_array_elements(coalesce(e.body->'message'->'tool_calls', '[]')) tc))
    WHEN 'tool_result' THEN concat_ws(E'\\n',
      CASE WHEN NOT e.tool_ok THEN 'error: '
        || coalesce(monitor_redact(e.body->'tool_result'->>'error'), '-') END,
      monitor_redact(e.body->'tool_result'->>'content'))
    WHEN 'escalation' THEN 'escalated (trigger ' || (e.body->'escalation'->>'trigger')
      || coalesce(', turn ' || e.turn, '') || ')'
      || coalesce(' at confidence ' || (e.body->'escalation'->>'confidence'), '')
      || coalesce(': ' || monitor_redact(e.body->'escalation'->>'reason'), '')
    WHEN 'outcome' THEN CASE WHEN (e.body->'outcome'->>'success')::boolean THEN 'succeeded'
      ELSE 'failed' END || ', source ' || (e.body->'outcome'->>'source')
      || coalesce(', reward ' || (e.body->'outcome'->>'reward'), '')
      || '; arrived ' || {_TS.format("e.ingested_at")}
    WHEN 'feedback' THEN 'score ' || (e.body->'feedback'->>'score') || ' from '
      || monitor_redact(e.body->'feedback'->>'source')
      || coalesce(': ' || monitor_redact(e.body->'feedback'->>'comment'), '')
    WHEN 'gate' THEN (e.body->'gate'->>'decision')
      || CASE WHEN coalesce((e.body->'gate'->>'enforced')::boolean, true) THEN ''
         ELSE ' (shadow)' END
      || ': calibrated ' || (e.body->'gate'->>'calibrated') || ', threshold '
      || (e.body->'gate'->>'threshold')
      || coalesce(', degraded: ' || (e.body->'gate'->>'degraded'), '')
      || coalesce((SELECT string_agg(E'\\n' || (f->>'judge') || coalesce(' ' || (f->>'category'), '')
                                      || ': ' || monitor_redact(f->>'critique'), '')
                   FROM jsonb_array_elements(coalesce(e.body->'gate'->'findings', '[]')) f), '')
    ELSE monitor_redact(e.body::text)
  END AS text
FROM events e""",
    "v_conversation_verdicts": """
SELECT v.created_at AS time, v.conversation_id, v.agent_id, v.judge, v.judge_version,
  NULLIF(v.item_id, '') AS item_id, t.turn, v.status, v.label, v.score,
  (SELECT string_agg(x, ', ') FROM jsonb_array_elements_text(
     CASE WHEN jsonb_typeof(v.categories) = 'array' THEN v.categories ELSE '[]' END) x)
    AS categories,
  monitor_redact(v.rationale) AS rationale, monitor_redact(v.evidence::text) AS evidence,
  monitor_redact(v.error) AS error, v.latency_ms
FROM verdicts v
LEFT JOIN LATERAL (SELECT e.turn FROM events e
                   WHERE e.conversation_id = v.conversation_id AND e.event_id = v.item_id
                   LIMIT 1) t ON v.item_id <> ''""",
}

_ARGS = "lo timestamptz, hi timestamptz, agents text[], domains text[], tiers text[], n int"
_SIGNATURE = "timestamptz, timestamptz, text[], text[], text[], int"
_RETURNS = """RETURNS TABLE ("time" timestamptz, conversation_id text, agent_id text, domain text,
  tier smallint, confidence float8, why text)
LANGUAGE sql STABLE"""


def _scope(agent: str, domain: str, tier: str) -> str:
    """The dashboards' selection (``'__all__'`` for All) on the given columns."""
    return (
        f"('__all__' = ANY(agents) OR {agent} = ANY(agents))"
        f" AND ('__all__' = ANY(domains) OR {domain} = ANY(domains))"
        f" AND ('__all__' = ANY(tiers) OR {tier}::text = ANY(tiers))"
    )


FUNCTIONS: dict[str, str] = {
    "examples_calibration": f"""
SELECT w.ts, w.conversation_id, w.agent_id, NULLIF(w.domain, ''), NULLIF(w.tier, 0),
  w.confidence,
  'stated ' || to_char(w.confidence, 'FM0.00') || ' and was wrong (label from '
    || coalesce(w.label_source, '?') || ')'
FROM (SELECT DISTINCT ON (t.conversation_id) t.*
      FROM (SELECT i.ts, i.conversation_id, i.agent_id, i.domain, i.tier, i.confidence,
                   i.label_source
            FROM items i
            WHERE i.label = 0 AND i.weight > 0 AND i.ts >= lo AND i.ts <= hi
              AND {_scope("i.agent_id", "NULLIF(i.domain, '')", "NULLIF(i.tier, 0)")}
            ORDER BY i.confidence DESC, i.ts DESC
            LIMIT 50 * n) t
      ORDER BY t.conversation_id, t.confidence DESC, t.ts DESC) w
ORDER BY w.confidence DESC, w.ts DESC, w.conversation_id
LIMIT n""",
    "examples_drift": f"""
WITH checks AS MATERIALIZED (
  SELECT DISTINCT ON (d.agent_id, d.agent_version, d.domain, d.tier) d.*
  FROM drift_checks d
  WHERE d.recent_to >= lo AND d.recent_to <= hi
    AND {_scope("d.agent_id", "NULLIF(d.domain, '')", "NULLIF(d.tier, 0)")}
  ORDER BY d.agent_id, d.agent_version, d.domain, d.tier, d.fired DESC, d.recent_to DESC),
moved AS MATERIALIZED (
  SELECT c.agent_id, c.agent_version, c.domain, c.tier, c.recent_from, c.recent_to, c.fired,
    m.bin, m.acc_base, m.acc_recent
  FROM checks c
  CROSS JOIN LATERAL (
    SELECT r.bin, b.acc AS acc_base, r.acc AS acc_recent
    FROM (SELECT v.bin, sum(v.sum_y) / sum(v.weight) AS acc, sum(v.count) AS items
          FROM calibration_bins_in(c.recent_from, c.recent_to - interval '1 microsecond') v
          WHERE v.agent_id = c.agent_id
            AND v.agent_version IS NOT DISTINCT FROM NULLIF(c.agent_version, '')
            AND v.domain IS NOT DISTINCT FROM NULLIF(c.domain, '')
            AND v.tier IS NOT DISTINCT FROM NULLIF(c.tier, 0)
          GROUP BY v.bin HAVING sum(v.weight) > 0) r
    JOIN (SELECT v.bin, sum(v.sum_y) / sum(v.weight) AS acc, sum(v.count) AS items
          FROM calibration_bins_in(c.baseline_from, c.baseline_to - interval '1 microsecond') v
          WHERE v.agent_id = c.agent_id
            AND v.agent_version IS NOT DISTINCT FROM NULLIF(c.agent_version, '')
            AND v.domain IS NOT DISTINCT FROM NULLIF(c.domain, '')
            AND v.tier IS NOT DISTINCT FROM NULLIF(c.tier, 0)
          GROUP BY v.bin HAVING sum(v.weight) > 0) b ON b.bin = r.bin
    ORDER BY least(r.items, b.items) >= 10 DESC, abs(r.acc - b.acc) DESC, r.bin
    LIMIT 1) m)
SELECT x.ts, x.conversation_id, x.agent_id, NULLIF(x.domain, ''), NULLIF(x.tier, 0),
  x.confidence,
  'bin ' || to_char(x.bin / {N_BINS}.0, 'FM0.0') || '-'
    || to_char((x.bin + 1) / {N_BINS}.0, 'FM0.0')
    || ': accuracy ' || to_char(x.acc_base, 'FM0.00') || ' -> ' || to_char(x.acc_recent, 'FM0.00')
    || ' (baseline -> recent' || CASE WHEN x.fired THEN ', drift fired' ELSE '' END
    || '); stated ' || to_char(x.confidence, 'FM0.00') || ', '
    || CASE WHEN x.label = 0 THEN 'wrong' ELSE 'right' END
FROM (SELECT DISTINCT ON (i.conversation_id) i.*, mv.bin, mv.acc_base, mv.acc_recent, mv.fired
      FROM moved mv
      -- per segment, its recent window's answers in the bin, newest first
      CROSS JOIN LATERAL (
        SELECT it.ts, it.conversation_id, it.agent_id, it.domain, it.tier, it.confidence,
          it.label
        FROM items it
        WHERE it.agent_id = mv.agent_id AND it.ts >= mv.recent_from AND it.ts < mv.recent_to
          AND it.agent_version = mv.agent_version AND it.domain = mv.domain
          AND it.tier = mv.tier AND it.weight > 0 AND {_bin("it.confidence")} = mv.bin
          AND it.label = CASE WHEN mv.acc_recent < mv.acc_base THEN 0 ELSE 1 END
        ORDER BY it.ts DESC
        LIMIT 50 * n) i
      ORDER BY i.conversation_id, i.ts DESC) x
ORDER BY x.fired DESC, abs(x.acc_recent - x.acc_base) DESC, x.ts DESC, x.conversation_id
LIMIT n""",
    "examples_escalation": f"""
(SELECT e.time, e.conversation_id, e.agent_id, e.domain, e.tier, e.min_confidence,
   'escalated (' || coalesce(e.escalation_trigger, '?') || ') although its lowest confidence was '
     || to_char(e.min_confidence, 'FM0.00')
 FROM v_escalation_conversations e
 WHERE e.escalated AND e.min_confidence IS NOT NULL AND e.time >= lo AND e.time <= hi
   AND {_scope("e.agent_id", "e.domain", "e.tier")}
 ORDER BY e.min_confidence DESC, e.time DESC, e.conversation_id
 LIMIT n)
UNION ALL
(SELECT e.time, e.conversation_id, e.agent_id, e.domain, e.tier, e.min_confidence,
   'failed, not escalated, with its lowest confidence at ' || to_char(e.min_confidence, 'FM0.00')
 FROM v_escalation_conversations e
 WHERE e.failed AND NOT e.escalated AND e.min_confidence IS NOT NULL
   AND e.time >= lo AND e.time <= hi AND {_scope("e.agent_id", "e.domain", "e.tier")}
 ORDER BY e.min_confidence, e.time DESC, e.conversation_id
 LIMIT n)""",
    "examples_judges": f"""
SELECT f.created_at, f.conversation_id, f.agent_id, f.domain, f.tier, f.confidence,
  f.judge || coalesce(' (' || f.cats || ')', '') || ' flagged '
    || CASE WHEN f.turn IS NULL THEN 'the conversation' ELSE 'turn ' || f.turn END
    || coalesce(': ' || left(monitor_redact(f.rationale), 200), '')
FROM (SELECT DISTINCT ON (t.conversation_id) t.*
      FROM (SELECT v.created_at, v.conversation_id, v.agent_id, c.domain, c.tier, v.judge,
                   v.rationale, i.confidence, e.turn,
                   (SELECT string_agg(x, ', ') FROM jsonb_array_elements_text(
                      CASE WHEN jsonb_typeof(v.categories) = 'array' THEN v.categories
                      ELSE '[]' END) x) AS cats
            FROM verdicts v
            JOIN conversations c ON c.conversation_id = v.conversation_id
            LEFT JOIN items i ON i.event_id = v.item_id AND v.item_id <> ''
            LEFT JOIN LATERAL (SELECT ev.turn FROM events ev
                               WHERE ev.conversation_id = v.conversation_id
                                 AND ev.event_id = v.item_id LIMIT 1) e ON v.item_id <> ''
            WHERE v.status = 'ok' AND v.label = 0 AND v.created_at >= lo AND v.created_at <= hi
              AND {_scope("v.agent_id", "c.domain", "c.tier")}
            ORDER BY v.created_at DESC, v.id DESC
            LIMIT 50 * n) t
      ORDER BY t.conversation_id, t.created_at DESC) f
ORDER BY f.created_at DESC, f.conversation_id
LIMIT n""",
}


#: the drift rule's estimate crosses jit_above_cost (its per-segment bins and items are
#: estimated far above the few rows they are), and compiling took 130 ms of a 30 ms query at 1M
#: items (docs/benchmarks.md); without JIT it is planned inside the function (not inlined)
OPTIONS = {"examples_drift": "\nSET jit = off"}

#: what the Examples rules read in order (without them the calibration and escalation rules
#: scanned every item / conversation of the range: 0.4-1.2 s at 7 days over 1M items,
#: docs/benchmarks.md); partial, so a row gets an entry only while it is such a candidate
INDEXES: dict[str, tuple[str, str, str]] = {
    "ix_items_wrong_confidence": ("items", "confidence, ts", "label = 0 AND weight > 0"),
    "ix_conversations_escalated_confidence": (
        "conversations",
        "min_confidence",
        "escalated AND min_confidence IS NOT NULL AND sample_weight > 0",
    ),
    "ix_conversations_missed_confidence": (
        "conversations",
        "min_confidence",
        "(NOT outcome_success) AND (NOT escalated) AND min_confidence IS NOT NULL"
        " AND sample_weight > 0",
    ),
}


def upgrade() -> None:
    for name, (table, columns, where) in INDEXES.items():
        op.execute(f"CREATE INDEX {name} ON {table} ({columns}) WHERE {where}")
    op.add_column("alert_history", sa.Column("estimate", sa.Double(), nullable=True))
    op.add_column("alert_history", sa.Column("samples", sa.Double(), nullable=True))
    op.execute(REDACT)
    for name, sql in VIEWS.items():
        op.execute(f"CREATE VIEW {name} AS {sql}")
    for name, sql in FUNCTIONS.items():
        options = OPTIONS.get(name, "")
        op.execute(f"CREATE FUNCTION {name}({_ARGS})\n{_RETURNS}{options} AS $body${sql}\n$body$")
    grants = ["monitor_redact(text)", *(f"{n}({_SIGNATURE})" for n in FUNCTIONS)]
    op.execute(
        f"DO $$ BEGIN IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = '{ROLE}') THEN "
        + " ".join(f"GRANT EXECUTE ON FUNCTION {g} TO {ROLE};" for g in grants)
        + " END IF; END $$"
    )


def downgrade() -> None:
    for name in reversed(FUNCTIONS):
        op.execute(f"DROP FUNCTION {name}({_SIGNATURE})")
    for name in reversed(VIEWS):
        op.execute(f"DROP VIEW {name}")
    op.execute("DROP FUNCTION monitor_redact(text)")
    op.drop_column("alert_history", "samples")
    op.drop_column("alert_history", "estimate")
    for name in reversed(INDEXES):
        op.execute(f"DROP INDEX {name}")
