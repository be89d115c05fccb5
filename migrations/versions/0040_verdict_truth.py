"""judge flags against outcomes: ``verdict_truth`` and ``verdict_truth_minutes``

The judges dashboard's "Precision of judge flags" and "Judges against ground truth" count, per
(judge, judge version), the conversations with a labelled pair (``v_verdict_pairs`` row,
``labelled > 0``) in the range and a known outcome: whether one of their labelled pairs in the
range flagged them (``flagged > 0``), and whether they failed. They read these two tables instead
of grouping every labelled pair of the range, joined with ``conversations``, by conversation:

- ``verdict_truth``: one row per labelled pair with a known ``outcome_success`` (same key,
  segment and minute), with ``flagged``, ``failed`` (``NOT outcome_success``) and, over the
  (conversation, judge, judge version)'s rows (at any time): ``first_minute``,
  ``last_minute``, ``flagged_any`` and ``uniform`` (all of them in one segment: agent, domain,
  tier).
- ``verdict_truth_minutes``: the uniform (conversation, judge, judge version)s counted once,
  per (first minute, last minute, agent, domain, tier, judge, judge version, flagged_any,
  failed), in ``pairs``; a key whose count falls to 0 is deleted.

For a range [start, end] (whole minutes) a uniform (conversation, judge, version) with
``start <= first_minute`` and ``last_minute <= end`` has all its rows in the range: it is one
conversation, flagged if ``flagged_any``, and passes a segment filter as all its rows do. So the
panels sum ``verdict_truth_minutes`` over those keys and group by conversation only the other
rows of the range: of a (conversation, judge, version) that spans the range's start or end
(found by the GiST index on ``tstzrange(first_minute, last_minute, '[]')``) or is not uniform
(a partial index): the same rows as grouping every pair (view ``v_verdict_truth``, with
``span``; ``v_verdict_truth_minutes``; both with ``minute`` as ``time``).

Kept exact by recomputing, for every conversation a statement touched, its rows from
``verdict_pairs`` and ``conversations`` (SQL function ``verdict_truth_refresh``): the counts
change by (the new counted rows) - (the stored ones), a counted row being the first row of a
uniform (conversation, judge, version). Statement-level triggers call it:

- on ``verdicts`` (INSERT, UPDATE, DELETE; named after migration 0039's ``verdict_rollups_*``
  so they fire after them and read the updated ``verdict_pairs``): a new judgement, a re-judged
  conversation's replaced verdicts, the retention DELETE;
- on ``conversations`` (INSERT and DELETE of a row with an outcome, UPDATE changing
  ``outcome_success``): a late outcome, a changed one, a conversation row arriving after its
  verdicts, the retention DELETE (its verdicts' pairs stay, without outcome: they leave the
  panels, as in the join).

TRUNCATE of either empties both tables.

Locks, always in this order, so the verdict trigger and the outcome trigger cannot wait for
each other in a cycle: (1) the conversations' advisory lock (``pg_advisory_xact_lock(7301,
hashtext(conversation_id))``, keys ascending). The ingest writer and the judges' writer take it
(``LOCK_CONVERSATIONS``) before the statements that fire the triggers, so for them the refresh
takes nothing new; for other writers of up to :data:`BULK` conversations the refresh takes it,
after ``ROW EXCLUSIVE`` on ``verdict_truth``. A bulk writer (more conversations in one statement,
or a transaction with ``SET LOCAL monitor.verdict_truth_bulk = on``: the retention DELETEs, which
hold the rows they delete before their trigger fires) takes ``SHARE ROW EXCLUSIVE`` on
``verdict_truth`` instead: it waits for every refresh in progress to commit and holds off new ones
until it commits, without a lock per conversation (thousands of advisory locks would exhaust the
lock table). (2) the ``verdict_truth`` rows of those conversations; (3) the
``verdict_truth_minutes`` keys, ascending (one upsert ordered by key; the keys it emptied are
then deleted, already held). Serialising per conversation also keeps the refresh exact between a
verdict writer and an outcome writer of one conversation: the second waits for the first to
commit and its following statements read what the first wrote (READ COMMITTED, a snapshot per
statement). A writer that, after a refresh, waits in the same transaction for a row held by a
bulk writer (e.g. a conversation re-judged while retention deletes it) can still deadlock with
it; Postgres aborts one of the two (a retention step is retried at the next run).

The upgrade fills both tables from the stored pairs; the downgrade drops triggers, functions,
views and tables.

Revision ID: 0040
Revises: 0039
Create Date: 2026-12-08 00:30:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0040"
down_revision: str | None = "0039"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_KEY = "minute, last_minute, agent_id, domain, tier, judge, judge_version, flagged, failed"
_PK = "conversation_id, judge, judge_version, minute"
_ROW = (
    f"{_PK}, agent_id, domain, tier, flagged, failed, first_minute, last_minute, flagged_any,"
    " uniform"
)
# a row of verdict_truth counted in verdict_truth_minutes: its pair's first row, if uniform
_COUNTED = "uniform AND minute = first_minute"
# the key of verdict_truth_minutes of a counted row
_COUNT_KEY = (
    "first_minute AS minute, last_minute, agent_id, domain, tier, judge, judge_version,"
    " flagged_any AS flagged, failed"
)

# the rows verdict_truth should hold for the conversations matched by {where}
_CURRENT = """
SELECT p.conversation_id, p.judge, p.judge_version, p.minute, p.agent_id, p.domain, p.tier,
  p.flagged > 0 AS flagged, NOT c.outcome_success AS failed,
  min(p.minute) OVER w AS first_minute, max(p.minute) OVER w AS last_minute,
  bool_or(p.flagged > 0) OVER w AS flagged_any,
  min(p.agent_id) OVER w = max(p.agent_id) OVER w AND min(p.domain) OVER w = max(p.domain) OVER w
    AND min(p.tier) OVER w = max(p.tier) OVER w AS uniform
FROM verdict_pairs p JOIN conversations c ON c.conversation_id = p.conversation_id
WHERE p.labelled > 0 AND c.outcome_success IS NOT NULL AND {where}
WINDOW w AS (PARTITION BY p.conversation_id, p.judge, p.judge_version)"""

BULK = 1000
"""More conversations than this in one statement: the refresh locks the table, not each one."""
FLAG = "monitor.verdict_truth_bulk"
"""A transaction that sets this to ``on`` (``SET LOCAL``) refreshes as a bulk writer."""

REFRESH = f"""
CREATE FUNCTION verdict_truth_refresh(cids text[]) RETURNS void LANGUAGE plpgsql AS $fn$
DECLARE
  zero tid[];
BEGIN
  IF cardinality(cids) IS NULL OR cardinality(cids) = 0 THEN
    RETURN;
  END IF;
  IF cardinality(cids) > {BULK} OR current_setting('{FLAG}', true) = 'on' THEN
    LOCK TABLE verdict_truth IN SHARE ROW EXCLUSIVE MODE;
  ELSE
    LOCK TABLE verdict_truth IN ROW EXCLUSIVE MODE;
    PERFORM count(pg_advisory_xact_lock(7301, h))
    FROM (SELECT DISTINCT hashtext(c) AS h FROM unnest(cids) AS c ORDER BY 1) AS keys;
  END IF;
  WITH d AS (
    SELECT {_KEY}, sum(n) AS n FROM (
      SELECT {_COUNT_KEY}, -1 AS n FROM verdict_truth
      WHERE conversation_id = ANY(cids) AND {_COUNTED}
      UNION ALL
      SELECT {_COUNT_KEY}, 1
      FROM ({_CURRENT.format(where="p.conversation_id = ANY(cids)")}) AS cur
      WHERE {_COUNTED}) AS x
    GROUP BY {_KEY} HAVING sum(n) <> 0
  ), up AS (
    INSERT INTO verdict_truth_minutes AS m ({_KEY}, pairs)
    SELECT {_KEY}, n FROM d ORDER BY {_KEY}
    ON CONFLICT ({_KEY}) DO UPDATE SET pairs = m.pairs + EXCLUDED.pairs
    RETURNING m.ctid AS row, m.pairs)
  SELECT array_agg(row) FILTER (WHERE pairs = 0) INTO zero FROM up;
  IF zero IS NOT NULL THEN
    DELETE FROM verdict_truth_minutes WHERE ctid = ANY(zero) AND pairs = 0;
  END IF;
  DELETE FROM verdict_truth WHERE conversation_id = ANY(cids);
  INSERT INTO verdict_truth ({_ROW})
  SELECT {_ROW} FROM ({_CURRENT.format(where="p.conversation_id = ANY(cids)")}) AS cur
  ORDER BY {_PK};
END
$fn$"""

ON_VERDICTS = """
CREATE FUNCTION verdict_truth_verdicts() RETURNS trigger LANGUAGE plpgsql AS $fn$
BEGIN
  IF TG_OP = 'INSERT' THEN
    PERFORM verdict_truth_refresh(ARRAY(SELECT DISTINCT conversation_id FROM new_verdicts));
  ELSIF TG_OP = 'DELETE' THEN
    PERFORM verdict_truth_refresh(ARRAY(SELECT DISTINCT conversation_id FROM old_verdicts));
  ELSIF TG_OP = 'UPDATE' THEN
    PERFORM verdict_truth_refresh(ARRAY(
      SELECT conversation_id FROM old_verdicts UNION SELECT conversation_id FROM new_verdicts));
  ELSE
    TRUNCATE verdict_truth, verdict_truth_minutes;
  END IF;
  RETURN NULL;
END
$fn$"""

ON_CONVERSATIONS = """
CREATE FUNCTION verdict_truth_conversations() RETURNS trigger LANGUAGE plpgsql AS $fn$
BEGIN
  IF TG_OP = 'INSERT' THEN
    PERFORM verdict_truth_refresh(ARRAY(
      SELECT conversation_id FROM new_conversations WHERE outcome_success IS NOT NULL));
  ELSIF TG_OP = 'DELETE' THEN
    PERFORM verdict_truth_refresh(ARRAY(
      SELECT conversation_id FROM old_conversations WHERE outcome_success IS NOT NULL));
  ELSIF TG_OP = 'UPDATE' THEN
    PERFORM verdict_truth_refresh(ARRAY(
      SELECT n.conversation_id FROM new_conversations n
      LEFT JOIN old_conversations o ON o.conversation_id = n.conversation_id
      WHERE n.outcome_success IS DISTINCT FROM o.outcome_success));
  ELSE
    TRUNCATE verdict_truth, verdict_truth_minutes;
  END IF;
  RETURN NULL;
END
$fn$"""

TRIGGERS = {
    "verdict_truth_insert": (
        "AFTER INSERT ON verdicts REFERENCING NEW TABLE AS new_verdicts",
        "verdict_truth_verdicts",
    ),
    "verdict_truth_update": (
        "AFTER UPDATE ON verdicts REFERENCING OLD TABLE AS old_verdicts NEW TABLE AS new_verdicts",
        "verdict_truth_verdicts",
    ),
    "verdict_truth_delete": (
        "AFTER DELETE ON verdicts REFERENCING OLD TABLE AS old_verdicts",
        "verdict_truth_verdicts",
    ),
    "verdict_truth_truncate": ("AFTER TRUNCATE ON verdicts", "verdict_truth_verdicts"),
    "conversation_truth_insert": (
        "AFTER INSERT ON conversations REFERENCING NEW TABLE AS new_conversations",
        "verdict_truth_conversations",
    ),
    "conversation_truth_update": (
        "AFTER UPDATE ON conversations"
        " REFERENCING OLD TABLE AS old_conversations NEW TABLE AS new_conversations",
        "verdict_truth_conversations",
    ),
    "conversation_truth_delete": (
        "AFTER DELETE ON conversations REFERENCING OLD TABLE AS old_conversations",
        "verdict_truth_conversations",
    ),
    "conversation_truth_truncate": (
        "AFTER TRUNCATE ON conversations",
        "verdict_truth_conversations",
    ),
}
_TABLES = {name: spec.split(" ON ")[1].split()[0] for name, (spec, _) in TRIGGERS.items()}

# the rows of a range that the panels group: of pairs not uniform, and of pairs spanning the
# range's start or end (the two GiST scans, then exactly first_minute < start / last_minute > end)
SPAN = "tstzrange(first_minute, last_minute, '[]')"
INDEXES = {
    "ix_verdict_truth_mixed": "(minute) WHERE NOT uniform",
    "ix_verdict_truth_span": f"USING gist ({SPAN})",
}

VIEWS = {
    "v_verdict_truth_minutes": (
        "SELECT minute AS time, last_minute, agent_id, domain, tier, judge, judge_version,"
        " flagged, failed, pairs FROM verdict_truth_minutes"
    ),
    "v_verdict_truth": (
        "SELECT minute AS time, conversation_id, agent_id, domain, tier, judge, judge_version,"
        f" flagged, failed, first_minute, last_minute, uniform, {SPAN} AS span"
        " FROM verdict_truth"
    ),
}

_GRANT = (
    "DO $$ BEGIN IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'monitor_readonly') THEN"
    " GRANT SELECT ON {name} TO monitor_readonly; END IF; END $$"
)


def upgrade() -> None:
    op.create_table(
        "verdict_truth",
        sa.Column("conversation_id", sa.Text, nullable=False),
        sa.Column("judge", sa.Text, nullable=False),
        sa.Column("judge_version", sa.Text, nullable=False),
        sa.Column("minute", sa.DateTime(timezone=True), nullable=False),
        sa.Column("agent_id", sa.Text, nullable=False),
        sa.Column("domain", sa.Text, nullable=False),
        sa.Column("tier", sa.SmallInteger, nullable=False),
        sa.Column("flagged", sa.Boolean, nullable=False),
        sa.Column("failed", sa.Boolean, nullable=False),
        sa.Column("first_minute", sa.DateTime(timezone=True), nullable=False),
        sa.Column("last_minute", sa.DateTime(timezone=True), nullable=False),
        sa.Column("flagged_any", sa.Boolean, nullable=False),
        sa.Column("uniform", sa.Boolean, nullable=False),
        sa.PrimaryKeyConstraint(*_PK.split(", "), name="pk_verdict_truth"),
    )
    for name, spec in INDEXES.items():
        op.execute(f"CREATE INDEX {name} ON verdict_truth {spec}")
    op.create_table(
        "verdict_truth_minutes",
        sa.Column("minute", sa.DateTime(timezone=True), nullable=False),
        sa.Column("last_minute", sa.DateTime(timezone=True), nullable=False),
        sa.Column("agent_id", sa.Text, nullable=False),
        sa.Column("domain", sa.Text, nullable=False),
        sa.Column("tier", sa.SmallInteger, nullable=False),
        sa.Column("judge", sa.Text, nullable=False),
        sa.Column("judge_version", sa.Text, nullable=False),
        sa.Column("flagged", sa.Boolean, nullable=False),
        sa.Column("failed", sa.Boolean, nullable=False),
        sa.Column("pairs", sa.BigInteger, nullable=False),
        sa.PrimaryKeyConstraint(*_KEY.split(", "), name="pk_verdict_truth_minutes"),
    )
    op.execute(REFRESH)
    op.execute(ON_VERDICTS)
    op.execute(ON_CONVERSATIONS)
    for name, (spec, function) in TRIGGERS.items():
        op.execute(f"CREATE TRIGGER {name} {spec} FOR EACH STATEMENT EXECUTE FUNCTION {function}()")
    # the pairs stored before
    op.execute(
        f"INSERT INTO verdict_truth ({_ROW}) SELECT {_ROW}"
        f" FROM ({_CURRENT.format(where='true')}) AS cur"
    )
    op.execute(
        f"INSERT INTO verdict_truth_minutes ({_KEY}, pairs) SELECT {_COUNT_KEY}, count(*)"
        f" FROM verdict_truth WHERE {_COUNTED} GROUP BY 1, 2, 3, 4, 5, 6, 7, 8, 9"
    )
    op.execute("ANALYZE verdict_truth, verdict_truth_minutes")
    for name, sql in VIEWS.items():
        op.execute(f"CREATE VIEW {name} AS {sql}")
        op.execute(_GRANT.format(name=name))


def downgrade() -> None:
    for name in VIEWS:
        op.execute(f"DROP VIEW {name}")
    for name in TRIGGERS:
        op.execute(f"DROP TRIGGER {name} ON {_TABLES[name]}")
    op.execute("DROP FUNCTION verdict_truth_conversations()")
    op.execute("DROP FUNCTION verdict_truth_verdicts()")
    op.execute("DROP FUNCTION verdict_truth_refresh(text[])")
    op.drop_table("verdict_truth_minutes")
    op.drop_table("verdict_truth")
