"""``POST /v1/gate`` request bodies: parsing and the 4xx reasons (pure).

A body is one JSON object::

    {"conversation_id": "c-1", "agent": {"id": "support-bot"}, "content": "Your refund ...",
     "confidence": 0.82, "tool_calls": [{"id": "t1", "name": "refund", "arguments": {}}],
     "domain": "airline", "tier": 2, "request_id": "r-17",
     "history": [<agent-event/v1 events of the conversation so far>]}

``content`` is the message the agent is about to send; ``tool_calls`` the calls it carries;
``history`` the conversation's earlier events (tool calls and results the inline checks compare
the message with), each validated like any agent-event/v1 event. ``request_id`` (optional) makes
the decision event's id ``gate:<request_id>``, so a retried request is stored once.

Every problem raises :class:`GateRequestError` with an HTTP status (400 malformed, 413 too
large) and a machine-readable ``reason``; nothing here raises anything else.

An agent re-sends its conversation's history with every request; :class:`HistoryCache` keeps
the validated events of recent conversations so a request pays validation only for the events
it adds (see the class for the key: a changed event is never served from the cache).
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from pydantic_core import to_json

from monitor.contract.events import Agent, AgentEvent, Id, Probability, ToolCall, validate_event
from monitor.contract.limits import check_characters, may_hold_nul, parse_json
from monitor.core.errors import GateRequestError, InvalidEvent

MAX_HISTORY_EVENTS = 500
HISTORY_CACHE_EVENTS = 10_000


class GateRequest(BaseModel):
    """One validated gate request (see the module docstring)."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    conversation_id: Id
    agent: Agent
    content: str
    confidence: Probability
    tool_calls: list[ToolCall] = Field(default_factory=list, max_length=128)
    domain: Annotated[str, Field(min_length=1, max_length=128)] | None = None
    tier: Literal[1, 2, 3] | None = None
    request_id: Id | None = None
    history: list[AgentEvent] = Field(default_factory=list)


class HistoryCache:
    """Validated history events of the most recently seen conversations (a bounded LRU).

    The key of a cached event is the pair (the request's ``conversation_id``, the event's
    JSON value re-serialized exactly: :func:`pydantic_core.to_json` of the parsed item, which
    keeps key order, string contents and the JSON types apart: ``1``, ``1.0`` and ``true``
    differ). Equal keys mean an identical JSON value, and validating an identical value gives
    an identical event (``validate_event`` reads nothing but the value), so a cached event is
    exactly what validating again would give; any change to an event (one character, a
    field's order) is a different key and is validated afresh. Per conversation the cache
    holds the events of its latest valid request only (older versions are dropped), and at
    most ``max_events`` events in all: the least recently asked-about conversations go first.
    """

    def __init__(self, max_events: int = HISTORY_CACHE_EVENTS) -> None:
        self.max_events = max_events
        self._conversations: OrderedDict[str, dict[bytes, AgentEvent]] = OrderedDict()
        self._size = 0
        self.hits = 0
        self.misses = 0

    def __len__(self) -> int:
        return self._size

    def validate(self, conversation_id: object, raw: list[Any]) -> list[AgentEvent]:
        """``raw`` validated (each like an ingested event), the unchanged events from the
        cache. Raises ``GateRequestError`` ``invalid_history`` like the uncached path; an
        invalid history changes nothing in the cache."""
        if not isinstance(conversation_id, str):
            return _validate_history(raw)
        known = self._conversations.get(conversation_id, {})
        keys = [to_json(item) for item in raw]
        fresh: dict[bytes, AgentEvent] = {}
        out: list[AgentEvent] = []
        for i, (key, item) in enumerate(zip(keys, raw, strict=True)):
            event = known.get(key)
            if event is None:
                event = fresh.get(key)
            if event is None:
                event = _validate_one(i, item)
                self.misses += 1
            else:
                self.hits += 1
            fresh[key] = event
            out.append(event)
        self._store(conversation_id, fresh)
        return out

    def _store(self, conversation_id: str, events: dict[bytes, AgentEvent]) -> None:
        old = self._conversations.pop(conversation_id, None)
        self._size -= len(old) if old is not None else 0
        if len(events) > self.max_events:
            return
        self._conversations[conversation_id] = events
        self._size += len(events)
        while self._size > self.max_events:
            _, dropped = self._conversations.popitem(last=False)
            self._size -= len(dropped)


def _validate_one(i: int, item: Any) -> AgentEvent:
    try:
        return validate_event(item, check_chars=False)
    except InvalidEvent as exc:
        where = f"history[{i}]" + (f".{exc.field}" if exc.field else "")
        raise GateRequestError(400, "invalid_history", f"{where}: {exc.detail}") from None


def _validate_history(raw: list[Any]) -> list[AgentEvent]:
    return [_validate_one(i, item) for i, item in enumerate(raw)]


def parse_gate_request(
    body: bytes,
    *,
    max_body_bytes: int,
    max_content_chars: int,
    history_cache: HistoryCache | None = None,
) -> GateRequest:
    """Validate ``body`` as a gate request (the history through ``history_cache`` when given:
    the same request and the same errors as without it).

    Raises:
        GateRequestError: 413 ``too_large`` (body above ``max_body_bytes``, content above
            ``max_content_chars``, history above :data:`MAX_HISTORY_EVENTS`); 400 ``not_json``,
            ``invalid_field`` (naming the field), ``invalid_history`` (naming the event) or
            ``invalid_character`` (a NUL the store could not hold).
    """
    if len(body) > max_body_bytes:
        raise GateRequestError(413, "too_large", f"body above {max_body_bytes} bytes")
    try:
        data = parse_json(body)
    except InvalidEvent as exc:
        raise GateRequestError(400, "not_json", f"body is not JSON: {exc.detail}") from None
    if not isinstance(data, dict):
        raise GateRequestError(400, "not_json", "body must be a JSON object")
    if may_hold_nul(body):  # else the parser guarantees storable strings: skip the walk
        try:
            check_characters(data)
        except InvalidEvent as exc:
            raise GateRequestError(400, "invalid_character", exc.detail) from None
    content = data.get("content")
    if isinstance(content, str) and len(content) > max_content_chars:
        raise GateRequestError(
            413, "too_large", f"content is {len(content)} characters, limit {max_content_chars}"
        )
    raw_history = data.get("history", [])
    if not isinstance(raw_history, list):
        raise GateRequestError(400, "invalid_field", "history: must be a list of events")
    if len(raw_history) > MAX_HISTORY_EVENTS:
        raise GateRequestError(
            413, "too_large", f"history has {len(raw_history)} events, limit {MAX_HISTORY_EVENTS}"
        )
    if history_cache is None:
        history = _validate_history(raw_history)
    else:
        history = history_cache.validate(data.get("conversation_id"), raw_history)
    try:
        return GateRequest.model_validate({**data, "history": history})
    except ValidationError as exc:
        err = exc.errors()[0]
        field = ".".join(str(p) for p in err["loc"]) or "body"
        raise GateRequestError(400, "invalid_field", f"{field}: {err['msg']}") from None
