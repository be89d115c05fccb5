"""Pure event-to-row conversion for the write path (no I/O; snuba-style processing).

``event_row`` flattens a validated ``AgentEvent`` into the tuple the writer stores: the
``events`` columns in ``EVENT_COLUMNS`` order, then the ``ROLLUP_FIELDS`` (payload fields the
roll-ups read, taken from the event here so the database does not parse the body for them).
``DeadLetter`` is one invalid input with its reason, as written to ``dead_letters`` and to the
DLQ topic's headers.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

from monitor.contract.events import SEGMENT_FIELDS, AgentEvent

# the COPY column order: every ``events`` column but the server-filled ``ingested_at``
# (spelled out so this module stays pure, the segment columns read from the contract's models;
# tests/ingest/test_store_writer.py checks it against the table definition)
EVENT_COLUMNS: tuple[str, ...] = (
    "event_id",
    "conversation_id",
    "type",
    "ts",
    *SEGMENT_FIELDS,
    "turn",
    "role",
    "confidence",
    "tool_name",
    "tool_ok",
    "body",
    "kafka_partition",
    "kafka_offset",
)

#: after the ``EVENT_COLUMNS``: the number of tool calls of a message, the trigger of an
#: escalation, the success, reward and source of an outcome (None for other event types)
ROLLUP_FIELDS: tuple[str, ...] = (
    "tool_calls",
    "escalation_trigger",
    "outcome_success",
    "outcome_reward",
    "outcome_source",
)

#: every field of an ``EventRow``, in order
ROW_FIELDS: tuple[str, ...] = EVENT_COLUMNS + ROLLUP_FIELDS

EventRow = tuple[Any, ...]

#: positions in an ``EventRow`` of the stored body and of where the event came from
BODY, PARTITION, OFFSET = (
    EVENT_COLUMNS.index(c) for c in ("body", "kafka_partition", "kafka_offset")
)


def event_key(event_id: str) -> str:
    """The key of ``event_id`` in ``event_ids``: its md5 digest as 32 hex digits, the same
    16 bytes as Postgres's ``md5(event_id)::uuid`` (:data:`monitor.store.tables.EVENT_KEY`)."""
    return hashlib.md5(event_id.encode(), usedforsecurity=False).hexdigest()


def event_row(
    event: AgentEvent, partition: int | None = None, offset: int | None = None
) -> EventRow:
    """The row of ``event`` (``ROW_FIELDS``); ``body`` is the event's canonical JSON (str)."""
    ctx = event.context
    message, outcome = event.message, event.outcome
    role = message.role if message is not None else None
    tool_name: str | None = None
    tool_ok: bool | None = None
    if event.tool_result is not None:
        tool_name, tool_ok = event.tool_result.name, event.tool_result.ok
    return (
        event.event_id,
        event.conversation_id,
        event.type,
        event.ts,
        event.agent.id,
        event.agent.version,
        event.agent.model,
        ctx.domain if ctx else None,
        ctx.tier if ctx else None,
        ctx.channel if ctx else None,
        ctx.intent if ctx else None,
        ctx.segment if ctx else None,
        ctx.task_id if ctx else None,
        ctx.trial if ctx else None,
        event.turn,
        role,
        event.confidence,
        tool_name,
        tool_ok,
        event.to_json().decode(),
        partition,
        offset,
        len(message.tool_calls) if message is not None else None,
        event.escalation.trigger if event.escalation is not None else None,
        outcome.success if outcome is not None else None,
        outcome.reward if outcome is not None else None,
        outcome.source if outcome is not None else None,
    )


@dataclass(frozen=True)
class DeadLetter:
    """An input that failed validation, with where it came from and why."""

    source: str  # topic name, or "http"
    partition: int | None
    offset: int | None
    reason: str
    field: str | None
    detail: str
    raw: bytes
    key: bytes | None = None

    def headers(self) -> list[tuple[str, bytes]]:
        """Kafka headers for the DLQ record (the value stays the original bytes)."""
        meta = {
            "reason": self.reason,
            "field": self.field or "",
            "detail": self.detail,
            "source": self.source,
            "source_partition": "" if self.partition is None else str(self.partition),
            "source_offset": "" if self.offset is None else str(self.offset),
        }
        return [(k, v.encode()) for k, v in meta.items()]

    def as_json(self) -> str:
        return json.dumps({"reason": self.reason, "field": self.field, "detail": self.detail})
