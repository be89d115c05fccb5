"""The endpoint's pure part: who may ask, and every refusal with its status and reason."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest

from monitor.gate.checks import CheckSet
from monitor.gate.decide import Maps
from monitor.gate.endpoint import GateLimits, GateReply, authorize, handle_gate, is_loopback
from monitor.gate.policy import DEFAULT_POLICY, GatePolicy, GateRule

NOW = datetime(2026, 1, 1, tzinfo=UTC)
BODY = json.dumps({"conversation_id": "c1", "agent": {"id": "a"}, "content": "hi",
                   "confidence": 0.8}).encode()  # fmt: skip


@pytest.mark.parametrize(
    ("peer", "loopback"),
    [("127.0.0.1", True), ("127.8.0.3", True), ("::1", True), ("::ffff:127.0.0.1", True),
     ("10.0.0.7", False), ("172.18.0.1", False), (None, False), ("", False)],
)  # fmt: skip
def test_loopback(peer: str | None, loopback: bool) -> None:
    assert is_loopback(peer) is loopback


def test_without_a_token_only_loopback_callers_may_ask() -> None:
    assert authorize(None, "127.0.0.1", None) is None
    denied = authorize("Bearer anything", "10.0.0.7", None)
    assert denied is not None and (denied.status, denied.body["reason"]) == (403, "not_loopback")
    with_token = authorize(None, "127.0.0.1", "t0k")  # a token is required, even on loopback
    assert with_token is not None and with_token.status == 401
    assert authorize("bearer t0k", "10.0.0.7", "t0k") is None


def call(body: bytes | None, policy: GatePolicy = DEFAULT_POLICY, maps: Any = None,
         checks: Any = None, token: str | None = None) -> GateReply:  # fmt: skip
    return handle_gate(
        body, authorization=None, peer="127.0.0.1", limits=GateLimits(token, 4096, 100),
        policy=policy, maps=maps if maps is not None else {}, checks=checks or CheckSet(),
        now=NOW, timer=lambda: 1.0, started=1.0, new_id=lambda: "x1",
    )  # fmt: skip


def test_a_decision_carries_its_event() -> None:
    reply = call(BODY)
    assert reply.status == 200 and reply.body["decision"] == "proceed"
    assert reply.event is not None and reply.event.event_id == "gate:x1"
    assert reply.event.type == "gate" and reply.body["latency_ms"] == 0.0


def test_refusals() -> None:
    assert call(None).status == 413 and call(None).event is None
    assert call(None, token="t").status == 401  # auth first: no size hint to strangers
    assert call(b"[]").body["reason"] == "not_json"
    unknown = GatePolicy(version="v", rules=(GateRule(agent="b", threshold=0.5),))
    reply = call(BODY, unknown)
    assert (reply.status, reply.body["reason"]) == (404, "unknown_agent")


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
