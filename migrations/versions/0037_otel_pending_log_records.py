"""``otel_pending_records``: GenAI event log records waiting for their span's trace.

``POST /v1/logs`` receives the GenAI events (``gen_ai.client.inference.operation.details``, the
per-message ``gen_ai.*.message`` and ``gen_ai.choice``) that carry the content of LLM spans. A
record whose trace is not mapped yet waits here, durably, beside the trace's waiting spans
(``otel_pending_spans``), whichever arrives first; it is used and deleted when its trace is
mapped, or deleted once older than the assembly's deadline. ``record_key`` is a digest of the
record (a re-sent export stores it once); ``scope`` the agent patterns of the API key that sent
it (NULL: a credential for every agent). The downgrade drops the table (waiting records are
lost: their spans are then mapped with the content they carry themselves).

Revision ID: 0037
Revises: 0036
Create Date: 2026-12-06 10:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0037"
down_revision: str | None = "0036"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "otel_pending_records",
        sa.Column("trace_id", sa.Text(), nullable=False),
        sa.Column("span_id", sa.Text(), nullable=False),
        sa.Column("record_key", sa.Text(), nullable=False),
        sa.Column("received_at", TS, nullable=False, server_default=sa.func.now()),
        sa.Column("record", sa.Text(), nullable=False),
        sa.Column("scope", postgresql.ARRAY(sa.Text())),
        sa.PrimaryKeyConstraint(
            "trace_id", "span_id", "record_key", name="otel_pending_records_pkey"
        ),
    )
    op.create_index("otel_pending_records_received_at", "otel_pending_records", ["received_at"])


def downgrade() -> None:
    op.drop_index("otel_pending_records_received_at", table_name="otel_pending_records")
    op.drop_table("otel_pending_records")
