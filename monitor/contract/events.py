"""The ``agent-event/v1`` contract (docs/design.md): models, decoding, encoding, JSON Schema.

Pure: imports no I/O library. ``decode_event`` is the single gate every input passes through
(Kafka, HTTP ingest, replay); it either returns a validated ``AgentEvent`` or raises
``InvalidEvent`` whose ``reason`` is a machine-readable code and whose ``field`` names the
dotted path of the offending field.

Limits: a whole serialized event is at most ``MAX_EVENT_BYTES`` (256 KiB); ``attributes`` is at
most ``MAX_ATTRIBUTES_BYTES`` (16 KiB) once serialized as compact JSON. Ids are 1-128 chars;
the labels the store indexes (agent version and model, the context strings) at most
``MAX_LABEL_CHARS`` (256) chars.
Confidences and rewards are in [0, 1], feedback scores in [-1, 1]. Timestamps must carry a zone.
What the store can hold is checked here too (:mod:`monitor.contract.limits`): no NUL or lone
surrogate in any string, 32-bit ``turn``/``trial``, ``ts`` within 0001-01-02..9999-12-30 UTC,
JSON at most 64 levels deep, and optionally no ``ts`` too far in the receiver's future.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta
from typing import Annotated, Any, Literal

from pydantic import (
    AwareDatetime,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from monitor.contract.limits import (
    INT32_MAX,
    MAX_JSON_DEPTH,
    MAX_LABEL_CHARS,
    MAX_TS,
    MIN_TS,
    check_characters,
    check_future,
    check_timestamp,
    may_hold_nul,
    parse_json,
)
from monitor.contract.payloads import GATE_DECISIONS as GATE_DECISIONS
from monitor.contract.payloads import SEGMENT_FIELDS as SEGMENT_FIELDS
from monitor.contract.payloads import Agent as Agent
from monitor.contract.payloads import Context as Context
from monitor.contract.payloads import EscalationPayload as EscalationPayload
from monitor.contract.payloads import FeedbackPayload as FeedbackPayload
from monitor.contract.payloads import GateFinding as GateFinding
from monitor.contract.payloads import GatePayload as GatePayload
from monitor.contract.payloads import Id as Id
from monitor.contract.payloads import MessagePayload as MessagePayload
from monitor.contract.payloads import OutcomePayload as OutcomePayload
from monitor.contract.payloads import Probability as Probability
from monitor.contract.payloads import ToolCall as ToolCall
from monitor.contract.payloads import ToolResultPayload as ToolResultPayload
from monitor.contract.payloads import _Strict as _Strict
from monitor.contract.validation_errors import reason_for
from monitor.core.errors import InvalidEvent

SCHEMA_ID = "agent-event/v1"
MAX_EVENT_BYTES = 256 * 1024
MAX_ATTRIBUTES_BYTES = 16 * 1024
EVENT_TYPES: tuple[str, ...] = (
    "message",
    "tool_result",
    "escalation",
    "outcome",
    "feedback",
    "gate",
)

#: how ``attributes`` are measured: compact JSON, non-ASCII escaped (so its length is in bytes)
_ATTRIBUTES_JSON = json.JSONEncoder(separators=(",", ":"), default=str)

#: the most bytes one character of a string takes in :data:`_ATTRIBUTES_JSON`'s output: a
#: character outside the Basic Multilingual Plane is escaped as a surrogate pair, two six-byte
#: escapes such as ``\\ud83d\\ude00`` (12 bytes)
_MAX_ESCAPED = 12


def _surely_small(attributes: dict[str, Any]) -> bool:
    """True when ``attributes`` (flat: string keys, values strings, numbers, booleans or None)
    cannot serialize to more than ``MAX_ATTRIBUTES_BYTES``: an upper bound of the compact JSON's
    length counted without encoding it (quotes, colon and comma 4 bytes a member, each
    character of a string at most :data:`_MAX_ESCAPED` bytes, a number at most as long as its
    ``repr``). False when it may (or has other values): then it is encoded and measured."""
    bound = 2
    for key, value in attributes.items():
        if type(key) is not str:
            return False
        kind = type(value)
        if kind is str:
            bound += (len(key) + len(value)) * _MAX_ESCAPED + 6
        elif kind is int or kind is float:  # a float may be written -Infinity (9 bytes)
            bound += len(key) * _MAX_ESCAPED + 13 + len(repr(value))
        elif value is None or kind is bool:
            bound += len(key) * _MAX_ESCAPED + 9
        else:
            return False
        if bound > MAX_ATTRIBUTES_BYTES:
            return False
    return True


EventType = Literal["message", "tool_result", "escalation", "outcome", "feedback", "gate"]
Payload = (
    MessagePayload
    | ToolResultPayload
    | EscalationPayload
    | OutcomePayload
    | FeedbackPayload
    | GatePayload
)

PAYLOAD_TYPES: dict[type, EventType] = {
    MessagePayload: "message",
    ToolResultPayload: "tool_result",
    EscalationPayload: "escalation",
    OutcomePayload: "outcome",
    FeedbackPayload: "feedback",
    GatePayload: "gate",
}
"""The event type of each payload class (the field of :class:`AgentEvent` that holds it)."""


class AgentEvent(_Strict):
    """One agent event. Exactly one payload is set: the one named by ``type``."""

    schema_: Literal["agent-event/v1"] = Field(default="agent-event/v1", alias="schema")
    event_id: Id
    type: EventType
    ts: Annotated[
        AwareDatetime,
        Field(
            description=f"RFC 3339 with a zone; in UTC between {MIN_TS.date()} and {MAX_TS.date()}"
        ),
    ]
    conversation_id: Id
    agent: Agent
    context: Context | None = None
    turn: Annotated[int, Field(ge=0, le=INT32_MAX)] | None = None
    attributes: dict[str, Any] | None = None
    message: MessagePayload | None = None
    tool_result: ToolResultPayload | None = None
    escalation: EscalationPayload | None = None
    outcome: OutcomePayload | None = None
    feedback: FeedbackPayload | None = None
    gate: GatePayload | None = None

    model_config = ConfigDict(strict=True, extra="forbid", frozen=True, populate_by_name=True)

    @field_validator("attributes")
    @classmethod
    def _attributes_size(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        if value is not None and not _surely_small(value):
            size = len(_ATTRIBUTES_JSON.encode(value))  # ASCII: characters are bytes
            if size > MAX_ATTRIBUTES_BYTES:
                raise ValueError(
                    f"attributes_too_large: {size} bytes serialized, limit {MAX_ATTRIBUTES_BYTES}"
                )
        return value

    @model_validator(mode="after")
    def _one_payload(self) -> AgentEvent:
        fields = self.__dict__
        if fields[self.type] is not None and sum(fields[n] is not None for n in EVENT_TYPES) == 1:
            return self  # the usual case, in one pass: the named payload and no other
        present = [name for name in EVENT_TYPES if getattr(self, name) is not None]
        if len(present) > 1:
            raise ValueError(f"multiple_payloads: {', '.join(present)} set; exactly one allowed")
        if not present:
            raise ValueError(f"missing_payload: type is {self.type!r} but no {self.type} payload")
        if present[0] != self.type:
            raise ValueError(f"payload_mismatch: type is {self.type!r} but payload is {present[0]}")
        return self

    @classmethod
    def of(cls, payload: Payload, **fields: Any) -> AgentEvent:
        """The event carrying ``payload`` under the field its class names (``type`` follows
        from it); ``fields`` are the others (``event_id``, ``ts``, ``conversation_id``,
        ``agent``, ...). Validates like the constructor."""
        kind = PAYLOAD_TYPES[type(payload)]
        carried: dict[str, Any] = {kind: payload}
        return cls(type=kind, **carried, **fields)

    @property
    def payload(self) -> Payload:
        """The payload object named by ``type`` (always present on a validated event)."""
        value = getattr(self, self.type)
        assert value is not None
        return value  # type: ignore[no-any-return]

    @property
    def confidence(self) -> float | None:
        """The confidence carried by a message or escalation payload, else ``None`` (a gate
        decision's confidence stays in its payload: it is not a calibration item)."""
        if self.message is not None:
            return self.message.confidence
        if self.escalation is not None:
            return self.escalation.confidence
        return None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict in contract field names, without unset optional fields."""
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)

    def to_json(self) -> bytes:
        """Compact UTF-8 JSON in contract field names; what goes on the wire."""
        return self.model_dump_json(by_alias=True, exclude_none=True).encode()


#: Hands accepted events on (to the events topic); returns once they are published.
Publish = Callable[[list[AgentEvent]], Awaitable[None]]


def decode_event(
    raw: bytes | str, *, now: datetime | None = None, max_future_skew: timedelta | None = None
) -> AgentEvent:
    """Validate one serialized event and return it.

    Args:
        raw: the UTF-8 JSON bytes of a single event (a Kafka value, an NDJSON line).
        now, max_future_skew: when both are given, an event whose ``ts`` is more than
            ``max_future_skew`` after ``now`` is rejected (``future_timestamp``).

    Raises:
        InvalidEvent: with ``reason`` ``oversize`` (> 256 KiB), ``not_json`` (undecodable or not a
            JSON object), ``too_deep``, or the first contract or storage rule broken
            (``invalid_character``, ``out_of_range``...), naming its field.
    """
    data = raw.encode(errors="surrogatepass") if isinstance(raw, str) else raw
    if len(data) > MAX_EVENT_BYTES:
        raise InvalidEvent(
            "oversize", None, f"event is {len(data)} bytes, limit is {MAX_EVENT_BYTES}"
        )
    obj = parse_json(data)  # pydantic-core parser: ~2x faster than json.loads (bench)
    chars = may_hold_nul(data)
    return validate_event(obj, now=now, max_future_skew=max_future_skew, check_chars=chars)


def validate_event(
    obj: Any,
    *,
    now: datetime | None = None,
    max_future_skew: timedelta | None = None,
    check_chars: bool = True,
) -> AgentEvent:
    """Validate an already-parsed JSON value (see ``decode_event`` for the errors raised).

    ``check_chars=False`` skips the walk for NUL and lone surrogates: only for a value parsed
    from JSON text that :func:`monitor.contract.limits.may_hold_nul` cleared."""
    event = _validate(obj, check_chars)
    check_timestamp(event.ts)
    if now is not None and max_future_skew is not None:
        check_future(event.ts, now, max_future_skew)
    return event


def _validate(obj: Any, check_chars: bool) -> AgentEvent:
    if not isinstance(obj, dict):
        raise InvalidEvent(
            "not_json", None, f"event must be a JSON object, got {type(obj).__name__}"
        )
    if "schema" not in obj:
        raise InvalidEvent("missing_field", "schema", f'schema: required, exactly "{SCHEMA_ID}"')
    etype = obj.get("type")
    if isinstance(etype, str) and etype not in EVENT_TYPES:
        raise InvalidEvent("unknown_type", "type", f"type must be one of {', '.join(EVENT_TYPES)}")
    if check_chars:
        check_characters(obj)
    try:
        return AgentEvent.model_validate(_json_strict_input(obj))
    except ValidationError as exc:
        raise InvalidEvent(*reason_for(exc.errors()[0], EVENT_TYPES, SCHEMA_ID)) from None


def _json_strict_input(obj: dict[str, Any]) -> dict[str, Any]:
    """Parse ``ts`` ourselves so strict mode still accepts RFC 3339 strings from JSON."""
    ts = obj.get("ts")
    if isinstance(ts, str):
        try:
            parsed = datetime.fromisoformat(ts.replace("Z", "+00:00").replace("z", "+00:00"))
        except ValueError:
            raise InvalidEvent(
                "invalid_value", "ts", f"ts: {ts!r} is not an RFC 3339 timestamp"
            ) from None
        if parsed.tzinfo is None:
            raise InvalidEvent("invalid_value", "ts", "ts: timestamp must carry a time zone")
        obj = {**obj, "ts": parsed}
    return obj


def json_schema() -> dict[str, Any]:
    """The published JSON Schema of agent-event/v1, generated from the models."""
    schema = AgentEvent.model_json_schema(by_alias=True, mode="validation")
    schema["required"] = ["schema", *schema.get("required", [])]  # decode_event requires it
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["$id"] = "https://agent-reliability-monitor.dev/schemas/agent-event-v1.json"
    schema["title"] = "agent-event/v1"
    schema["description"] = (
        "One agent event. Exactly one payload object is present: the one named by `type`. "
        f"A serialized event is at most {MAX_EVENT_BYTES} bytes; attributes at most "
        f"{MAX_ATTRIBUTES_BYTES} bytes. Ids are at most 128 characters and the labels the "
        "store indexes (agent.version, agent.model, context.domain, channel, intent, segment, "
        f"task_id) at most {MAX_LABEL_CHARS} (reason invalid_value). What the store can hold: "
        "no string or key anywhere (attributes included) may contain U+0000 or a lone "
        "surrogate (reason invalid_character); integers fit in 32 bits and ts lies between "
        f"{MIN_TS.isoformat()} and {MAX_TS.isoformat()} in UTC (reason out_of_range); JSON is "
        f"at most {MAX_JSON_DEPTH} levels deep (reason too_deep); the receiver may reject a ts "
        "further in its future than its configured skew (reason future_timestamp)."
    )
    schema["$comment"] = "Strings must not contain U+0000 (the store cannot hold it)."
    return schema
