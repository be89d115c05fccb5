"""The gate's inline ``domain`` check runs the domain's policy rules on the proposed tool call:
a real tau2 airline conversation about to cancel a reservation the policy does not allow to be
cancelled gets ``revise`` with the clause and the evidence in the critique; the same history
proposing an allowed call proceeds."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.policy_recall import load
from monitor.contract.events import Agent
from monitor.gate.checks import CheckSet
from monitor.gate.decide import decide
from monitor.gate.policy import GatePolicy, GateRule
from monitor.gate.request import GateRequest
from monitor.judges import airline

ROOT = Path(__file__).resolve().parents[2]
CID = "tau2:251f444a-b9ae-44c5-b7b7-b2d6e3430185"  # cancels a basic economy booking of May 1
NOW = datetime(2026, 1, 1, tzinfo=UTC)
POLICY = GatePolicy(
    version="t", rules=(GateRule(threshold=0.1, checks=("domain",), deadline_ms=50.0),)
)


def ticks() -> Any:
    t = [0.0]

    def timer() -> float:
        t[0] += 0.0001
        return t[0]

    return timer


def proposal(upto: int, **call_args: Any) -> GateRequest:
    events = load([ROOT / "tests/data/tau2/airline_gemini2_5_flash_10tasks_2t_retry_agent.json"])[
        CID
    ]
    message = next(e for e in events if e.event_id == f"{CID}:{upto}")
    assert message.message is not None
    call = message.message.tool_calls[0]
    call = call.model_copy(update={"arguments": {**call.arguments, **call_args}})
    return GateRequest(
        conversation_id=CID,
        agent=Agent(id="gemini"),
        content="",
        confidence=0.9,
        tool_calls=[call],
        domain="airline",
        history=[e for e in events[: events.index(message)] if e.outcome is None],
    )


def test_domain_check_stops_an_ineligible_cancellation_with_the_clause() -> None:
    checks = CheckSet({"airline": airline.domain()})
    req = proposal(12)
    assert req.tool_calls[0].name == "cancel_reservation"
    d = decide(req, POLICY, {}, checks, event_id="gate:1", now=NOW, timer=ticks())
    assert d.payload.decision == "revise" and d.payload.degraded is None
    (finding,) = [f for f in d.payload.findings if f.judge == "policy.airline.cancel.eligibility"]
    assert finding.category == "policy_violation"
    assert finding.critique.startswith("cancel_reservation: booked 2024-05-01T05:17:41")
    assert "no insurance" in finding.critique and "(policy:" in finding.critique


def test_domain_check_lets_a_compliant_call_through() -> None:
    checks = CheckSet({"airline": airline.domain()})
    # the same history, proposing to read the reservation again: no rule guards it
    req = proposal(12)
    read = req.tool_calls[0].model_copy(update={"name": "get_reservation_details"})
    req = req.model_copy(update={"tool_calls": [read]})
    d = decide(req, POLICY, {}, checks, event_id="gate:2", now=NOW, timer=ticks())
    assert d.payload.decision == "proceed" and d.payload.findings == []
