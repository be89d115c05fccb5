"""judge_quality: per scope, and labelling on the lower end of the precision interval

A judge now labels the items of an agent x domain only when the lower end of the Wilson
interval of its precision there clears the floor (its pooled interval decides until the scope
has enough flagged conversations). ``judge_quality`` gains the scope (``agent_id``, ``domain``;
``agent_id`` '' is the judge's pooled row), the interval's ends, ``decided_by`` ('scope' or
'pooled') and ``labels``, which replaces ``muted``. Existing rows become pooled rows with
``labels = NOT muted``, and every judge with verdicts but no row gets a pooled row that labels:
what the labelling SQL did before, so the stored item labels stay in step with the table until
the worker's next measurement decides (and relabels what changed).

``v_judge_labelling`` (for the judges dashboard) is one row per stored decision: the scope's
(``agent_id``, ``domain``; both NULL on the pooled row, ``scope`` 'pooled') with its interval,
flagged conversations, ``decided_by`` and ``labels``, beside the judge's pooled figures.

Downgrade drops the view, keeps the pooled rows (``muted = NOT labels``) and drops the scope
rows and columns.

Revision ID: 0036
Revises: 0035
Create Date: 2026-12-07 16:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0036"
down_revision: str | None = "0035"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


VIEW = """
CREATE VIEW v_judge_labelling AS
SELECT q.judge, q.judge_version, NULLIF(q.agent_id, '') AS agent_id,
  CASE WHEN q.agent_id = '' THEN NULL ELSE q.domain END AS domain,
  CASE WHEN q.agent_id = '' THEN 'pooled' ELSE 'agent x domain' END AS scope,
  q.pairs, q.flagged, q.precision, q.precision_low, q.precision_high, q.recall, q.floor,
  q.min_pairs, q.decided_by, q.labels, p.flagged AS pooled_flagged,
  p.precision AS pooled_precision, p.precision_low AS pooled_precision_low,
  q.computed_at AS time
FROM judge_quality q
LEFT JOIN judge_quality p ON p.judge = q.judge AND p.judge_version = q.judge_version
  AND p.agent_id = '' AND p.domain = ''"""

GRANT = """
DO $$
BEGIN
  IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'monitor_readonly') THEN
    GRANT SELECT ON v_judge_labelling TO monitor_readonly;
  END IF;
END
$$"""


def upgrade() -> None:
    for name in ("agent_id", "domain"):
        op.add_column(
            "judge_quality", sa.Column(name, sa.Text(), server_default="", nullable=False)
        )
    op.add_column("judge_quality", sa.Column("precision_low", sa.Double()))
    op.add_column("judge_quality", sa.Column("precision_high", sa.Double()))
    op.add_column(
        "judge_quality",
        sa.Column("decided_by", sa.Text(), server_default="pooled", nullable=False),
    )
    op.add_column(
        "judge_quality", sa.Column("labels", sa.Boolean(), server_default="false", nullable=False)
    )
    op.execute("UPDATE judge_quality SET labels = NOT muted")
    op.execute(
        "INSERT INTO judge_quality (judge, judge_version, pairs, flagged, floor, min_pairs,"
        " labels) SELECT DISTINCT v.judge, v.judge_version, 0, 0, 0, 0, true FROM verdicts v"
        " WHERE NOT EXISTS (SELECT 1 FROM judge_quality q WHERE q.judge = v.judge"
        " AND q.judge_version = v.judge_version)"
    )
    for name in ("agent_id", "domain", "decided_by"):
        op.alter_column("judge_quality", name, server_default=None)
    op.drop_column("judge_quality", "muted")
    op.drop_constraint("pk_judge_quality", "judge_quality", type_="primary")
    op.create_primary_key(
        "pk_judge_quality", "judge_quality", ["judge", "judge_version", "agent_id", "domain"]
    )
    op.execute(VIEW)
    op.execute(GRANT)


def downgrade() -> None:
    op.execute("DROP VIEW v_judge_labelling")
    op.execute("DELETE FROM judge_quality WHERE agent_id <> ''")
    op.add_column(
        "judge_quality", sa.Column("muted", sa.Boolean(), server_default="false", nullable=False)
    )
    op.execute("UPDATE judge_quality SET muted = NOT labels")
    op.drop_constraint("pk_judge_quality", "judge_quality", type_="primary")
    op.create_primary_key("pk_judge_quality", "judge_quality", ["judge", "judge_version"])
    for name in ("labels", "decided_by", "precision_high", "precision_low", "domain", "agent_id"):
        op.drop_column("judge_quality", name)
