"""conversations per minute: ``conversation_minutes`` (issue 13, item 1)

Every conversation summed per (minute of ``first_ts``, agent, domain, tier): conversations,
escalated, with an outcome, succeeded, with a minimum confidence and its sum in millionths,
tool errors and tool results. The pipeline dashboard's conversation panels (conversations
started, per minute, escalation and outcome shares, the per-agent summary) read it instead of
one row per conversation. The upgrade back-fills it from the stored conversations (the batch
statement keeps it from then on, monitor/ingest/conversation_minutes_sql.py); the downgrade
drops it.

Revision ID: 0017
Revises: 0016
Create Date: 2026-11-26 10:20:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0017"
down_revision: str | None = "0016"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

ROLE = "monitor_readonly"
SUMS = ("conversations", "escalated", "with_outcome", "succeeded", "with_confidence",
        "confidence_micro", "tool_errors", "tool_results")
# a frozen copy of monitor.ingest.conversation_minutes_sql.backfill() as this revision was written
BACKFILL = """
SELECT minute, agent_id, domain, tier, sum(conversations)::bigint, sum(escalated)::bigint,
  sum(with_outcome)::bigint, sum(succeeded)::bigint, sum(with_confidence)::bigint,
  sum(confidence_micro)::bigint, sum(tool_errors)::bigint, sum(tool_results)::bigint
FROM (SELECT date_trunc('minute', c.first_ts, 'UTC'), c.agent_id, coalesce(c.domain, ''),
  coalesce(c.tier, 0)::smallint, 1, c.escalated::int, (c.outcome_success IS NOT NULL)::int,
  coalesce(c.outcome_success::int, 0), (c.min_confidence IS NOT NULL)::int,
  coalesce(round(c.min_confidence * 1000000)::bigint, 0), c.tool_errors, c.tool_results
  FROM conversations c) AS k(minute, agent_id, domain, tier, conversations, escalated,
  with_outcome, succeeded, with_confidence, confidence_micro, tool_errors, tool_results)
GROUP BY minute, agent_id, domain, tier"""


def upgrade() -> None:
    op.create_table(
        "conversation_minutes",
        sa.Column("minute", sa.DateTime(timezone=True), nullable=False),
        sa.Column("agent_id", sa.Text(), nullable=False),
        sa.Column("domain", sa.Text(), nullable=False),
        sa.Column("tier", sa.SmallInteger(), nullable=False),
        *(sa.Column(name, sa.BigInteger(), nullable=False) for name in SUMS),
        sa.PrimaryKeyConstraint("minute", "agent_id", "domain", "tier",
                                name="pk_conversation_minutes"),
    )
    op.execute(f"INSERT INTO conversation_minutes (minute, agent_id, domain, tier,"
               f" {', '.join(SUMS)}) {BACKFILL}")
    op.execute(f"GRANT SELECT ON conversation_minutes TO {ROLE}")


def downgrade() -> None:
    op.drop_table("conversation_minutes")
