"""OTLP trace assembly: spans waiting for their trace's root, and the traces already mapped

``otel_pending_spans`` keeps, durably, the spans of a trace whose root has not arrived yet
(one export request often carries part of a trace, and the root ends last); ``otel_traces``
remembers each mapped trace's conversation and agent (and whether it had LLM calls) for spans
arriving after their root.
The downgrade drops both (waiting spans are lost: map them first by letting the deadline pass).

Revision ID: 0024
Revises: 0023
Create Date: 2026-11-27 15:10:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0024"
down_revision: str | None = "0023"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "otel_pending_spans",
        sa.Column("trace_id", sa.Text(), nullable=False),
        sa.Column("span_id", sa.Text(), nullable=False),
        sa.Column("received_at", TS, nullable=False, server_default=sa.func.now()),
        sa.Column("root", sa.Boolean(), nullable=False, server_default="false"),
        sa.Column("span", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("trace_id", "span_id", name="otel_pending_spans_pkey"),
    )
    op.create_index("otel_pending_spans_received_at", "otel_pending_spans", ["received_at"])
    op.create_table(
        "otel_traces",
        sa.Column("trace_id", sa.Text(), nullable=False),
        sa.Column("conversation_id", sa.Text(), nullable=True),
        sa.Column("agent_id", sa.Text(), nullable=True),
        sa.Column("llm_calls", sa.Boolean(), nullable=False, server_default="false"),
        sa.Column("how", sa.Text(), nullable=False),
        sa.Column("resolved_at", TS, nullable=False, server_default=sa.func.now()),
        sa.PrimaryKeyConstraint("trace_id", name="otel_traces_pkey"),
    )
    op.create_index("otel_traces_resolved_at", "otel_traces", ["resolved_at"])


def downgrade() -> None:
    op.drop_index("otel_traces_resolved_at", table_name="otel_traces")
    op.drop_table("otel_traces")
    op.drop_index("otel_pending_spans_received_at", table_name="otel_pending_spans")
    op.drop_table("otel_pending_spans")
