"""conversations.judge_requested_at and a partial index of the judge scheduler's candidates

The scheduler used to find candidates with NOT EXISTS against judge_requests over every idle
conversation, so each round scanned all conversations ever stored (most never sampled). Now a
conversation carries when it was requested, and the candidates (not requested; sampled by rate
or pulled in by a stored-fact rule) have their own small partial index on last_ts.

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-22 05:45:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

INDEX = "ix_conversations_judge_candidates"
PREDICATE = (
    "judge_requested_at IS NULL AND (sampled_by_rate OR escalated OR tool_errors > 0"
    " OR feedback_count > 0)"
)


def upgrade() -> None:
    op.add_column(
        "conversations", sa.Column("judge_requested_at", sa.DateTime(timezone=True), nullable=True)
    )
    op.execute(
        "UPDATE conversations c SET judge_requested_at = r.requested_at"
        " FROM judge_requests r WHERE r.conversation_id = c.conversation_id"
    )
    op.create_index(INDEX, "conversations", ["last_ts"], postgresql_where=sa.text(PREDICATE))


def downgrade() -> None:
    op.drop_index(INDEX, table_name="conversations")
    op.drop_column("conversations", "judge_requested_at")
