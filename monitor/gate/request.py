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
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from monitor.contract.events import Agent, AgentEvent, Id, Probability, ToolCall, validate_event
from monitor.contract.limits import check_characters, may_hold_nul, parse_json
from monitor.core.errors import InvalidEvent

MAX_HISTORY_EVENTS = 500


class GateRequestError(Exception):
    """A request the gate refuses: ``status`` (4xx), ``reason`` (code) and a human ``detail``."""

    def __init__(self, status: int, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.status = status
        self.reason = reason
        self.detail = detail

    def as_dict(self) -> dict[str, Any]:
        return {"error": self.detail, "reason": self.reason}


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


def parse_gate_request(body: bytes, *, max_body_bytes: int, max_content_chars: int) -> GateRequest:
    """Validate ``body`` as a gate request.

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
    history = []
    for i, item in enumerate(raw_history):
        try:
            history.append(validate_event(item, check_chars=False))
        except InvalidEvent as exc:
            where = f"history[{i}]" + (f".{exc.field}" if exc.field else "")
            raise GateRequestError(400, "invalid_history", f"{where}: {exc.detail}") from None
    try:
        return GateRequest.model_validate({**data, "history": history})
    except ValidationError as exc:
        err = exc.errors()[0]
        field = ".".join(str(p) for p in err["loc"]) or "body"
        raise GateRequestError(400, "invalid_field", f"{field}: {err['msg']}") from None
