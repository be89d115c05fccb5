"""The gate's pure core with plain values: each decision path, calibration, the event."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest

from monitor.analytics.recalibration import IsotonicMap
from monitor.contract.events import decode_event
from monitor.core.errors import GateRequestError, UnknownAgent
from monitor.gate.checks import CheckSet
from monitor.gate.decide import (
    MapEntry,
    Maps,
    decide,
    decision_event,
    lookup_map,
)
from monitor.gate.policy import DEFAULT_POLICY, GatePolicy, GateRule
from monitor.gate.request import GateRequest, parse_gate_request
from monitor.judges.base import Conversation, Verdict
from monitor.judges.domains import Domain
from tests.factories import event_dict

NOW = datetime(2026, 1, 1, 0, 5, tzinfo=UTC)


class Ticks:
    """A monotonic timer advancing ``step`` seconds per call."""

    def __init__(self, step: float = 0.0) -> None:
        self.t, self.step = 100.0, step

    def __call__(self) -> float:
        self.t += self.step
        return self.t


def request(**over: Any) -> GateRequest:
    body: dict[str, Any] = {
        "conversation_id": "c1",
        "agent": {"id": "agent-a"},
        "content": "Let me check that.",
        "confidence": 0.9,
        "domain": "retail",
        "tier": 2,
        **over,
    }
    return parse_gate_request(
        json.dumps(body).encode(), max_body_bytes=1 << 20, max_content_chars=10_000
    )


def run(
    req: GateRequest,
    policy: GatePolicy = DEFAULT_POLICY,
    maps: Maps | None = None,
    checks: CheckSet | None = None,
    step: float = 0.0,
) -> Any:
    return decide(
        req,
        policy,
        maps or {},
        checks or CheckSet(),
        event_id="gate:r1",
        now=NOW,
        timer=Ticks(step),
    )


# a failed cancel tool call, then the agent about to claim success
FAILED_CANCEL = [
    event_dict("h1", at=1, role="user", content="cancel my order", confidence=None),
    event_dict(
        "h2",
        at=2,
        content="",
        confidence=0.9,
        tool_calls=[{"id": "k1", "name": "cancel_order", "arguments": {"id": "W1"}}],
    ),
    event_dict(
        "h3",
        "c1",
        "tool_result",
        at=3,
        call_id="k1",
        name="cancel_order",
        ok=False,
        error="order W1 is already delivered",
    ),
]


def test_proceed_when_confident_and_no_check_fires() -> None:
    d = run(request())
    a = d.answer()
    assert a["decision"] == "proceed" and a["findings"] == [] and a["degraded"] is None
    assert a["calibrated"] is False and a["calibrated_confidence"] == 0.9
    assert a["threshold"] == 0.5 and a["threshold_source"] == "policy built-in rules[0]"
    assert a["policy_version"] == "built-in-1" and a["decision_id"] == "gate:r1"


def test_below_threshold_escalates_by_default_and_revises_when_configured() -> None:
    assert run(request(confidence=0.3)).payload.decision == "escalate"
    policy = GatePolicy(version="p", rules=(GateRule(threshold=0.5, below_threshold="revise"),))
    assert run(request(confidence=0.3), policy).payload.decision == "revise"
    assert run(request(confidence=0.5), policy).payload.decision == "proceed"  # not below


def test_the_isotonic_map_decides_not_the_stated_confidence() -> None:
    # an over-confident agent: 0.9 stated is right 40 % of the time
    shrink = MapEntry(IsotonicMap((0.0, 0.9, 1.0), (0.0, 0.4, 0.5)), version=3)
    d = run(request(confidence=0.9), maps={("agent-a", "retail"): shrink})
    assert d.payload.calibrated == pytest.approx(0.4)
    assert d.payload.map_version == 3 and d.answer()["calibrated"] is True
    assert d.payload.decision == "escalate"
    # the agent's all-domains map serves a domain without its own map
    assert lookup_map({("agent-a", ""): shrink}, "agent-a", "airline") is shrink
    assert lookup_map({("agent-a", "retail"): shrink}, "agent-b", "retail") is None


def test_claiming_success_after_a_failed_tool_call_is_a_finding_with_a_critique() -> None:
    req = request(history=FAILED_CANCEL, content="Your order W1 has been cancelled.")
    d = run(req)
    assert d.payload.decision == "revise"  # on_check_failure default; confidence 0.9 passes
    judges = {f.judge: f for f in d.payload.findings}
    assert set(judges) == {"det.authorization", "det.ignored_error"}
    assert judges["det.authorization"].category == "fabrication:authorization"
    assert "cancel" in judges["det.authorization"].critique
    assert judges["det.ignored_error"].critique == "speaks of success after a failed tool call"
    # the same content acknowledging the failure passes every check
    ok = run(
        request(
            history=FAILED_CANCEL, content="Sorry, I could not cancel W1: it was already delivered."
        )
    )
    assert ok.payload.findings == [] and ok.payload.decision == "proceed"


def test_check_failure_can_escalate_and_checks_can_be_switched_off() -> None:
    req = request(history=FAILED_CANCEL, content="Your order W1 has been cancelled.")
    strict = GatePolicy(version="p", rules=(GateRule(threshold=0.5, on_check_failure="escalate"),))
    assert run(req, strict).payload.decision == "escalate"
    only_repeat = GatePolicy(
        version="p", rules=(GateRule(threshold=0.5, checks=("det.repeated_call",)),)
    )
    assert run(req, only_repeat).payload.findings == []


def test_unknown_agent_when_no_rule_covers_it() -> None:
    policy = GatePolicy(
        version="p",
        rules=(
            GateRule(agent="agent-b", threshold=0.5),
            GateRule(agent="*", domain="airline", threshold=0.7),
        ),
    )
    with pytest.raises(UnknownAgent, match="agent-a"):
        run(request(), policy)
    assert run(request(domain="airline"), policy).payload.threshold == 0.7
    assert run(request(domain="airline"), policy).rule_index == 1


def test_past_the_deadline_the_fail_mode_decides() -> None:
    req = request(confidence=0.1)  # would escalate
    open_ = GatePolicy(version="p", rules=(GateRule(threshold=0.5, deadline_ms=5),))
    d = run(req, open_, step=0.01)  # every timer call advances 10 ms
    assert d.payload.decision == "proceed"
    assert d.payload.degraded is not None and d.payload.degraded.startswith(
        "fail open: checks took"
    )
    closed = GatePolicy(version="p", rules=(GateRule(threshold=0.5, deadline_ms=5, fail="closed"),))
    assert run(request(confidence=0.99), closed, step=0.01).payload.decision == "escalate"
    assert run(request(confidence=0.99), closed).payload.decision == "proceed"  # in time


class Broken:
    name, version, applies_to = "acme.broken", "1", "all"

    def judge(self, conversation: Conversation) -> list[Verdict]:
        return [
            Verdict(
                judge=self.name,
                judge_version="1",
                conversation_id="c1",
                item_id=None,
                status="error",
                error="index missing",
            )
        ]


class NoRefundWord:
    name, version, applies_to = "acme.no_refund", "1", "all"

    def judge(self, conversation: Conversation) -> list[Verdict]:
        last = conversation.events[-1]
        bad = "refund" in (last.message.content or "") if last.message else False
        return [
            Verdict(
                judge=self.name,
                judge_version="1",
                conversation_id="c1",
                item_id=last.event_id,
                label=0 if bad else 1,
                categories=("policy_violation",),
                rationale="never promise a refund",
            )
        ]


def test_domain_plugins_run_inline_and_a_broken_check_fails_closed() -> None:
    checks = CheckSet({"retail": Domain("retail", (), (NoRefundWord(),))})
    d = run(request(content="You will get a refund."), checks=checks)
    assert [(f.judge, f.category, f.critique) for f in d.payload.findings] == [
        ("acme.no_refund", "policy_violation", "never promise a refund")
    ]
    assert d.payload.decision == "revise"
    closed = GatePolicy(version="p", rules=(GateRule(threshold=0.5, fail="closed"),))
    broken = CheckSet({"retail": Domain("retail", (), (Broken(),))})
    d = run(request(), closed, checks=broken)
    assert d.payload.decision == "escalate"
    assert d.payload.degraded == "fail closed: check error (acme.broken: index missing)"


def test_the_decision_event_round_trips_through_the_contract() -> None:
    req = request(
        history=FAILED_CANCEL, content="Your order W1 has been cancelled.", confidence=0.2
    )
    d = run(req)
    ev = decision_event(req, d, NOW)
    back = decode_event(ev.to_json())
    assert back.type == "gate" and back.gate is not None and back.event_id == "gate:r1"
    assert back.gate.decision == "escalate" and len(back.gate.findings) == 2
    assert back.conversation_id == "c1" and back.confidence is None  # not a calibration item


@pytest.mark.parametrize(
    ("body", "status", "reason", "needle"),
    [
        (b"{not json", 400, "not_json", "not JSON"),
        (b"[1, 2]", 400, "not_json", "JSON object"),
        (
            b'{"conversation_id": "c1", "agent": {"id": "a"}, "content": "x"}',
            400,
            "invalid_field",
            "confidence",
        ),
        (
            b'{"conversation_id": "c1", "agent": {"id": "a"}, "content": "x", "confidence": 2}',
            400,
            "invalid_field",
            "confidence",
        ),
        (
            b'{"conversation_id": "c1", "agent": {"id": "a"}, "content": "'
            + b"x" * 101
            + b'", "confidence": 0.5}',
            413,
            "too_large",
            "101 characters",
        ),
        (
            b'{"conversation_id": "c1", "agent": {"id": "a"}, "content": "x", "confidence": 0.5,'
            b' "history": [{"schema": "agent-event/v1"}]}',
            400,
            "invalid_history",
            "history[0]",
        ),
    ],
)
def test_bad_requests_get_a_status_and_a_reason(
    body: bytes, status: int, reason: str, needle: str
) -> None:
    with pytest.raises(GateRequestError) as info:
        parse_gate_request(body, max_body_bytes=1 << 20, max_content_chars=100)
    assert (info.value.status, info.value.reason) == (status, reason)
    assert needle in info.value.detail


def test_a_nul_anywhere_is_refused_before_it_reaches_the_store() -> None:
    body = json.dumps(
        {
            "conversation_id": "c1",
            "agent": {"id": "a"},
            "confidence": 0.5,
            "content": "ok",
            "history": [event_dict("h1", content="a\u0000b")],
        }
    )
    with pytest.raises(GateRequestError) as info:
        parse_gate_request(body.encode(), max_body_bytes=1 << 20, max_content_chars=100)
    assert (info.value.status, info.value.reason) == (400, "invalid_character")
    assert info.value.detail.startswith("history.0.message.content: contains U+0000")


def test_a_shadow_rule_records_its_decision_and_answers_proceed() -> None:
    shadow = GatePolicy(version="p", rules=(GateRule(threshold=0.5, mode="shadow"),))
    low = run(request(confidence=0.3), shadow)
    assert low.payload.decision == "escalate" and low.payload.enforced is False
    answer = low.answer()
    assert answer["decision"] == "proceed" and answer["enforced"] is False
    assert answer["shadow_decision"] == "escalate"
    event = decision_event(request(confidence=0.3), low, NOW)
    assert event.gate is not None and event.gate.enforced is False
    assert decode_event(event.to_json()).gate.enforced is False  # type: ignore[union-attr]
    # a finding in shadow: recorded as revise, answered proceed
    req = request(history=FAILED_CANCEL, content="Your order W1 has been cancelled.")
    revised = run(req, shadow)
    assert (revised.payload.decision, revised.answer()["shadow_decision"]) == ("revise", "revise")
    assert revised.answer()["decision"] == "proceed"
    # enforce (the default) answers the decision itself and records it as enforced
    enforced = run(request(confidence=0.3))
    assert GateRule(threshold=0.5).mode == "enforce"
    assert enforced.payload.enforced is True and enforced.answer()["decision"] == "escalate"
    assert enforced.answer()["enforced"] is True and "shadow_decision" not in enforced.answer()
    # a shadow rule past its deadline: the fail choice is recorded, proceed is answered
    closed = GatePolicy(
        version="p", rules=(GateRule(threshold=0.5, mode="shadow", fail="closed", deadline_ms=1),)
    )
    late = run(request(), closed, step=0.01)
    assert late.payload.decision == "escalate" and late.payload.degraded
    assert late.answer()["decision"] == "proceed"


def test_an_event_recorded_before_shadow_mode_reads_as_enforced() -> None:
    old = event_dict("gate:old", "c1", "gate")
    assert "enforced" not in old["gate"]
    assert decode_event(json.dumps(old).encode()).gate.enforced is True  # type: ignore[union-attr]
