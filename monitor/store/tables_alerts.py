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
    Every firing / repeat / resolved transition, for dashboard annotations and ``alerts list``:
    ``value`` is what the rule compared with ``threshold`` (a bound, for a rule on one, and
    then ``estimate`` the point estimate behind it), ``samples`` the sample size behind it,
    ``summary`` the text rendered from them; ``incident_id``: the incident the notification
    belonged to, if any.
``alert_incidents``
    Incidents (:class:`monitor.alerts.incidents.Incident` as JSON plus the columns dashboards
    and listings filter on): one per group of an agent's alerts that paged once, kept as long as
    the alert history. ``members`` is the JSON array of the member fingerprints.
``alert_exemplars``
    The conversations that show an alert, chosen when it fired (:mod:`monitor.alerts.exemplars`):
    per episode (fingerprint, ``fired_at``) up to N rows by ``rank``, each with a one-line
    ``reason`` and the facts behind it (``detail``). ``conversation_id`` is NULL for an exemplar
    that is not a conversation (a dead letter). Kept as long as the alert history (retention
    never deletes them); indexed by conversation for the ingest writer, which keeps an exemplar's
    later events, and for retention, which keeps its conversation row and verdicts.
"""

from __future__ import annotations

from sqlalchemy import (
    Column,
    Double,
    Index,
    Integer,
    SmallInteger,
    Table,
    Text,
    UniqueConstraint,
)
from sqlalchemy.dialects.postgresql import JSONB

from monitor.store.tables import TS, inserted_at, key, metadata, required, serial_id

alert_states = Table(
    "alert_states",
    metadata,
    key("fingerprint", Text),
    required("rule", Text),
    required("scope", JSONB),
    required("status", Text),
    required("state", JSONB),
    required("version", Integer),
    inserted_at("updated_at"),
    Index(None, "status"),
)

alert_silences = Table(
    "alert_silences",
    metadata,
    key("id", Text),
    required("matchers", JSONB),
    required("starts_at", TS),
    required("ends_at", TS),
    required("reason", Text),
    required("created_by", Text),
    inserted_at("created_at"),
    Column("expired_at", TS),
    Index(None, "ends_at"),
)

alert_groups = Table(
    "alert_groups",
    metadata,
    key("group_key", Text),
    required("state", JSONB),
    inserted_at("updated_at"),
)

notification_outbox = Table(
    "notification_outbox",
    metadata,
    serial_id(),
    required("idempotency_key", Text),
    required("sink", Text),
    required("payload", JSONB),
    required("status", Text, server_default="pending"),
    required("attempts", Integer, server_default="0"),
    inserted_at("next_attempt_at"),
    Column("last_error", Text),
    Column("response", JSONB),
    inserted_at("created_at"),
    Column("delivered_at", TS),
    UniqueConstraint("idempotency_key", "sink", name="uq_outbox_key_sink"),
    Index(None, "status", "next_attempt_at"),
)

alert_history = Table(
    "alert_history",
    metadata,
    serial_id(),
    required("fingerprint", Text),
    required("rule", Text),
    required("kind", Text),
    required("severity", Text),
    required("scope", JSONB),
    Column("value", Double),
    Column("threshold", Double),
    required("summary", Text),
    required("at", TS),
    required("idempotency_key", Text, unique=True),
    Column("incident_id", Text),
    # the point estimate behind ``value`` when the rule compares a bound (else NULL), and the
    # sample size behind it
    Column("estimate", Double),
    Column("samples", Double),
    Index(None, "at"),
    Index(None, "fingerprint", "at"),
    Index(None, "incident_id"),
)

alert_incidents = Table(
    "alert_incidents",
    metadata,
    key("id", Text),
    required("incident_key", Text),
    required("labels", JSONB),
    required("status", Text),
    required("severity", Text),
    required("opened_at", TS),
    Column("resolved_at", TS),
    required("members", JSONB),
    required("pages", Integer),
    required("state", JSONB),
    required("version", Integer),
    inserted_at("updated_at"),
    Index(None, "status"),
    Index(None, "incident_key", "opened_at"),
    Index(None, "opened_at"),
    Index(None, "resolved_at"),
)

alert_exemplars = Table(
    "alert_exemplars",
    metadata,
    key("fingerprint", Text),
    key("fired_at", TS),
    key("rank", SmallInteger),
    required("rule", Text),
    Column("conversation_id", Text),
    required("reason", Text),
    required("detail", JSONB, server_default="{}"),
    inserted_at("chosen_at"),
    Index(None, "conversation_id"),
)
