"""analytics: sampling decision, items, calibration bins, maps, drift checks

Conversations written before this revision stay undecided (sample_* NULL) until their next
event; items and bins start empty (history is not back-filled).

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-22 04:25:11.809808+00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "calibration_bins",
        sa.Column("resolution", sa.Text(), nullable=False),
        sa.Column("window_start", sa.DateTime(timezone=True), nullable=False),
        sa.Column("agent_id", sa.Text(), nullable=False),
        sa.Column("agent_version", sa.Text(), nullable=False),
        sa.Column("domain", sa.Text(), nullable=False),
        sa.Column("tier", sa.SmallInteger(), nullable=False),
        sa.Column("bin", sa.SmallInteger(), nullable=False),
        sa.Column("count", sa.BigInteger(), nullable=False),
        sa.Column("weight", sa.Double(), nullable=False),
        sa.Column("sum_conf", sa.Double(), nullable=False),
        sa.Column("sum_y", sa.Double(), nullable=False),
        sa.Column("sum_sq_err", sa.Double(), nullable=False),
        sa.Column("sum_w2", sa.Double(), nullable=False),
        sa.PrimaryKeyConstraint(
            "resolution",
            "window_start",
            "agent_id",
            "agent_version",
            "domain",
            "tier",
            "bin",
            name=op.f("pk_calibration_bins"),
        ),
    )
    op.create_index(
        op.f("ix_calibration_bins_resolution_agent_id_window_start"),
        "calibration_bins",
        ["resolution", "agent_id", "window_start"],
        unique=False,
    )
    op.create_table(
        "calibration_maps",
        sa.Column("id", sa.BigInteger(), autoincrement=True, nullable=False),
        sa.Column("agent_id", sa.Text(), nullable=False),
        sa.Column("domain", sa.Text(), server_default="", nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("method", sa.Text(), nullable=False),
        sa.Column("map", postgresql.JSONB(astext_type=sa.Text()), nullable=False),
        sa.Column("n_train", sa.Integer(), nullable=False),
        sa.Column("n_holdout", sa.Integer(), nullable=False),
        sa.Column("ece_before", sa.Double(), nullable=True),
        sa.Column("ece_after", sa.Double(), nullable=True),
        sa.Column("brier_before", sa.Double(), nullable=True),
        sa.Column("brier_after", sa.Double(), nullable=True),
        sa.Column("data_from", sa.DateTime(timezone=True), nullable=True),
        sa.Column("data_to", sa.DateTime(timezone=True), nullable=True),
        sa.Column(
            "fitted_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_calibration_maps")),
        sa.UniqueConstraint(
            "agent_id",
            "domain",
            "version",
            name=op.f("uq_calibration_maps_agent_id_domain_version"),
        ),
    )
    op.create_table(
        "drift_checks",
        sa.Column("id", sa.BigInteger(), autoincrement=True, nullable=False),
        sa.Column(
            "checked_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.Column("agent_id", sa.Text(), nullable=False),
        sa.Column("agent_version", sa.Text(), server_default="", nullable=False),
        sa.Column("domain", sa.Text(), server_default="", nullable=False),
        sa.Column("tier", sa.SmallInteger(), server_default="0", nullable=False),
        sa.Column("baseline_from", sa.DateTime(timezone=True), nullable=False),
        sa.Column("baseline_to", sa.DateTime(timezone=True), nullable=False),
        sa.Column("recent_from", sa.DateTime(timezone=True), nullable=False),
        sa.Column("recent_to", sa.DateTime(timezone=True), nullable=False),
        sa.Column("n_baseline", sa.Integer(), nullable=False),
        sa.Column("n_recent", sa.Integer(), nullable=False),
        sa.Column("psi", sa.Double(), nullable=True),
        sa.Column("ks_statistic", sa.Double(), nullable=True),
        sa.Column("ks_pvalue", sa.Double(), nullable=True),
        sa.Column("accuracy_baseline", sa.Double(), nullable=True),
        sa.Column("accuracy_recent", sa.Double(), nullable=True),
        sa.Column("accuracy_pvalue", sa.Double(), nullable=True),
        sa.Column("ece_baseline", sa.Double(), nullable=True),
        sa.Column("ece_recent", sa.Double(), nullable=True),
        sa.Column("ece_delta", sa.Double(), nullable=True),
        sa.Column("ece_pvalue", sa.Double(), nullable=True),
        sa.Column("fired", sa.Boolean(), nullable=False),
        sa.Column("fired_tests", sa.Text(), server_default="", nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("details", postgresql.JSONB(astext_type=sa.Text()), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_drift_checks")),
        sa.UniqueConstraint(
            "agent_id",
            "agent_version",
            "domain",
            "tier",
            "recent_from",
            "recent_to",
            "baseline_from",
            "baseline_to",
            name="uq_drift_checks_segment_windows",
        ),
    )
    op.create_index(op.f("ix_drift_checks_recent_to"), "drift_checks", ["recent_to"], unique=False)
    op.create_table(
        "items",
        sa.Column("event_id", sa.Text(), nullable=False),
        sa.Column("conversation_id", sa.Text(), nullable=False),
        sa.Column("ts", sa.DateTime(timezone=True), nullable=False),
        sa.Column("agent_id", sa.Text(), nullable=False),
        sa.Column("agent_version", sa.Text(), server_default="", nullable=False),
        sa.Column("domain", sa.Text(), server_default="", nullable=False),
        sa.Column("tier", sa.SmallInteger(), server_default="0", nullable=False),
        sa.Column("confidence", sa.Double(), nullable=False),
        sa.Column("weight", sa.Double(), nullable=False),
        sa.Column("label", sa.SmallInteger(), nullable=True),
        sa.Column("label_source", sa.Text(), nullable=True),
        sa.Column("labelled_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("event_id", name=op.f("pk_items")),
    )
    op.create_index(op.f("ix_items_agent_id_ts"), "items", ["agent_id", "ts"], unique=False)
    op.create_index(op.f("ix_items_conversation_id"), "items", ["conversation_id"], unique=False)
    op.add_column("conversations", sa.Column("sample_stratum", sa.Text(), nullable=True))
    op.add_column("conversations", sa.Column("sample_rate", sa.Double(), nullable=True))
    op.add_column("conversations", sa.Column("sampled_by_rate", sa.Boolean(), nullable=True))
    op.add_column("conversations", sa.Column("sample_weight", sa.Double(), nullable=True))
    op.add_column("conversations", sa.Column("sample_policy", sa.Text(), nullable=True))


def downgrade() -> None:
    op.drop_column("conversations", "sample_policy")
    op.drop_column("conversations", "sample_weight")
    op.drop_column("conversations", "sampled_by_rate")
    op.drop_column("conversations", "sample_rate")
    op.drop_column("conversations", "sample_stratum")
    op.drop_index(op.f("ix_items_conversation_id"), table_name="items")
    op.drop_index(op.f("ix_items_agent_id_ts"), table_name="items")
    op.drop_table("items")
    op.drop_index(op.f("ix_drift_checks_recent_to"), table_name="drift_checks")
    op.drop_table("drift_checks")
    op.drop_table("calibration_maps")
    op.drop_index(
        op.f("ix_calibration_bins_resolution_agent_id_window_start"), table_name="calibration_bins"
    )
    op.drop_table("calibration_bins")
