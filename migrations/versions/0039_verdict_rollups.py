"""verdict roll-ups: ``verdict_minutes``, ``verdict_category_minutes``, ``verdict_pairs``

Three tables that sum ``verdicts`` per whole minute of ``created_at``, kept by statement-level
triggers on ``verdicts`` (INSERT, UPDATE, DELETE, each with its transition table; TRUNCATE
empties them): every writer of verdicts (the judges' ``write_verdicts``, its replacement of a
re-judged conversation's verdicts, the retention DELETE, a test or bench INSERT) changes them
in its own statement and transaction, so they stay equal to ``GROUP BY`` over the current
``verdicts`` whoever wrote, replaced or deleted (they need no retention of their own: the
verdicts' retention removes what it removes from them too).

- ``verdict_pairs``: per (conversation, judge, judge version, minute): the conversation's
  agent, domain and tier (``''`` / ``0`` when unknown) as they were when the first of those
  verdicts was written, verdicts, ok verdicts with a label (``labelled``) and those with label 0
  (``flagged``). The other two tables take a verdict's domain and tier from its pair row, so a
  DELETE subtracts from the key the INSERT added to, even after the conversation's row changed
  or was deleted.
- ``verdict_minutes``: per (minute, agent, domain, tier, judge, judge version, status, latency
  bucket): verdicts and their summed ``latency_ms``. Bucket 0 holds latencies up to 1 ms,
  bucket ``b`` >= 1 holds (2^((b-1)/8), 2^(b/8)] ms (each about 9 % wide).
- ``verdict_category_minutes``: per (minute, agent, domain, tier, category): the verdicts
  naming the category (a category named twice by one verdict counts twice, as ``v_verdicts``
  unnests it).

A key whose count falls to 0 is deleted. Views ``v_verdict_minutes``, ``v_verdict_categories``
and ``v_verdict_pairs`` (``minute`` as ``time``) are what the judges dashboard reads. The
upgrade fills the tables from the stored verdicts. The downgrade drops triggers, function,
views and tables.

Revision ID: 0039
Revises: 0038
Create Date: 2026-12-07 21:30:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0039"
down_revision: str | None = "0038"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_SEGMENT = [
    sa.Column("agent_id", sa.Text, nullable=False),
    sa.Column("domain", sa.Text, nullable=False),
    sa.Column("tier", sa.SmallInteger, nullable=False),
]

# latency_ms -> bucket (module docstring)
_BUCKET = (
    "(CASE WHEN {x}.latency_ms <= 1 OR {x}.latency_ms IS NULL THEN 0"
    " ELSE least(ceil(8 * ln({x}.latency_ms) / ln(2)), 32767)::int END)::smallint"
)
_MINUTE = "date_trunc('minute', {x}.created_at, 'UTC')"
_CATEGORIES = (
    "jsonb_array_elements_text(CASE WHEN jsonb_typeof({x}.categories) = 'array'"
    " THEN {x}.categories ELSE '[]' END)"
)

_MIN_KEY = "minute, agent_id, domain, tier, judge, judge_version, status, bucket"
_CAT_KEY = "minute, agent_id, domain, tier, category"
_PAIR_KEY = "conversation_id, judge, judge_version, minute"


def _add_pairs(rel: str) -> str:
    """+ per pair of the verdicts of ``rel``; a new pair row takes the conversation's segment."""
    return f"""
INSERT INTO verdict_pairs AS p ({_PAIR_KEY}, agent_id, domain, tier, verdicts, labelled,
                                 flagged)
SELECT r.conversation_id, r.judge, r.judge_version, {_MINUTE.format(x="r")}, min(r.agent_id),
  coalesce(min(c.domain), ''), coalesce(min(c.tier), 0)::smallint, count(*),
  count(*) FILTER (WHERE r.status = 'ok' AND r.label IS NOT NULL),
  count(*) FILTER (WHERE r.status = 'ok' AND r.label = 0)
FROM {rel} r LEFT JOIN conversations c ON c.conversation_id = r.conversation_id
GROUP BY 1, 2, 3, 4 ORDER BY 1, 2, 3, 4
ON CONFLICT ({_PAIR_KEY}) DO UPDATE SET verdicts = p.verdicts + EXCLUDED.verdicts,
  labelled = p.labelled + EXCLUDED.labelled, flagged = p.flagged + EXCLUDED.flagged"""


def _sub_pairs(rel: str) -> str:
    """- per pair of the verdicts of ``rel``, then the emptied pair rows deleted."""
    return f"""
UPDATE verdict_pairs p SET verdicts = p.verdicts - d.verdicts,
  labelled = p.labelled - d.labelled, flagged = p.flagged - d.flagged
FROM (SELECT r.conversation_id, r.judge, r.judge_version, {_MINUTE.format(x="r")} AS minute,
        count(*) AS verdicts,
        count(*) FILTER (WHERE r.status = 'ok' AND r.label IS NOT NULL) AS labelled,
        count(*) FILTER (WHERE r.status = 'ok' AND r.label = 0) AS flagged
      FROM {rel} r GROUP BY 1, 2, 3, 4) d
WHERE (p.conversation_id, p.judge, p.judge_version, p.minute)
  = (d.conversation_id, d.judge, d.judge_version, d.minute);
DELETE FROM verdict_pairs p USING (SELECT DISTINCT conversation_id FROM {rel}) d
WHERE p.conversation_id = d.conversation_id AND p.verdicts = 0"""


def _minutes(rel: str, sign: int) -> str:
    """``sign`` x the verdicts of ``rel`` into both minute tables, segments from their pairs
    (which must exist: added before, subtracted after), emptied keys deleted."""
    join = (
        f"FROM {rel} r JOIN verdict_pairs p ON (p.conversation_id, p.judge, p.judge_version,"
        f" p.minute) = (r.conversation_id, r.judge, r.judge_version, {_MINUTE.format(x='r')})"
    )
    return f"""
INSERT INTO verdict_minutes AS m ({_MIN_KEY}, verdicts, latency_ms)
SELECT {_MINUTE.format(x="r")}, p.agent_id, p.domain, p.tier, r.judge, r.judge_version, r.status,
  {_BUCKET.format(x="r")}, {sign} * count(*), {sign} * sum(r.latency_ms)
{join}
GROUP BY 1, 2, 3, 4, 5, 6, 7, 8 ORDER BY 1, 2, 3, 4, 5, 6, 7, 8
ON CONFLICT ({_MIN_KEY}) DO UPDATE SET verdicts = m.verdicts + EXCLUDED.verdicts,
  latency_ms = m.latency_ms + EXCLUDED.latency_ms;
INSERT INTO verdict_category_minutes AS m ({_CAT_KEY}, verdicts)
SELECT {_MINUTE.format(x="r")}, p.agent_id, p.domain, p.tier, cat.category, {sign} * count(*)
{join}
CROSS JOIN LATERAL {_CATEGORIES.format(x="r")} AS cat(category)
GROUP BY 1, 2, 3, 4, 5 ORDER BY 1, 2, 3, 4, 5
ON CONFLICT ({_CAT_KEY}) DO UPDATE SET verdicts = m.verdicts + EXCLUDED.verdicts""" + (
        ""
        if sign > 0
        else f""";
DELETE FROM verdict_minutes m USING (SELECT DISTINCT {_MINUTE.format(x="r")} AS minute
  FROM {rel} r) d WHERE m.minute = d.minute AND m.verdicts = 0;
DELETE FROM verdict_category_minutes m USING (SELECT DISTINCT {_MINUTE.format(x="r")} AS minute
  FROM {rel} r) d WHERE m.minute = d.minute AND m.verdicts = 0"""
    )


def _add(rel: str) -> str:
    return _add_pairs(rel) + ";" + _minutes(rel, 1)


def _sub(rel: str) -> str:
    return _minutes(rel, -1) + ";" + _sub_pairs(rel)


FUNCTION = f"""
CREATE FUNCTION verdict_rollups() RETURNS trigger LANGUAGE plpgsql AS $fn$
BEGIN
  IF TG_OP = 'INSERT' THEN
    {_add("new_verdicts")};
  ELSIF TG_OP = 'DELETE' THEN
    {_sub("old_verdicts")};
  ELSIF TG_OP = 'UPDATE' THEN
    {_sub("old_verdicts")};
    {_add("new_verdicts")};
  ELSE
    TRUNCATE verdict_minutes, verdict_category_minutes, verdict_pairs;
  END IF;
  RETURN NULL;
END
$fn$"""

TRIGGERS = {
    "verdict_rollups_insert": "AFTER INSERT ON verdicts REFERENCING NEW TABLE AS new_verdicts",
    "verdict_rollups_update": (
        "AFTER UPDATE ON verdicts REFERENCING OLD TABLE AS old_verdicts NEW TABLE AS new_verdicts"
    ),
    "verdict_rollups_delete": "AFTER DELETE ON verdicts REFERENCING OLD TABLE AS old_verdicts",
    "verdict_rollups_truncate": "AFTER TRUNCATE ON verdicts",
}

VIEWS = {
    "v_verdict_minutes": (
        "SELECT minute AS time, agent_id, domain, tier, judge, judge_version, status, bucket,"
        " verdicts, latency_ms,"
        " CASE WHEN bucket = 0 THEN 1 ELSE power(2::float8, bucket / 8::float8) END"
        " AS latency_upper_ms"
        " FROM verdict_minutes"
    ),
    "v_verdict_categories": (
        "SELECT minute AS time, agent_id, domain, tier, category,"
        " CASE WHEN category LIKE 'fabrication:%' THEN substr(category, 13) END"
        " AS fabrication_type, verdicts FROM verdict_category_minutes"
    ),
    "v_verdict_pairs": (
        "SELECT p.minute AS time, p.conversation_id, p.agent_id, p.domain, p.tier, p.judge,"
        " p.judge_version, p.verdicts, p.labelled, p.flagged, c.outcome_success"
        " FROM verdict_pairs p LEFT JOIN conversations c ON c.conversation_id = p.conversation_id"
    ),
}

_GRANT = (
    "DO $$ BEGIN IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'monitor_readonly') THEN"
    " GRANT SELECT ON {name} TO monitor_readonly; END IF; END $$"
)


def upgrade() -> None:
    op.create_table(
        "verdict_pairs",
        sa.Column("conversation_id", sa.Text, nullable=False),
        sa.Column("judge", sa.Text, nullable=False),
        sa.Column("judge_version", sa.Text, nullable=False),
        sa.Column("minute", sa.DateTime(timezone=True), nullable=False),
        *(c.copy() for c in _SEGMENT),
        sa.Column("verdicts", sa.Integer, nullable=False),
        sa.Column("labelled", sa.Integer, nullable=False),
        sa.Column("flagged", sa.Integer, nullable=False),
        sa.PrimaryKeyConstraint(
            "conversation_id", "judge", "judge_version", "minute", name="pk_verdict_pairs"
        ),
    )
    op.create_index(
        "ix_verdict_pairs_labelled",
        "verdict_pairs",
        ["minute"],
        postgresql_include=[
            "judge",
            "judge_version",
            "conversation_id",
            "agent_id",
            "domain",
            "tier",
            "flagged",
        ],
        postgresql_where=sa.text("labelled > 0"),
    )
    op.create_table(
        "verdict_minutes",
        sa.Column("minute", sa.DateTime(timezone=True), nullable=False),
        *(c.copy() for c in _SEGMENT),
        sa.Column("judge", sa.Text, nullable=False),
        sa.Column("judge_version", sa.Text, nullable=False),
        sa.Column("status", sa.Text, nullable=False),
        sa.Column("bucket", sa.SmallInteger, nullable=False),
        sa.Column("verdicts", sa.BigInteger, nullable=False),
        sa.Column("latency_ms", sa.Double, nullable=False),
        sa.PrimaryKeyConstraint(*_MIN_KEY.split(", "), name="pk_verdict_minutes"),
    )
    op.create_table(
        "verdict_category_minutes",
        sa.Column("minute", sa.DateTime(timezone=True), nullable=False),
        *(c.copy() for c in _SEGMENT),
        sa.Column("category", sa.Text, nullable=False),
        sa.Column("verdicts", sa.BigInteger, nullable=False),
        sa.PrimaryKeyConstraint(*_CAT_KEY.split(", "), name="pk_verdict_category_minutes"),
    )
    op.execute(FUNCTION)
    for name, spec in TRIGGERS.items():
        op.execute(
            f"CREATE TRIGGER {name} {spec} FOR EACH STATEMENT EXECUTE FUNCTION verdict_rollups()"
        )
    # the verdicts stored before: as one INSERT of all of them would add them
    for statement in _add("verdicts").split(";"):
        op.execute(statement)
    for name, sql in VIEWS.items():
        op.execute(f"CREATE VIEW {name} AS {sql}")
        op.execute(_GRANT.format(name=name))


def downgrade() -> None:
    for name in VIEWS:
        op.execute(f"DROP VIEW {name}")
    for name in TRIGGERS:
        op.execute(f"DROP TRIGGER {name} ON verdicts")
    op.execute("DROP FUNCTION verdict_rollups()")
    op.drop_table("verdict_category_minutes")
    op.drop_table("verdict_minutes")
    op.drop_table("verdict_pairs")
