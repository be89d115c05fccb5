"""Shared parts of the SDK (import them from ``monitor.sdk``): event ids, event builders.

``EventHelpers`` builds one validated ``AgentEvent`` per helper call (``message``,
``tool_result``, ``escalation``, ``outcome``, ``feedback``) and hands it to ``_emit``; the async
emitter returns an awaitable from ``_emit``, the sync emitter returns the event itself. Building is
pure and happens on the caller's thread, so a bad argument raises at the call site.
"""

from __future__ import annotations

import os
import time
import uuid
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, Generic, Literal, TypedDict, TypeVar, Unpack

from monitor.contract.events import (
    SCHEMA_ID,
    Agent,
    AgentEvent,
    Context,
    EventType,
    ToolCall,
    validate_event,
)

R_co = TypeVar("R_co", covariant=True)


def new_event_id() -> str:
    """A fresh UUIDv7 as 32 hex chars: time-ordered (ms) with 74 random bits, so it is unique."""
    value = (time.time_ns() // 1_000_000 & (1 << 48) - 1) << 80
    value |= int.from_bytes(os.urandom(10), "big")
    value = (value & ~(0xF << 76)) | (0x7 << 76)  # version 7
    value = (value & ~(0x3 << 62)) | (0x2 << 62)  # RFC 4122 variant
    return uuid.UUID(int=value).hex


class EventFields(TypedDict, total=False):
    """The keywords every helper takes beside its payload, passed on to
    :meth:`EventHelpers.build`: ``turn``, ``attributes``, ``agent`` and ``context`` (default: the
    emitter's), ``event_id`` (default: :func:`new_event_id`), ``ts`` (default: the clock's now)."""

    turn: int | None
    attributes: Mapping[str, Any] | None
    agent: Agent | None
    context: Context | None
    event_id: str | None
    ts: datetime | None


def _utc_now() -> datetime:
    return datetime.now(UTC)


class EventHelpers(ABC, Generic[R_co]):
    """One helper per event type. Each fills ``event_id`` (``new_event_id()`` unless given), ``ts``
    (the clock's now unless given; must be timezone-aware, stored as UTC) and the default
    ``agent``/``context``, validates the event against agent-event/v1 and passes it to ``_emit``.

    Raises (at call time, nothing is sent): ``ValueError`` when no agent is known or a timestamp
    is naive; ``monitor.core.errors.InvalidEvent`` (reason + field) when an argument breaks
    the contract.
    """

    def __init__(
        self,
        agent: Agent | None = None,
        context: Context | None = None,
        clock: Callable[[], datetime] | None = None,
    ) -> None:
        self.agent = agent
        self.context = context
        self._clock: Callable[[], datetime] = clock or _utc_now

    @abstractmethod
    def _emit(self, event: AgentEvent) -> R_co:
        """Deliver ``event`` the way the concrete emitter does (async or blocking)."""

    def build(
        self,
        type_: EventType,
        conversation_id: str,
        payload: Mapping[str, Any],
        *,
        turn: int | None = None,
        attributes: Mapping[str, Any] | None = None,
        agent: Agent | None = None,
        context: Context | None = None,
        event_id: str | None = None,
        ts: datetime | None = None,
    ) -> AgentEvent:
        """Build and validate one event without sending it (the helpers' common part)."""
        who = agent if agent is not None else self.agent
        if who is None:
            raise ValueError(
                "no agent for this event: pass agent=Agent(id=...) to the emitter or to the call"
            )
        when = ts if ts is not None else self._clock()
        if when.tzinfo is None or when.utcoffset() is None:
            raise ValueError(f"event timestamp must be timezone-aware, got naive {when!r}")
        return validate_event(
            {
                "schema": SCHEMA_ID,
                "event_id": event_id if event_id is not None else new_event_id(),
                "type": type_,
                "ts": when.astimezone(UTC),
                "conversation_id": conversation_id,
                "agent": who,
                "context": context if context is not None else self.context,
                "turn": turn,
                "attributes": dict(attributes) if attributes is not None else None,
                type_: dict(payload),
            }
        )

    def message(
        self,
        conversation_id: str,
        role: Literal["assistant", "user", "system"],
        content: str | None,
        *,
        confidence: float | None = None,
        confidence_source: Literal["verbalized", "logprob", "trust_score", "other"] | None = None,
        tool_calls: Sequence[ToolCall | Mapping[str, Any]] | None = None,
        **fields: Unpack[EventFields],
    ) -> R_co:
        """Emit a ``message`` event (an LLM/user/system message, with its stated confidence)."""
        calls = [c if isinstance(c, ToolCall) else dict(c) for c in tool_calls or ()]
        payload = {
            "role": role,
            "content": content,
            "tool_calls": calls,
            "confidence": confidence,
            "confidence_source": confidence_source,
        }
        return self._emit(self.build("message", conversation_id, payload, **fields))

    def tool_result(
        self,
        conversation_id: str,
        call_id: str,
        name: str,
        ok: bool,
        content: str | None = None,
        error: str | None = None,
        **fields: Unpack[EventFields],
    ) -> R_co:
        """Emit a ``tool_result`` event (the result of the tool call ``call_id``)."""
        payload = {"call_id": call_id, "name": name, "ok": ok, "content": content, "error": error}
        return self._emit(self.build("tool_result", conversation_id, payload, **fields))

    def escalation(
        self,
        conversation_id: str,
        trigger: Literal["threshold", "agent", "user", "policy"],
        reason: str | None = None,
        confidence: float | None = None,
        **fields: Unpack[EventFields],
    ) -> R_co:
        """Emit an ``escalation`` event (the conversation was handed to a human)."""
        payload = {"trigger": trigger, "reason": reason, "confidence": confidence}
        return self._emit(self.build("escalation", conversation_id, payload, **fields))

    def outcome(
        self,
        conversation_id: str,
        success: bool,
        reward: float | None = None,
        source: Literal["ground_truth", "human_review", "csat", "ticket", "other"] = "ground_truth",
        **fields: Unpack[EventFields],
    ) -> R_co:
        """Emit an ``outcome`` event (may come long after the conversation; pass ``ts`` then)."""
        payload = {"success": success, "reward": reward, "source": source}
        return self._emit(self.build("outcome", conversation_id, payload, **fields))

    def feedback(
        self,
        conversation_id: str,
        score: float,
        source: str,
        comment: str | None = None,
        **fields: Unpack[EventFields],
    ) -> R_co:
        """Emit a ``feedback`` event (a score in [-1, 1] from ``source``, e.g. a thumbs up)."""
        payload = {"score": score, "source": source, "comment": comment}
        return self._emit(self.build("feedback", conversation_id, payload, **fields))
