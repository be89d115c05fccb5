"""The agent-event/v1 contract: what is valid, what is not and why, and the published schema."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from monitor.cli.schema import render_schema
from monitor.contract.events import (
    EVENT_TYPES,
    MAX_ATTRIBUTES_BYTES,
    MAX_EVENT_BYTES,
    PAYLOAD_TYPES,
    AgentEvent,
    decode_event,
    validate_event,
)
from monitor.core.errors import InvalidEvent
from tests.factories import event_dict

SCHEMA_FILE = Path(__file__).resolve().parents[2] / "docs" / "agent-event-v1.schema.json"


def reason(obj: object) -> tuple[str, str | None]:
    raw = obj if isinstance(obj, bytes) else json.dumps(obj).encode()
    with pytest.raises(InvalidEvent) as info:
        decode_event(raw)
    return info.value.reason, info.value.field


@pytest.mark.parametrize(
    "etype", ["message", "tool_result", "escalation", "outcome", "feedback", "gate"]
)
def test_every_type_round_trips(etype: str):
    ev = decode_event(json.dumps(event_dict("e1", etype=etype, turn=3)))
    assert ev.type == etype and ev.turn == 3
    assert decode_event(ev.to_json()) == ev
    assert ev.to_dict()["schema"] == "agent-event/v1"


def test_timestamps_need_a_zone_and_keep_it():
    ok = event_dict("e1")
    ok["ts"] = "2026-01-01T12:00:00+02:00"
    assert decode_event(json.dumps(ok)).ts.utcoffset().total_seconds() == 7200
    ok["ts"] = "2026-01-01T12:00:00"
    assert reason(ok) == ("invalid_value", "ts")
    ok["ts"] = "yesterday"
    assert reason(ok) == ("invalid_value", "ts")


BAD = [
    (b"not json", ("not_json", None)),
    (b"[1, 2]", ("not_json", None)),
    (b'{"schema": "agent-event/v1"} trailing', ("not_json", None)),
    (
        json.dumps(event_dict("e", confidence=0.5)).replace("0.5", "NaN").encode(),
        ("out_of_range", "message.confidence"),
    ),
    (
        json.dumps(event_dict("e", confidence=0.5)).replace("0.5", "Infinity").encode(),
        ("out_of_range", "message.confidence"),
    ),
    (b"\xff\xfe", ("not_json", None)),
    ({**event_dict("e"), "schema": "agent-event/v2"}, ("bad_schema", "schema")),
    ({k: v for k, v in event_dict("e").items() if k != "schema"}, ("missing_field", "schema")),
    ({k: v for k, v in event_dict("e").items() if k != "event_id"}, ("missing_field", "event_id")),
    ({**event_dict("e"), "event_id": ""}, ("invalid_value", "event_id")),
    ({**event_dict("e"), "event_id": "x" * 129}, ("invalid_value", "event_id")),
    ({**event_dict("e"), "type": "thought"}, ("unknown_type", "type")),
    ({**event_dict("e"), "turn": "3"}, ("wrong_type", "turn")),
    ({**event_dict("e"), "turn": -1}, ("out_of_range", "turn")),
    ({**event_dict("e"), "turn": True}, ("wrong_type", "turn")),
    ({**event_dict("e"), "agent": {}}, ("missing_field", "agent.id")),
    ({**event_dict("e"), "context": {"tier": 4}}, ("invalid_value", "context.tier")),
    ({**event_dict("e"), "surprise": 1}, ("unknown_field", "surprise")),
    (event_dict("e", confidence=1.01), ("out_of_range", "message.confidence")),
    (event_dict("e", confidence=-0.1), ("out_of_range", "message.confidence")),
    (event_dict("e", role="robot"), ("invalid_value", "message.role")),
    (
        event_dict("e", tool_calls=[{"id": "k", "name": "f", "arguments": "x=1"}]),
        ("wrong_type", "message.tool_calls.0.arguments"),
    ),
    (event_dict("e", etype="outcome", reward=2), ("out_of_range", "outcome.reward")),
    (event_dict("e", etype="outcome", source="vibes"), ("invalid_value", "outcome.source")),
    (event_dict("e", etype="feedback", score=-1.5), ("out_of_range", "feedback.score")),
    (event_dict("e", etype="escalation", trigger="mood"), ("invalid_value", "escalation.trigger")),
    (event_dict("e", etype="tool_result", ok="yes"), ("wrong_type", "tool_result.ok")),
    ({**event_dict("e"), "feedback": {"score": 1, "source": "x"}}, ("multiple_payloads", None)),
    ({**event_dict("e"), "type": "outcome"}, ("payload_mismatch", None)),
    ({k: v for k, v in event_dict("e").items() if k != "message"}, ("missing_payload", None)),
    (
        {**event_dict("e"), "attributes": {"blob": "x" * 17_000}},
        ("attributes_too_large", "attributes"),
    ),
    (event_dict("e", content="x" * MAX_EVENT_BYTES), ("oversize", None)),
]


@pytest.mark.parametrize(("raw", "want"), BAD, ids=[w[0] for _, w in BAD])
def test_invalid_events_name_the_rule_and_field(raw: object, want: tuple[str, str | None]):
    assert reason(raw) == want


def test_error_detail_is_readable():
    with pytest.raises(InvalidEvent) as info:
        decode_event(json.dumps(event_dict("e", confidence=3)))
    assert "message.confidence" in info.value.detail
    assert info.value.as_dict()["reason"] == "out_of_range"


@given(st.binary(max_size=300))
def test_decode_never_raises_anything_but_invalid_event(raw: bytes):
    with contextlib.suppress(InvalidEvent):
        assert decode_event(raw).schema_ == "agent-event/v1"


def test_published_schema_is_current():
    assert SCHEMA_FILE.read_text() == render_schema(), (
        "docs/agent-event-v1.schema.json is stale: run `make schema`"
    )


def test_schema_describes_the_contract():
    schema = json.loads(SCHEMA_FILE.read_text())
    assert schema["title"] == "agent-event/v1"
    required = {"schema", "event_id", "type", "ts", "conversation_id", "agent"}
    assert set(schema["required"]) >= required
    assert schema["additionalProperties"] is False
    assert schema["properties"]["type"]["enum"] == [
        "message",
        "tool_result",
        "escalation",
        "outcome",
        "feedback",
        "gate",
    ]


def test_of_takes_the_type_from_the_payload_for_every_type():
    assert sorted(PAYLOAD_TYPES.values()) == sorted(EVENT_TYPES)
    made = {t: decode_event(json.dumps(event_dict("e1", etype=t))) for t in EVENT_TYPES}
    for etype, event in made.items():
        fields = {"event_id": "e2", "ts": event.ts, "conversation_id": "c", "agent": event.agent}
        again = AgentEvent.of(event.payload, **fields)
        assert again.type == etype and again.payload == event.payload
    with pytest.raises(ValueError, match="multiple_payloads"):  # validated like the constructor
        AgentEvent.of(made["message"].payload, **fields, outcome=made["outcome"].payload)


_STORABLE = st.characters(codec="utf-8", exclude_characters="\x00")
_ATTRIBUTE_VALUES = st.one_of(
    st.text(_STORABLE, max_size=40),  # emoji and BMP escapes: 12/6 bytes
    st.text(st.sampled_from('"\\\n\x01a'), max_size=40),  # escaped ASCII
    st.integers(min_value=-(10**30), max_value=10**30),
    st.floats(allow_nan=True, allow_infinity=True),
    st.booleans(),
    st.none(),
)


@given(
    attributes=st.dictionaries(st.text(_STORABLE, max_size=30), _ATTRIBUTE_VALUES, max_size=8),
    repeat=st.integers(min_value=1, max_value=400),
)
def test_attributes_limit_is_the_serialized_size(attributes: dict[str, object], repeat: int):
    """An event's attributes are refused exactly when their compact ASCII JSON is over the limit
    (the validator skips encoding flat attributes that cannot reach it: never wrongly)."""
    # widen to sizes around the limit: the same members under ``repeat`` prefixes
    wide = {f"{i}{k}": v for i in range(repeat) for k, v in attributes.items()}
    size = len(json.dumps(wide, separators=(",", ":"), default=str))
    raw = {**event_dict("e"), "attributes": wide}
    if size > MAX_ATTRIBUTES_BYTES:
        with pytest.raises(InvalidEvent) as info:
            validate_event(raw)
        assert (info.value.reason, info.value.field) == ("attributes_too_large", "attributes")
    else:
        kept = validate_event(raw).attributes
        assert json.dumps(kept, default=str) == json.dumps(wide, default=str)
