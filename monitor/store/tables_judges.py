"""Tables of the judging pipeline, on the shared metadata.

``verdicts``
    One row per (conversation, item, judge, judge version): what the judge said about one
    assistant message (``item_id`` = its event id) or about the whole conversation
    (``item_id = ''``). Unique on that key, so a judge re-run after a restart or a re-delivered
    judge request never stores a second verdict. Error verdicts are stored too (``status =
    'error'`` with ``error`` the reason) and count as judged.
``judge_quality``
    One row per (judge, judge version): its precision and recall against conversation
    outcomes as last measured by the worker, and ``muted`` when the precision is below the
    floor on enough flagged conversations: a muted judge's verdicts stay stored and shown but
    no longer label items (:data:`monitor.ingest.items_sql.SYNC_ITEMS`).
``judge_requests``
    One row per conversation sent to the judges: when and why (the sampling reasons), so the
    scheduler never sends a conversation twice and the dashboards can show the judged sample;
    ``resends``/``resent_at`` count the times a request without verdicts was sent again.
"""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    Boolean,
    Column,
    Double,
    Index,
    Integer,
    SmallInteger,
    Table,
    Text,
    UniqueConstraint,
    func,
    text,
)
from sqlalchemy.dialects.postgresql import JSONB

from monitor.store.tables import TS, metadata

verdicts = Table(
    "verdicts",
    metadata,
    Column("id", BigInteger, primary_key=True, autoincrement=True),
    Column("conversation_id", Text, nullable=False),
    Column("item_id", Text, nullable=False, server_default=""),
    Column("agent_id", Text, nullable=False),
    Column("judge", Text, nullable=False),
    Column("judge_version", Text, nullable=False),
    Column("status", Text, nullable=False),
    Column("label", SmallInteger),
    Column("score", Double),
    Column("categories", JSONB, nullable=False, server_default="[]"),
    Column("evidence", JSONB, nullable=False, server_default="{}"),
    Column("rationale", Text),
    Column("error", Text),
    Column("latency_ms", Double, nullable=False, server_default="0"),
    Column("created_at", TS, nullable=False, server_default=func.now()),
    UniqueConstraint(
        "conversation_id", "item_id", "judge", "judge_version", name="uq_verdicts_item_judge"
    ),
    Index(None, "created_at"),
    Index(None, "agent_id", "created_at"),
)

judge_requests = Table(
    "judge_requests",
    metadata,
    Column("conversation_id", Text, primary_key=True),
    Column("agent_id", Text, nullable=False),
    Column("reasons", JSONB, nullable=False),
    Column("requested_at", TS, nullable=False, server_default=func.now()),
    Column("judged_at", TS),
    Column("resends", Integer, nullable=False, server_default="0"),
    Column("resent_at", TS),
    Index(None, "requested_at"),
    Index(
        "ix_judge_requests_pending",
        "requested_at",
        postgresql_where=text("judged_at IS NULL"),
    ),
)

judge_quality = Table(
    "judge_quality",
    metadata,
    Column("judge", Text, primary_key=True),
    Column("judge_version", Text, primary_key=True),
    Column("pairs", Integer, nullable=False),
    Column("flagged", Integer, nullable=False),
    Column("precision", Double),
    Column("recall", Double),
    Column("floor", Double, nullable=False),
    Column("min_pairs", Integer, nullable=False),
    Column("muted", Boolean, nullable=False, server_default="false"),
    Column("computed_at", TS, nullable=False, server_default=func.now()),
)
