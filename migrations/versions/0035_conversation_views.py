"""conversations one step from every number: the alert's estimate in its history

- ``alert_history.estimate`` and ``samples``: the point estimate behind ``value`` when the rule
  compares a bound (``estimate: lower_bound``; NULL for a rule that compares the estimate
  itself) and the sample size behind it, so the report's alert table shows the estimate, the
  bound, the threshold and the sample size of the very notification its summary was rendered
  from. Rows written before have NULL in both.

The downgrade drops what the upgrade adds.

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


def upgrade() -> None:
    op.add_column("alert_history", sa.Column("estimate", sa.Double(), nullable=True))
    op.add_column("alert_history", sa.Column("samples", sa.Double(), nullable=True))


def downgrade() -> None:
    op.drop_column("alert_history", "samples")
    op.drop_column("alert_history", "estimate")
