"""drift_references: the pinned reference window and flagged state of each segment's drift checks

The periodic drift checks used to compare the last hour with the hour before it, so a change
became the new normal one window later and its alert "resolved" while the agent was still
changed. Each segment now keeps a reference (monitor.analytics.drift_policy) that rolls forward
only over unflagged traffic. Existing segments start without a row: their first check after
the upgrade pins a reference from the traffic before it.

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-23 18:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0011"
down_revision: str | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "drift_references",
        sa.Column("agent_id", sa.Text(), nullable=False),
        sa.Column("agent_version", sa.Text(), server_default="", nullable=False),
        sa.Column("domain", sa.Text(), server_default="", nullable=False),
        sa.Column("tier", sa.SmallInteger(), server_default="0", nullable=False),
        sa.Column("ref_from", sa.DateTime(timezone=True), nullable=False),
        sa.Column("ref_to", sa.DateTime(timezone=True), nullable=False),
        sa.Column("clean_since", sa.DateTime(timezone=True), nullable=True),
        sa.Column("flagged_since", sa.DateTime(timezone=True), nullable=True),
        sa.Column("last_recent_to", sa.DateTime(timezone=True), nullable=False),
        sa.Column(
            "updated_at", sa.DateTime(timezone=True), server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.PrimaryKeyConstraint(
            "agent_id", "agent_version", "domain", "tier", name="pk_drift_references"
        ),
    )


def downgrade() -> None:
    op.drop_table("drift_references")
