"""initial schema: events, conversations, dead_letters

Revision ID: 0001
Revises:
Create Date: 2026-11-22 02:52:56.264462
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0001"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "conversations",
        sa.Column("conversation_id", sa.Text(), nullable=False),
        sa.Column("agent_id", sa.Text(), nullable=False),
        sa.Column("agent_version", sa.Text(), nullable=True),
        sa.Column("agent_model", sa.Text(), nullable=True),
        sa.Column("domain", sa.Text(), nullable=True),
        sa.Column("tier", sa.SmallInteger(), nullable=True),
        sa.Column("channel", sa.Text(), nullable=True),
        sa.Column("intent", sa.Text(), nullable=True),
        sa.Column("segment", sa.Text(), nullable=True),
        sa.Column("task_id", sa.Text(), nullable=True),
        sa.Column("trial", sa.Integer(), nullable=True),
        sa.Column("first_ts", sa.DateTime(timezone=True), nullable=False),
        sa.Column("last_ts", sa.DateTime(timezone=True), nullable=False),
        sa.Column("event_count", sa.Integer(), server_default="0", nullable=False),
        sa.Column("message_count", sa.Integer(), server_default="0", nullable=False),
        sa.Column("assistant_messages", sa.Integer(), server_default="0", nullable=False),
        sa.Column("user_messages", sa.Integer(), server_default="0", nullable=False),
        sa.Column("tool_calls", sa.Integer(), server_default="0", nullable=False),
        sa.Column("tool_results", sa.Integer(), server_default="0", nullable=False),
        sa.Column("tool_errors", sa.Integer(), server_default="0", nullable=False),
        sa.Column("feedback_count", sa.Integer(), server_default="0", nullable=False),
        sa.Column("min_confidence", sa.Double(), nullable=True),
        sa.Column("last_confidence", sa.Double(), nullable=True),
        sa.Column("last_confidence_ts", sa.DateTime(timezone=True), nullable=True),
        sa.Column("escalated", sa.Boolean(), server_default="false", nullable=False),
        sa.Column("escalated_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("escalation_turn", sa.Integer(), nullable=True),
        sa.Column("escalation_trigger", sa.Text(), nullable=True),
        sa.Column("outcome_success", sa.Boolean(), nullable=True),
        sa.Column("outcome_reward", sa.Double(), nullable=True),
        sa.Column("outcome_source", sa.Text(), nullable=True),
        sa.Column("outcome_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column(
            "updated_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.PrimaryKeyConstraint("conversation_id", name=op.f("pk_conversations")),
    )
    op.create_index(
        op.f("ix_conversations_agent_id_first_ts"),
        "conversations",
        ["agent_id", "first_ts"],
        unique=False,
    )
    op.create_index(op.f("ix_conversations_last_ts"), "conversations", ["last_ts"], unique=False)
    op.create_table(
        "dead_letters",
        sa.Column("id", sa.BigInteger(), autoincrement=True, nullable=False),
        sa.Column("source", sa.Text(), nullable=False),
        sa.Column("source_partition", sa.Integer(), nullable=True),
        sa.Column("source_offset", sa.BigInteger(), nullable=True),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("field", sa.Text(), nullable=True),
        sa.Column("detail", sa.Text(), nullable=False),
        sa.Column("raw", sa.LargeBinary(), nullable=False),
        sa.Column(
            "received_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_dead_letters")),
        sa.UniqueConstraint(
            "source",
            "source_partition",
            "source_offset",
            name=op.f("uq_dead_letters_source_source_partition_source_offset"),
        ),
    )
    op.create_index(
        op.f("ix_dead_letters_received_at"), "dead_letters", ["received_at"], unique=False
    )
    op.create_table(
        "events",
        sa.Column("event_id", sa.Text(), nullable=False),
        sa.Column("conversation_id", sa.Text(), nullable=False),
        sa.Column("type", sa.Text(), nullable=False),
        sa.Column("ts", sa.DateTime(timezone=True), nullable=False),
        sa.Column("agent_id", sa.Text(), nullable=False),
        sa.Column("agent_version", sa.Text(), nullable=True),
        sa.Column("agent_model", sa.Text(), nullable=True),
        sa.Column("domain", sa.Text(), nullable=True),
        sa.Column("tier", sa.SmallInteger(), nullable=True),
        sa.Column("channel", sa.Text(), nullable=True),
        sa.Column("intent", sa.Text(), nullable=True),
        sa.Column("segment", sa.Text(), nullable=True),
        sa.Column("task_id", sa.Text(), nullable=True),
        sa.Column("trial", sa.Integer(), nullable=True),
        sa.Column("turn", sa.Integer(), nullable=True),
        sa.Column("role", sa.Text(), nullable=True),
        sa.Column("confidence", sa.Double(), nullable=True),
        sa.Column("tool_name", sa.Text(), nullable=True),
        sa.Column("tool_ok", sa.Boolean(), nullable=True),
        sa.Column("body", postgresql.JSONB(astext_type=sa.Text()), nullable=False),
        sa.Column("kafka_partition", sa.Integer(), nullable=True),
        sa.Column("kafka_offset", sa.BigInteger(), nullable=True),
        sa.Column(
            "ingested_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.PrimaryKeyConstraint("event_id", name=op.f("pk_events")),
    )
    op.create_index(op.f("ix_events_agent_id_ts"), "events", ["agent_id", "ts"], unique=False)
    op.create_index(
        op.f("ix_events_conversation_id_ts"), "events", ["conversation_id", "ts"], unique=False
    )
    op.create_index(op.f("ix_events_ingested_at"), "events", ["ingested_at"], unique=False)
    op.create_index(op.f("ix_events_type_ts"), "events", ["type", "ts"], unique=False)


def downgrade() -> None:
    op.drop_index(op.f("ix_events_type_ts"), table_name="events")
    op.drop_index(op.f("ix_events_ingested_at"), table_name="events")
    op.drop_index(op.f("ix_events_conversation_id_ts"), table_name="events")
    op.drop_index(op.f("ix_events_agent_id_ts"), table_name="events")
    op.drop_table("events")
    op.drop_index(op.f("ix_dead_letters_received_at"), table_name="dead_letters")
    op.drop_table("dead_letters")
    op.drop_index(op.f("ix_conversations_last_ts"), table_name="conversations")
    op.drop_index(op.f("ix_conversations_agent_id_first_ts"), table_name="conversations")
    op.drop_table("conversations")
