"""Tables of alerting, on the shared metadata.

``alert_states``
    The lifecycle state of each alert fingerprint (rule + concrete scope): the
    :class:`monitor.alerts.states.AlertState` as JSON plus its ``version`` for compare-and-swap,
    so several workers can evaluate and only the one whose update wins emits notifications.
``alert_silences``
    Silences (matchers, start, end, reason, author); ``expired_at`` set by ``unsilence``.
``alert_groups``
    Grouping state (:class:`monitor.alerts.grouping.Group` as JSON) per group key.
``notification_outbox``
    One row per (notification or grouped notification, sink), written in the same transaction
    as the state change that caused it; the notifier claims due rows (``FOR UPDATE SKIP
    LOCKED``), delivers, and records the answer. Unique on (idempotency key, sink).
``alert_history``
    Every firing / repeat / resolved transition, for dashboard annotations and ``alerts list``.
"""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    Column,
    Double,
    Index,
    Integer,
    Table,
    Text,
    UniqueConstraint,
    func,
)
from sqlalchemy.dialects.postgresql import JSONB

from monitor.store.tables import TS, metadata

alert_states = Table(
    "alert_states",
    metadata,
    Column("fingerprint", Text, primary_key=True),
    Column("rule", Text, nullable=False),
    Column("scope", JSONB, nullable=False),
    Column("status", Text, nullable=False),
    Column("state", JSONB, nullable=False),
    Column("version", Integer, nullable=False),
    Column("updated_at", TS, nullable=False, server_default=func.now()),
    Index(None, "status"),
)

alert_silences = Table(
    "alert_silences",
    metadata,
    Column("id", Text, primary_key=True),
    Column("matchers", JSONB, nullable=False),
    Column("starts_at", TS, nullable=False),
    Column("ends_at", TS, nullable=False),
    Column("reason", Text, nullable=False),
    Column("created_by", Text, nullable=False),
    Column("created_at", TS, nullable=False, server_default=func.now()),
    Column("expired_at", TS),
    Index(None, "ends_at"),
)

alert_groups = Table(
    "alert_groups",
    metadata,
    Column("group_key", Text, primary_key=True),
    Column("state", JSONB, nullable=False),
    Column("updated_at", TS, nullable=False, server_default=func.now()),
)

notification_outbox = Table(
    "notification_outbox",
    metadata,
    Column("id", BigInteger, primary_key=True, autoincrement=True),
    Column("idempotency_key", Text, nullable=False),
    Column("sink", Text, nullable=False),
    Column("payload", JSONB, nullable=False),
    Column("status", Text, nullable=False, server_default="pending"),
    Column("attempts", Integer, nullable=False, server_default="0"),
    Column("next_attempt_at", TS, nullable=False, server_default=func.now()),
    Column("last_error", Text),
    Column("response", JSONB),
    Column("created_at", TS, nullable=False, server_default=func.now()),
    Column("delivered_at", TS),
    UniqueConstraint("idempotency_key", "sink", name="uq_outbox_key_sink"),
    Index(None, "status", "next_attempt_at"),
)

alert_history = Table(
    "alert_history",
    metadata,
    Column("id", BigInteger, primary_key=True, autoincrement=True),
    Column("fingerprint", Text, nullable=False),
    Column("rule", Text, nullable=False),
    Column("kind", Text, nullable=False),
    Column("severity", Text, nullable=False),
    Column("scope", JSONB, nullable=False),
    Column("value", Double),
    Column("threshold", Double),
    Column("summary", Text, nullable=False),
    Column("at", TS, nullable=False),
    Column("idempotency_key", Text, nullable=False, unique=True),
    Index(None, "at"),
    Index(None, "fingerprint", "at"),
)
