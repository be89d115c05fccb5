"""judges: a conversation that grew after it was judged is judged again

A conversation counted as idle when its last event's timestamp was old, and it was judged once:
events arriving already old (a replay, a backfill, a buffering client) made it "idle" while it
was still arriving, and it was judged on part of its events, never again. The scheduler now also
waits until the conversation is idle by arrival (``conversations.updated_at``, the store's time
of the newest write that stored one of its events), and judges again a conversation that stored
more events than its verdicts cover (``monitor.judges.rejudge``):

- ``judge_requests.judged_events``: the stored events the conversation's verdicts cover;
  ``judge_requests.rejudges``: how many times it was sent to the judges again;
- ``conversations.judge_watch``: the event count above which a judged conversation is a
  re-judge candidate (NULL: not judged yet, a request pending, or its re-judgements spent),
  and the partial index ``ix_conversations_rejudge`` on ``updated_at`` of the rows whose
  ``event_count`` is above it: the scheduler's round reads only the conversations that grew
  since they were judged. Conversations judged before this revision are not watched (they
  have no judged count).

Downgrade drops the index and the three columns.

Revision ID: 0032
Revises: 0031
Create Date: 2026-12-07 16:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0032"
down_revision: str | None = "0031"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("judge_requests", sa.Column("judged_events", sa.Integer()))
    op.add_column(
        "judge_requests",
        sa.Column("rejudges", sa.Integer(), server_default="0", nullable=False),
    )
    op.add_column("conversations", sa.Column("judge_watch", sa.Integer()))
    op.create_index(
        "ix_conversations_rejudge",
        "conversations",
        ["updated_at"],
        postgresql_where=sa.text("event_count > judge_watch"),
    )


def downgrade() -> None:
    op.drop_index("ix_conversations_rejudge", table_name="conversations")
    op.drop_column("conversations", "judge_watch")
    op.drop_column("judge_requests", "rejudges")
    op.drop_column("judge_requests", "judged_events")
