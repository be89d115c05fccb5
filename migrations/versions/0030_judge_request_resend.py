"""judge requests: sent again when lost

A judge request whose record is lost on the ``judge-requests`` topic (a record batch the
consumer cannot decode, a record it cannot parse) left its conversation requested and never
judged. The scheduler now publishes again the requests that have no verdicts long after they
were sent: ``judge_requests`` gains ``resends`` (how many times, bounded) and ``resent_at``
(when last), and a partial index on ``requested_at`` of the rows not judged yet, so a round
reads only the pending requests and never the judged history.

Downgrade drops the index and the two columns.

Revision ID: 0030
Revises: 0029
Create Date: 2026-11-27 20:50:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0030"
down_revision: str | None = "0029"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column(
        "judge_requests",
        sa.Column("resends", sa.Integer(), server_default="0", nullable=False),
    )
    op.add_column("judge_requests", sa.Column("resent_at", sa.DateTime(timezone=True)))
    op.create_index(
        "ix_judge_requests_pending",
        "judge_requests",
        ["requested_at"],
        postgresql_where=sa.text("judged_at IS NULL"),
    )


def downgrade() -> None:
    op.drop_index("ix_judge_requests_pending", table_name="judge_requests")
    op.drop_column("judge_requests", "resent_at")
    op.drop_column("judge_requests", "resends")
