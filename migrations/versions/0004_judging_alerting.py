"""judging and alerting tables

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-22 04:35:46.489208+00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "alert_groups",
        sa.Column("group_key", sa.Text(), nullable=False),
        sa.Column("state", postgresql.JSONB(astext_type=sa.Text()), nullable=False),
        sa.Column(
            "updated_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.PrimaryKeyConstraint("group_key", name=op.f("pk_alert_groups")),
    )
    op.create_table(
        "alert_history",
        sa.Column("id", sa.BigInteger(), autoincrement=True, nullable=False),
        sa.Column("fingerprint", sa.Text(), nullable=False),
        sa.Column("rule", sa.Text(), nullable=False),
        sa.Column("kind", sa.Text(), nullable=False),
        sa.Column("severity", sa.Text(), nullable=False),
        sa.Column("scope", postgresql.JSONB(astext_type=sa.Text()), nullable=False),
        sa.Column("value", sa.Double(), nullable=True),
        sa.Column("threshold", sa.Double(), nullable=True),
        sa.Column("summary", sa.Text(), nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("idempotency_key", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_alert_history")),
        sa.UniqueConstraint("idempotency_key", name=op.f("uq_alert_history_idempotency_key")),
    )
    op.create_index(op.f("ix_alert_history_at"), "alert_history", ["at"], unique=False)
    op.create_index(
        op.f("ix_alert_history_fingerprint_at"),
        "alert_history",
        ["fingerprint", "at"],
        unique=False,
    )
    op.create_table(
        "alert_silences",
        sa.Column("id", sa.Text(), nullable=False),
        sa.Column("matchers", postgresql.JSONB(astext_type=sa.Text()), nullable=False),
        sa.Column("starts_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("ends_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("created_by", sa.Text(), nullable=False),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.Column("expired_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_alert_silences")),
    )
    op.create_index(op.f("ix_alert_silences_ends_at"), "alert_silences", ["ends_at"], unique=False)
    op.create_table(
        "alert_states",
        sa.Column("fingerprint", sa.Text(), nullable=False),
        sa.Column("rule", sa.Text(), nullable=False),
        sa.Column("scope", postgresql.JSONB(astext_type=sa.Text()), nullable=False),
        sa.Column("status", sa.Text(), nullable=False),
        sa.Column("state", postgresql.JSONB(astext_type=sa.Text()), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column(
            "updated_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.PrimaryKeyConstraint("fingerprint", name=op.f("pk_alert_states")),
    )
    op.create_index(op.f("ix_alert_states_status"), "alert_states", ["status"], unique=False)
    op.create_table(
        "judge_requests",
        sa.Column("conversation_id", sa.Text(), nullable=False),
        sa.Column("agent_id", sa.Text(), nullable=False),
        sa.Column("reasons", postgresql.JSONB(astext_type=sa.Text()), nullable=False),
        sa.Column(
            "requested_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.Column("judged_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("conversation_id", name=op.f("pk_judge_requests")),
    )
    op.create_index(
        op.f("ix_judge_requests_requested_at"), "judge_requests", ["requested_at"], unique=False
    )
    op.create_table(
        "notification_outbox",
        sa.Column("id", sa.BigInteger(), autoincrement=True, nullable=False),
        sa.Column("idempotency_key", sa.Text(), nullable=False),
        sa.Column("sink", sa.Text(), nullable=False),
        sa.Column("payload", postgresql.JSONB(astext_type=sa.Text()), nullable=False),
        sa.Column("status", sa.Text(), server_default="pending", nullable=False),
        sa.Column("attempts", sa.Integer(), server_default="0", nullable=False),
        sa.Column(
            "next_attempt_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.Column("response", postgresql.JSONB(astext_type=sa.Text()), nullable=True),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.Column("delivered_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_notification_outbox")),
        sa.UniqueConstraint("idempotency_key", "sink", name="uq_outbox_key_sink"),
    )
    op.create_index(
        op.f("ix_notification_outbox_status_next_attempt_at"),
        "notification_outbox",
        ["status", "next_attempt_at"],
        unique=False,
    )
    op.create_table(
        "verdicts",
        sa.Column("id", sa.BigInteger(), autoincrement=True, nullable=False),
        sa.Column("conversation_id", sa.Text(), nullable=False),
        sa.Column("item_id", sa.Text(), server_default="", nullable=False),
        sa.Column("agent_id", sa.Text(), nullable=False),
        sa.Column("judge", sa.Text(), nullable=False),
        sa.Column("judge_version", sa.Text(), nullable=False),
        sa.Column("status", sa.Text(), nullable=False),
        sa.Column("label", sa.SmallInteger(), nullable=True),
        sa.Column("score", sa.Double(), nullable=True),
        sa.Column(
            "categories",
            postgresql.JSONB(astext_type=sa.Text()),
            server_default="[]",
            nullable=False,
        ),
        sa.Column(
            "evidence", postgresql.JSONB(astext_type=sa.Text()), server_default="{}", nullable=False
        ),
        sa.Column("rationale", sa.Text(), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("latency_ms", sa.Double(), server_default="0", nullable=False),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_verdicts")),
        sa.UniqueConstraint(
            "conversation_id", "item_id", "judge", "judge_version", name="uq_verdicts_item_judge"
        ),
    )
    op.create_index(
        op.f("ix_verdicts_agent_id_created_at"),
        "verdicts",
        ["agent_id", "created_at"],
        unique=False,
    )
    op.create_index(op.f("ix_verdicts_created_at"), "verdicts", ["created_at"], unique=False)


def downgrade() -> None:
    op.drop_index(op.f("ix_verdicts_created_at"), table_name="verdicts")
    op.drop_index(op.f("ix_verdicts_agent_id_created_at"), table_name="verdicts")
    op.drop_table("verdicts")
    op.drop_index(
        op.f("ix_notification_outbox_status_next_attempt_at"), table_name="notification_outbox"
    )
    op.drop_table("notification_outbox")
    op.drop_index(op.f("ix_judge_requests_requested_at"), table_name="judge_requests")
    op.drop_table("judge_requests")
    op.drop_index(op.f("ix_alert_states_status"), table_name="alert_states")
    op.drop_table("alert_states")
    op.drop_index(op.f("ix_alert_silences_ends_at"), table_name="alert_silences")
    op.drop_table("alert_silences")
    op.drop_index(op.f("ix_alert_history_fingerprint_at"), table_name="alert_history")
    op.drop_index(op.f("ix_alert_history_at"), table_name="alert_history")
    op.drop_table("alert_history")
    op.drop_table("alert_groups")
