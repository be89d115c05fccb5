"""The endpoint's pure part: who may ask, and every refusal with its status and reason."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest

from monitor.auth.authorizer import Denied, Grant
from monitor.gate.checks import CheckSet
from monitor.gate.decide import Maps
from monitor.gate.endpoint import (
    GateLimits,
    GateReply,
    decide_gate,
    degraded_kinds,
    gate_rule,
    is_loopback,
)
from monitor.gate.policy import DEFAULT_POLICY, GatePolicy, GateRule

NOW = datetime(2026, 1, 1, tzinfo=UTC)
BODY = json.dumps(
    {"conversation_id": "c1", "agent": {"id": "a"}, "content": "hi", "confidence": 0.8}
).encode()


@pytest.mark.parametrize(
    ("peer", "loopback"),
    [
        ("127.0.0.1", True),
        ("127.8.0.3", True),
        ("::1", True),
        ("::ffff:127.0.0.1", True),
        ("10.0.0.7", False),
        ("172.18.0.1", False),
        (None, False),
        ("", False),
    ],
)
def test_loopback(peer: str | None, loopback: bool) -> None:
    assert is_loopback(peer) is loopback


UNAUTHORIZED = Denied(401, "unauthorized", "missing or wrong bearer token")


def test_without_a_token_only_loopback_callers_may_ask() -> None:
    assert isinstance(gate_rule(UNAUTHORIZED, "127.0.0.1", True), Grant)
    denied = gate_rule(UNAUTHORIZED, "10.0.0.7", True)
    assert isinstance(denied, Denied) and (denied.status, denied.reason) == (403, "not_loopback")
    # a token is set: it (or a key) is required, even on loopback
    assert gate_rule(UNAUTHORIZED, "127.0.0.1", False) is UNAUTHORIZED
    granted = Grant("key_a", ("a",))  # a key's grant and a known key's 403 stand as they are
    assert gate_rule(granted, "10.0.0.7", False) is granted
    missing = Denied(403, "missing_scope", "key_w lacks the 'gate' scope", "key_w")
    assert gate_rule(missing, "127.0.0.1", True) is missing


def call(
    body: bytes | None,
    policy: GatePolicy = DEFAULT_POLICY,
    maps: Any = None,
    checks: Any = None,
    grant: Grant | None = None,
) -> GateReply:
    return decide_gate(
        body,
        limits=GateLimits(4096, 100),
        policy=policy,
        maps=maps if maps is not None else {},
        checks=checks or CheckSet(),
        now=NOW,
        timer=lambda: 1.0,
        started=1.0,
        new_id=lambda: "x1",
        grant=grant,
    )


def test_a_decision_carries_its_event() -> None:
    reply = call(BODY)
    assert reply.status == 200 and reply.body["decision"] == "proceed"
    assert reply.event is not None and reply.event.event_id == "gate:x1"
    assert reply.event.type == "gate" and reply.body["latency_ms"] == 0.0


def test_refusals() -> None:
    assert call(None).status == 413 and call(None).event is None
    assert call(b"[]").body["reason"] == "not_json"
    unknown = GatePolicy(version="v", rules=(GateRule(agent="b", threshold=0.5),))
    reply = call(BODY, unknown)
    assert (reply.status, reply.body["reason"]) == (404, "unknown_agent")
    # a key's grant covers its agents only (auth first, with no size hint to strangers: see
    # tests/core/test_http_admission.py)
    reply = call(BODY, grant=Grant("key_b", ("b",)))
    assert (reply.status, reply.body["reason"], reply.event) == (403, "out_of_scope", None)
    assert call(BODY, grant=Grant("key_a", ("a",))).status == 200


class ExplodingMaps(dict[Any, Any]):
    def get(self, *args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("map store corrupted")


def test_an_unexpected_failure_answers_with_the_fail_mode_never_a_500() -> None:
    broken: Maps = ExplodingMaps()
    opened = call(BODY, maps=broken)
    assert (opened.status, opened.body["decision"]) == (200, "proceed")
    assert opened.body["degraded"] == "fail open: gate error (RuntimeError: map store corrupted)"
    assert opened.event is None
    closed = GatePolicy(version="v", rules=(GateRule(threshold=0.5, fail="closed"),))
    assert call(BODY, closed, maps=broken).body["decision"] == "escalate"


def test_a_shadow_rule_answers_proceed_on_an_internal_error_too() -> None:
    broken: Maps = ExplodingMaps()
    rule = GateRule(threshold=0.5, fail="closed", mode="shadow")
    shadow = GatePolicy(version="v", rules=(rule,))
    reply = call(BODY, shadow, maps=broken)
    assert (reply.status, reply.body["decision"]) == (200, "proceed")
    assert reply.body["shadow_decision"] == "escalate" and reply.body["enforced"] is False
    assert reply.event is None


def test_degraded_answers_are_classified_for_the_metrics() -> None:
    slow = GatePolicy(
        version="v", rules=(GateRule(agent="x", threshold=0.5), GateRule(threshold=0.5))
    )
    ordinary = call(BODY, slow)
    assert ordinary.rule == 1 and ordinary.agent_id == "a" and ordinary.degraded_kinds() == []
    assert call(BODY, maps=ExplodingMaps()).degraded_kinds() == ["fail_open"]
    closed = GatePolicy(version="v", rules=(GateRule(threshold=0.5, fail="closed"),))
    failed = call(BODY, closed, maps=ExplodingMaps())
    assert (failed.rule, failed.agent_id, failed.degraded_kinds()) == (0, "a", ["fail_closed"])
    late = {"degraded": "fail open: checks took 61.2 ms, deadline 50 ms", "maps_stale": "x"}
    assert degraded_kinds(late) == ["fail_open", "deadline", "maps_stale"]
    assert degraded_kinds({"degraded": "llm timeout after 1501 ms: on_llm_timeout skip"}) == [
        "llm_timeout"
    ]
    assert degraded_kinds({"degraded": "llm error http_503: on_llm_timeout escalate"}) == [
        "llm_error"
    ]
    assert call(b"[]").degraded_kinds() == []  # a refusal has no rule
