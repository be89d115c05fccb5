"""alert exemplars: the conversations that show an alert, chosen when it fires

``alert_exemplars`` holds, per alert episode (fingerprint, ``fired_at``), up to N exemplars by
``rank``: the conversation (NULL for an exemplar that is not one, a dead letter), a one-line
``reason`` and the facts behind it (``detail``), chosen by the rule of the alert's signal
(docs/runbooks.md, "Exemplars"). The index on ``conversation_id`` serves the ingest writer
(the later events of an exemplar conversation go to the kept leaves) and retention (an
exemplar's conversation row and verdicts are kept).

Downgrade drops the table (the exemplars are lost; the events they promoted stay kept).

Revision ID: 0034
Revises: 0033
Create Date: 2026-12-07 16:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0034"
down_revision: str | None = "0033"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "alert_exemplars",
        sa.Column("fingerprint", sa.Text(), nullable=False),
        sa.Column("fired_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("rank", sa.SmallInteger(), nullable=False),
        sa.Column("rule", sa.Text(), nullable=False),
        sa.Column("conversation_id", sa.Text()),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("detail", postgresql.JSONB(), server_default="{}", nullable=False),
        sa.Column(
            "chosen_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False
        ),
        sa.PrimaryKeyConstraint("fingerprint", "fired_at", "rank", name="pk_alert_exemplars"),
    )
    op.create_index("ix_alert_exemplars_conversation_id", "alert_exemplars", ["conversation_id"])


def downgrade() -> None:
    op.drop_index("ix_alert_exemplars_conversation_id", table_name="alert_exemplars")
    op.drop_table("alert_exemplars")
