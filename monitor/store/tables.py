"""SQLAlchemy table definitions: the single source of truth that migrations must match.

``events`` holds every valid event once: partitioned by range of ``ts``, one partition per UTC
day (schema ``event_partitions``, see :mod:`monitor.store.partitions`), so that retention drops
whole days, and each day by list of ``kept`` (a leaf for the sample's events, one for the rest,
emptied whole after a short window); ``event_ids`` is its de-duplication key (a partitioned
table's unique key would have to include ``ts``; it holds a 16-byte digest of each id): the
writer inserts an event only when its id is new there.
``conversations`` is the per-conversation roll-up maintained in the same transaction as the
event inserts;
``dead_letters`` keeps every invalid input with its reason (idempotent per source offset).
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import (
    BigInteger,
    Boolean,
    Column,
    DateTime,
    Double,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    SmallInteger,
    Table,
    Text,
    UniqueConstraint,
    func,
    text,
)
from sqlalchemy.dialects.postgresql import JSONB, UUID

metadata = MetaData(
    naming_convention={
        "ix": "ix_%(table_name)s_%(column_0_N_name)s",
        "uq": "uq_%(table_name)s_%(column_0_N_name)s",
        "pk": "pk_%(table_name)s",
    }
)

TS = DateTime(timezone=True)


def required(name: str, type_: Any, **options: Any) -> Column[Any]:
    """A ``NOT NULL`` column (``options`` as for ``Column``: a server default, a key...)."""
    return Column(name, type_, nullable=False, **options)


def key(name: str, type_: Any) -> Column[Any]:
    """A column of the primary key."""
    return Column(name, type_, primary_key=True)


def inserted_at(name: str) -> Column[Any]:
    """A ``NOT NULL`` timestamp the database sets to the insert's time unless given."""
    return Column(name, TS, nullable=False, server_default=func.now())


def serial_id() -> Column[Any]:
    """The ``id`` primary key the database numbers (``bigserial``)."""
    return Column("id", BigInteger, primary_key=True, autoincrement=True)


# conversations columns written by the sampler and the judge scheduler, not by the roll-up
SAMPLING_COLUMNS = (
    "sample_stratum",
    "sample_rate",
    "sampled_by_rate",
    "sample_weight",
    "sample_policy",
    "judge_requested_at",
    "judge_watch",
)

# Columns shared by events and conversations: who and which segment.
SEGMENT_COLUMNS = (
    "agent_id",
    "agent_version",
    "agent_model",
    "domain",
    "tier",
    "channel",
    "intent",
    "segment",
    "task_id",
    "trial",
)


def _segment_columns(agent_nullable: bool) -> list[Column[object]]:
    return [
        Column("agent_id", Text, nullable=agent_nullable),
        Column("agent_version", Text),
        Column("agent_model", Text),
        Column("domain", Text),
        Column("tier", SmallInteger),
        Column("channel", Text),
        Column("intent", Text),
        Column("segment", Text),
        Column("task_id", Text),
        Column("trial", Integer),
    ]


# No primary key (event_ids is the unique key). Indexes: only what the readers need --
# conversation_id, ts: the judges' transcript and feedback, the gate's "ever gated"; ingested_at:
# the alerts' dead-letter share; ts of gate events: the gate's effect and alert metrics.
events = Table(
    "events",
    metadata,
    Column("event_id", Text, nullable=False),
    Column("conversation_id", Text, nullable=False),
    Column("type", Text, nullable=False),
    Column("ts", TS, nullable=False),
    *_segment_columns(agent_nullable=False),
    Column("turn", Integer),
    Column("role", Text),
    Column("confidence", Double),
    Column("tool_name", Text),
    Column("tool_ok", Boolean),
    Column("body", JSONB, nullable=False),
    Column("kafka_partition", Integer),
    Column("kafka_offset", BigInteger),
    Column("ingested_at", TS, nullable=False, server_default=func.now()),
    # false: an event of a conversation outside the sample (its day's ``_u`` leaf, emptied after
    # retention_unsampled_hours); set true when the conversation is promoted
    Column("kept", Boolean, nullable=False, server_default=text("true")),
    Index(None, "conversation_id", "ts"),
    Index(None, "ingested_at"),
    Index("ix_events_gate_ts", "ts", postgresql_where=text("type = 'gate'")),
    postgresql_partition_by="RANGE (ts)",
)

# Every stored event's id, as its md5 digest (``md5(event_id)::uuid``, :data:`EVENT_KEY`: a
# fixed 16 bytes whatever the id's length), with where its row is (ts, conversation_id: the
# conflicting-duplicate check finds the stored body through ix_events_conversation_id_ts in one
# partition). Two distinct ids share a digest with probability about n^2 / 2^129 for n keys
# (5e-18 for 60 days at 10,000 events/s); a chosen collision only lets a producer lose its own
# event, a second preimage of another producer's id is out of reach. Kept
# retention_event_ids_days (by ts), never less than the events; the key of an event outside the
# sample goes with its day's unsampled leaf (migration 0031).
event_ids = Table(
    "event_ids",
    metadata,
    Column("event_key", UUID(as_uuid=False), primary_key=True),
    Column("ts", TS, nullable=False),
    Column("conversation_id", Text, nullable=False),
    Index(None, "ts"),
)

#: the SQL of an event's key in ``event_ids`` from its id (the writer computes the same digest
#: for its COPY: :func:`monitor.ingest.rows.event_key`)
EVENT_KEY = "md5({})::uuid"

conversations = Table(
    "conversations",
    metadata,
    Column("conversation_id", Text, primary_key=True),
    *_segment_columns(agent_nullable=False),
    Column("first_ts", TS, nullable=False),
    Column("last_ts", TS, nullable=False),
    Column("event_count", Integer, nullable=False, server_default="0"),
    Column("message_count", Integer, nullable=False, server_default="0"),
    Column("assistant_messages", Integer, nullable=False, server_default="0"),
    Column("user_messages", Integer, nullable=False, server_default="0"),
    Column("tool_calls", Integer, nullable=False, server_default="0"),
    Column("tool_results", Integer, nullable=False, server_default="0"),
    Column("tool_errors", Integer, nullable=False, server_default="0"),
    Column("feedback_count", Integer, nullable=False, server_default="0"),
    Column("min_confidence", Double),
    Column("last_confidence", Double),
    Column("last_confidence_ts", TS),
    Column("escalated", Boolean, nullable=False, server_default="false"),
    Column("escalated_at", TS),
    Column("escalation_turn", Integer),
    Column("escalation_trigger", Text),
    # the smallest turn of any of its events: turns to escalation = escalation_turn - first_turn
    Column("first_turn", Integer),
    Column("outcome_success", Boolean),
    Column("outcome_reward", Double),
    Column("outcome_source", Text),
    Column("outcome_at", TS),
    # the store's now() of the newest write that stored one of its events: its last arrival
    # (the judges wait until it is idle by arrival as well as by event time)
    Column("updated_at", TS, nullable=False, server_default=func.now()),
    # the sampling decision (monitor.sampling.policy), made once when the conversation is
    # first written
    # and never changed: NULL = not decided yet. sample_weight = 1 / rate when sampled by rate,
    # else 0 (a conversation pulled in only by an always-sample rule does not weigh in metrics)
    Column("sample_stratum", Text),
    Column("sample_rate", Double),
    Column("sampled_by_rate", Boolean),
    Column("sample_weight", Double),
    Column("sample_policy", Text),
    # when the judge scheduler last sent the conversation to the judges (NULL: not yet)
    Column("judge_requested_at", TS),
    # the stored events its verdicts cover while it may be judged again when it grows
    # (monitor.judges.rejudge.watch); NULL: not judged yet, a request pending, or its
    # re-judgements spent
    Column("judge_watch", Integer),
    Index(None, "agent_id", "first_ts"),
    # the escalation reads' partial-hour edges (monitor.analytics.repo_escalation)
    Index(None, "first_ts"),
    Index(None, "last_ts"),
    # the judge scheduler's candidates: not yet requested, and sampled or pulled in by a rule
    # that the stored facts decide (a confidence floor is looked up separately)
    Index(
        "ix_conversations_judge_candidates",
        "last_ts",
        postgresql_where=text(
            "judge_requested_at IS NULL AND (sampled_by_rate OR escalated OR tool_errors > 0"
            " OR feedback_count > 0)"
        ),
    ),
    # the judge scheduler's re-judge candidates: judged, and grown since (a handful of rows)
    Index(
        "ix_conversations_rejudge", "updated_at", postgresql_where=text("event_count > judge_watch")
    ),
    # the escalation Examples (migration 0035): escalated conversations of the weighted sample
    # by minimum confidence, and failed, not escalated ones
    Index(
        "ix_conversations_escalated_confidence",
        "min_confidence",
        postgresql_where=text("escalated AND min_confidence IS NOT NULL AND sample_weight > 0"),
    ),
    Index(
        "ix_conversations_missed_confidence",
        "min_confidence",
        postgresql_where=text(
            "(NOT outcome_success) AND (NOT escalated) AND min_confidence IS NOT NULL"
            " AND sample_weight > 0"
        ),
    ),
)

dead_letters = Table(
    "dead_letters",
    metadata,
    Column("id", BigInteger, primary_key=True, autoincrement=True),
    Column("source", Text, nullable=False),
    Column("source_partition", Integer),
    Column("source_offset", BigInteger),
    Column("reason", Text, nullable=False),
    Column("field", Text),
    Column("detail", Text, nullable=False),
    Column("raw", LargeBinary, nullable=False),
    # md5 of raw: a re-delivered record (same offset, same bytes) is absorbed, while a different
    # record at a reused offset (a recreated topic, an in-memory broker restarted) is kept
    Column("raw_md5", Text, nullable=False),
    Column("received_at", TS, nullable=False, server_default=func.now()),
    UniqueConstraint("source", "source_partition", "source_offset", "raw_md5"),
    Index(None, "received_at"),
)
