"""dead_letters: unique per (source, partition, offset, md5 of raw)

A topic that is recreated (or an in-memory broker that restarts) reuses offsets; keying dead
letters on the offset alone silently dropped new invalid records at reused offsets.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-22 04:05:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

OLD = "uq_dead_letters_source_source_partition_source_offset"
NEW = "uq_dead_letters_source_source_partition_source_offset_raw_md5"


def upgrade() -> None:
    op.add_column("dead_letters", sa.Column("raw_md5", sa.Text(), nullable=True))
    op.execute("UPDATE dead_letters SET raw_md5 = md5(raw)")
    op.alter_column("dead_letters", "raw_md5", nullable=False)
    op.drop_constraint(OLD, "dead_letters", type_="unique")
    op.create_unique_constraint(
        NEW, "dead_letters", ["source", "source_partition", "source_offset", "raw_md5"]
    )


def downgrade() -> None:
    # keep the oldest dead letter per offset so the narrower unique key can be restored
    op.execute(
        "DELETE FROM dead_letters d USING dead_letters k "
        "WHERE d.source = k.source AND d.source_partition IS NOT DISTINCT FROM k.source_partition "
        "AND d.source_offset IS NOT DISTINCT FROM k.source_offset AND d.id > k.id"
    )
    op.drop_constraint(NEW, "dead_letters", type_="unique")
    op.drop_column("dead_letters", "raw_md5")
    op.create_unique_constraint(
        OLD, "dead_letters", ["source", "source_partition", "source_offset"]
    )
