"""The storage rules of the contract, pure: every input path gives the same verdict."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from monitor.auth.authorizer import Authorizer, Grant
from monitor.contract.events import decode_event
from monitor.contract.limits import MAX_JSON_DEPTH, _storable, check_characters, printable
from monitor.core.errors import InvalidEvent
from monitor.ingest.http import parse_events
from tests.factories import event_dict

NOW = datetime(2026, 6, 1, tzinfo=UTC)
SKEW = timedelta(minutes=5)


def nest(levels: int) -> object:
    value: object = 0
    for _ in range(levels):
        value = {"k": value}
    return value


CASES = [
    (event_dict("e", content="a\x00b"), ("invalid_character", "message.content")),
    (
        {**event_dict("e"), "attributes": {"x": ["ok", {"y\x00": 1}]}},
        ("invalid_character", "attributes.x.1.y\\u0000"),
    ),
    (event_dict("e", turn=2**31), ("out_of_range", "turn")),
    (event_dict("e", context={"trial": -(2**31) - 1}), ("out_of_range", "context.trial")),
    ({**event_dict("e"), "ts": "0001-01-01T00:30:00+01:00"}, ("out_of_range", "ts")),
    ({**event_dict("e"), "ts": "9999-12-31T20:00:00-05:00"}, ("out_of_range", "ts")),
    (
        {**event_dict("e"), "ts": (NOW + timedelta(minutes=6)).isoformat()},
        ("future_timestamp", "ts"),
    ),
    ({**event_dict("e"), "attributes": nest(MAX_JSON_DEPTH)}, ("too_deep", None)),
    # labels the store indexes: at most MAX_LABEL_CHARS (a btree entry holds ~2.7 KB)
    (event_dict("e", context={"domain": "d" * 2800}), ("invalid_value", "context.domain")),
    (event_dict("e", context={"segment": "s" * 257}), ("invalid_value", "context.segment")),
    (event_dict("e", context={"task_id": "t" * 257}), ("invalid_value", "context.task_id")),
    (event_dict("e", context={"channel": "c" * 257}), ("invalid_value", "context.channel")),
    (event_dict("e", context={"intent": "i" * 257}), ("invalid_value", "context.intent")),
    (
        {**event_dict("e"), "agent": {"id": "a", "version": "v" * 257}},
        ("invalid_value", "agent.version"),
    ),
    (
        {**event_dict("e"), "agent": {"id": "a", "model": "m" * 257}},
        ("invalid_value", "agent.model"),
    ),
    ({**event_dict("e"), "agent": {"id": "a" * 129}}, ("invalid_value", "agent.id")),
]


@pytest.mark.parametrize(("obj", "expected"), CASES)
def test_kafka_ndjson_array_and_object_agree(obj: dict[str, object], expected: tuple[str, str]):
    raw = json.dumps(obj).encode()
    with pytest.raises(InvalidEvent) as info:
        decode_event(raw, now=NOW, max_future_skew=SKEW)
    assert (info.value.reason, info.value.field) == expected
    assert "\x00" not in (info.value.field or "") + info.value.detail  # storable as is
    limits = {"max_body_bytes": 1 << 20, "max_events": 10, "now": NOW, "max_future_skew": SKEW}
    for body in (b"[" + raw + b"]", raw, json.dumps(obj, indent=2).encode(), raw + b"\n" + raw):
        verdicts = parse_events(body, **limits)  # type: ignore[arg-type]
        assert not verdicts.accepted
        assert {(r["reason"], r["field"]) for r in verdicts.results} == {expected}


def test_bounds_are_inclusive_and_in_the_detail():
    ok = {**event_dict("e", turn=2**31 - 1), "ts": "0001-01-02T00:00:00Z"}
    assert decode_event(json.dumps(ok)).turn == 2**31 - 1
    with pytest.raises(InvalidEvent) as info:
        decode_event(json.dumps(event_dict("e", turn=2**31)))
    assert "2147483647" in info.value.detail
    near = {**event_dict("e"), "ts": (NOW + timedelta(minutes=4)).isoformat()}
    assert decode_event(json.dumps(near), now=NOW, max_future_skew=SKEW).event_id == "e"
    assert decode_event(json.dumps(near)).event_id == "e"  # no clock given: no skew check


def test_pretty_single_object_and_auth_scheme():
    pretty = json.dumps(event_dict("p1"), indent=4).encode()
    verdicts = parse_events(pretty, max_body_bytes=1 << 20, max_events=10)
    assert [r["status"] for r in verdicts.results] == ["accepted"]
    shared = Authorizer({}, {"write": "tok"}, lambda: NOW)
    for header in ("Bearer tok", "bearer tok", "BEARER  tok ", " Bearer tok"):
        assert isinstance(shared.check(header, "write"), Grant), header
    for header in ("Basic tok", "Bearer", "Bearertok", "Bearer other", ""):
        assert not isinstance(shared.check(header, "write"), Grant), header


def test_printable_escapes_only_what_the_store_cannot_hold():
    assert printable("plain é ✓") == "plain é ✓"
    assert printable("a\x00b\ud800c") == "a\\u0000b\\ud800c"


class _Text(str):
    pass


def _bad_strings(obj: object) -> list[str]:
    """Reference: every string and ``str`` key reachable through dicts and lists that the store
    cannot hold (what ``check_characters`` must find)."""
    found: list[str] = []
    stack = [obj]
    while stack:
        value = stack.pop()
        if isinstance(value, dict):
            stack.extend(k for k in value if isinstance(k, str))
            stack.extend(value.values())
        elif isinstance(value, list):
            stack.extend(value)
        elif isinstance(value, str):
            try:
                value.encode("utf-8")
                if "\x00" in value:
                    found.append(value)
            except UnicodeEncodeError:
                found.append(value)
    return found


_TEXT = st.text(alphabet=st.sampled_from(["a", "é", "\x00", "\ud800", "\udc00", "😀", "\\"]))
_LEAF = _TEXT | _TEXT.map(_Text) | st.integers() | st.none() | st.booleans() | st.floats()
_VALUES = st.recursive(
    _LEAF,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(_TEXT | _TEXT.map(_Text) | st.integers(), inner, max_size=4)
        | st.tuples(inner)
    ),
    max_leaves=20,
)


@settings(max_examples=400, deadline=None)
@given(_VALUES)
def test_check_characters_fast_walk_agrees_with_the_full_walk(obj: object) -> None:
    """The path-less fast walk only lets through what the full walk accepts, and the answer
    is the same either way: raised exactly when a reachable string cannot be stored."""
    bad = _bad_strings(obj)
    if _storable(obj):
        assert not bad
    if bad:
        with pytest.raises(InvalidEvent) as info:
            check_characters(obj)
        assert info.value.reason == "invalid_character"
    else:
        check_characters(obj)
