"""hourly roll-ups of the labelled items: ``item_hours``, ``design_hours``, ``label_hours``

The design effect of a window (labelled items per distinct conversation: every calibration
report, drift check and alert evaluation) read ``items`` for the whole window: 3.9 s of the
``monitor calibration --since 7d`` command at 1M items. ``item_hours`` (per conversation, hour
and segment: labelled items with weight > 0, and whether the conversation has several rows) and
``design_hours`` (per hour and segment: their sums and non-empty rows) make whole hours a sum;
``monitor.analytics.design_effect`` reads them. The upgrade back-fills both from the stored
items (the items statement keeps them from then on, monitor/ingest/design_sql.py); the
downgrade drops them. ``label_hours`` (labelled items per hour, segment and label source) does
the same for the report's share of judge labels (``judge_noise.judge_labels``: 0.27 s of
scanning at 1M items; monitor/ingest/label_sql.py). Issue 13.

Revision ID: 0019
Revises: 0018
Create Date: 2026-11-26 15:30:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0019"
down_revision: str | None = "0018"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

ROLE = "monitor_readonly"
SEG = "agent_id, agent_version, domain, tier"
# the back-fill; tests/analytics/test_design_effects.py checks it against the stored items
BACKFILL_ITEM_HOURS = f"""
INSERT INTO item_hours (conversation_id, hour, {SEG}, n, multi)
SELECT conversation_id, hour, {SEG}, n, count(*) OVER (PARTITION BY conversation_id) > 1
FROM (SELECT conversation_id, date_trunc('hour', ts, 'UTC') AS hour, {SEG}, count(*) AS n
      FROM items WHERE label IS NOT NULL AND weight > 0
      GROUP BY conversation_id, hour, {SEG}) AS k"""
BACKFILL_LABEL_HOURS = f"""
INSERT INTO label_hours (hour, {SEG}, label_source, items)
SELECT date_trunc('hour', ts, 'UTC'), {SEG}, coalesce(label_source, ''), count(*) FROM items
WHERE label IS NOT NULL GROUP BY 1, 2, 3, 4, 5, 6"""
BACKFILL_DESIGN_HOURS = f"""
INSERT INTO design_hours (hour, {SEG}, items, conversations)
SELECT hour, {SEG}, sum(n), count(*) FILTER (WHERE n > 0) FROM item_hours
GROUP BY hour, {SEG}"""


def _segment() -> list[sa.Column[object]]:
    return [
        sa.Column("agent_id", sa.Text(), nullable=False),
        sa.Column("agent_version", sa.Text(), server_default="", nullable=False),
        sa.Column("domain", sa.Text(), server_default="", nullable=False),
        sa.Column("tier", sa.SmallInteger(), server_default="0", nullable=False),
    ]


def upgrade() -> None:
    op.create_table(
        "item_hours",
        sa.Column("conversation_id", sa.Text(), nullable=False),
        sa.Column("hour", sa.DateTime(timezone=True), nullable=False),
        *_segment(),
        sa.Column("n", sa.BigInteger(), nullable=False),
        sa.Column("multi", sa.Boolean(), nullable=False),
        sa.PrimaryKeyConstraint("conversation_id", "hour", "agent_id", "agent_version",
                                "domain", "tier", name="pk_item_hours"),
    )
    op.create_index("ix_item_hours_multi", "item_hours", ["hour"],
                    postgresql_where=sa.text("multi"))
    op.create_table(
        "design_hours",
        sa.Column("hour", sa.DateTime(timezone=True), nullable=False),
        *_segment(),
        sa.Column("items", sa.BigInteger(), nullable=False),
        sa.Column("conversations", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("hour", "agent_id", "agent_version", "domain", "tier",
                                name="pk_design_hours"),
    )
    op.create_table(
        "label_hours",
        sa.Column("hour", sa.DateTime(timezone=True), nullable=False),
        *_segment(),
        sa.Column("label_source", sa.Text(), nullable=False),
        sa.Column("items", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("hour", "agent_id", "agent_version", "domain", "tier",
                                "label_source", name="pk_label_hours"),
    )
    op.execute(BACKFILL_ITEM_HOURS)
    op.execute(BACKFILL_DESIGN_HOURS)
    op.execute(BACKFILL_LABEL_HOURS)
    op.execute(f"GRANT SELECT ON item_hours, design_hours, label_hours TO {ROLE}")


def downgrade() -> None:
    op.drop_table("label_hours")
    op.drop_table("design_hours")
    op.drop_table("item_hours")
