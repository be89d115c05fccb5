"""``otel_pending_spans.scope``: the agent patterns of the API key that sent each waiting span.

A span waiting for its trace's root is mapped later, by another request or by the worker's
sweep after the deadline; the events mapped from a trace's waiting spans are kept only for
agents every recorded scope allows. NULL means a credential for every agent (a shared token,
a ``*`` key, the traces topic): so are the spans that waited before this revision. The
downgrade drops the column (waiting spans are then mapped without a scope check, as before).

Revision ID: 0028
Revises: 0027
Create Date: 2026-11-27 17:40:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0028"
down_revision: str | None = "0027"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("otel_pending_spans", sa.Column("scope", postgresql.ARRAY(sa.Text())))


def downgrade() -> None:
    op.drop_column("otel_pending_spans", "scope")
