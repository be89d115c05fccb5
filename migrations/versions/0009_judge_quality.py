"""judge_quality: each judge's measured precision/recall and whether it is muted

A judge whose precision against conversation outcomes is below the floor (on enough flagged
conversations) stops labelling items; the worker stores the measurement here and the item
labelling SQL skips the verdicts of muted judges.

Revision ID: 0009
Revises: 0006
Create Date: 2026-11-23 18:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0009"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "judge_quality",
        sa.Column("judge", sa.Text(), nullable=False),
        sa.Column("judge_version", sa.Text(), nullable=False),
        sa.Column("pairs", sa.Integer(), nullable=False),
        sa.Column("flagged", sa.Integer(), nullable=False),
        sa.Column("precision", sa.Double(), nullable=True),
        sa.Column("recall", sa.Double(), nullable=True),
        sa.Column("floor", sa.Double(), nullable=False),
        sa.Column("min_pairs", sa.Integer(), nullable=False),
        sa.Column("muted", sa.Boolean(), server_default="false", nullable=False),
        sa.Column(
            "computed_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False
        ),
        sa.PrimaryKeyConstraint("judge", "judge_version"),
    )


def downgrade() -> None:
    op.drop_table("judge_quality")
