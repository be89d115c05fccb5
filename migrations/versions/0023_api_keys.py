"""``api_keys``: scoped API keys, stored as the SHA-256 of their secret

Each key names the agents it may act for and its scopes (write, gate, read); the worker loads
the active ones into memory (monitor.auth.cache). The dashboards' read-only role (0010) does
not read it: the hashes are no secret, but nothing a dashboard shows needs them. The downgrade
drops the table (the shared
tokens, MONITOR_INGEST_TOKEN etc., keep working without it).

Revision ID: 0023
Revises: 0022
Create Date: 2026-11-27 15:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0023"
down_revision: str | None = "0022"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "api_keys",
        sa.Column("id", sa.Text(), nullable=False),
        sa.Column("name", sa.Text(), server_default="", nullable=False),
        sa.Column("key_hash", sa.Text(), nullable=False),
        sa.Column("agents", postgresql.ARRAY(sa.Text()), nullable=False),
        sa.Column("scopes", postgresql.ARRAY(sa.Text()), nullable=False),
        sa.Column(
            "created_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False
        ),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("revoked_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_api_keys")),
        sa.UniqueConstraint("key_hash", name=op.f("uq_api_keys_key_hash")),
    )
    op.execute("REVOKE ALL ON api_keys FROM monitor_readonly")


def downgrade() -> None:
    op.drop_table("api_keys")
