"""The gated simulated agents (monitor/sim/gated.py): their truth is what they do.

``gate_truth`` (exact sums over the discrete confidence grid) against many simulated
conversations decided by the shipped gate (``monitor.gate.decide``, built-in policy) and
measured by the shipped ``monitor.gate.effect``; the drafts are caught by the checks exactly
when they fabricate."""

from __future__ import annotations

import math
from collections import Counter
from datetime import UTC, datetime

from monitor.gate.effect import GatedConversation, effectiveness
from monitor.sim.gated import GatedAgentSpec, GatedTraffic, gate_truth, gated_agents
from tests.dashboards.seed_gate import gated_events

START = datetime(2026, 3, 1, tzinfo=UTC)


def within(measured: float, truth: float, n: int, sigmas: float = 4.5) -> bool:
    return abs(measured - truth) <= sigmas * math.sqrt(truth * (1 - truth) / n) + 1e-12


def test_truth_by_hand_for_one_simple_agent() -> None:
    # c in {0.4, 0.6}; fabricates half the time; obeys
    spec = GatedAgentSpec(
        "a",
        "retail",
        1,
        obeys=True,
        percent_range=(40, 40),
        fabrication_rate=0.5,
        fabricated_success=0.5,
        human_success=0.8,
    )
    t = gate_truth(spec)
    assert t.decisions == {"proceed": 0.0, "revise": 0.0, "escalate": 1.0}
    assert math.isclose(t.failure_rate_all, 0.2) and t.failure_rate_proceeded is None
    assert t.failures_prevented == 1.0  # every failure is in an escalated conversation
    # ungated: honest fails 0.6, fabricated fails 1 - 0.5 * 0.4 = 0.8
    assert math.isclose(t.ungated_failure_rate, 0.5 * 0.6 + 0.5 * 0.8)
    ignores = GatedAgentSpec(
        "b",
        "retail",
        1,
        obeys=False,
        percent_range=(60, 60),
        fabrication_rate=0.5,
        fabricated_success=0.5,
    )
    t = gate_truth(ignores)
    assert t.decisions == {"proceed": 0.5, "revise": 0.5, "escalate": 0.0}
    assert math.isclose(t.failure_rate_proceeded, 0.4)  # honest at 0.6
    # failures: honest 0.5 * 0.4 = 0.2 (proceeded), fabricated 0.5 * 0.7 = 0.35 (revised)
    assert math.isclose(t.failure_rate_all, 0.55)
    assert math.isclose(t.failures_prevented, 0.35 / 0.55)


def test_simulated_conversations_match_the_truth() -> None:
    n = 3000
    events, decisions = gated_events(START, n, seed=11)
    drafts = GatedTraffic(11, START, prefix="gated-")
    outcome = {e.conversation_id: e for e in events if e.outcome is not None}
    rows, expected_mismatch = [], Counter()
    for k in range(n):
        d = drafts.draft(k)
        got = decisions[d.conversation_id]
        if k % 10 != 9:  # every 10th is decided past its deadline: fail open (seed_gate)
            assert got == d.spec.expected_decision(d.confidence, d.fabricated), k
        else:
            expected_mismatch[got] += 1
        o = outcome[d.conversation_id]
        assert o.attributes is not None and o.attributes["gate_decision"] == got
        rows.append(
            GatedConversation(
                d.spec.agent_id, d.spec.domain, got, o.outcome.success if o.outcome else None
            )
        )
    assert expected_mismatch == {"proceed": n // 10}  # fail open always proceeds
    fast = [r for k, r in enumerate(rows) if k % 10 != 9]
    specs = {s.agent_id: s for s in gated_agents()}
    effects = effectiveness(fast)
    assert {e.agent_id for e in effects} == set(specs)
    for e in effects:
        t = gate_truth(specs[e.agent_id])
        m = e.conversations
        assert m > 700
        for kind in ("proceed", "revise", "escalate"):
            assert within(e.decisions[kind] / m, t.decisions[kind], m), (e.agent_id, kind)
        assert within(e.escalation_rate.value or 0, t.escalation_rate, m)
        assert within(e.failure_rate_all.value or 0, t.failure_rate_all, m), e.agent_id
        assert t.failure_rate_proceeded is not None and t.failures_prevented is not None
        assert within(
            e.failure_rate_proceeded.value or 0,
            t.failure_rate_proceeded,
            e.failure_rate_proceeded.n,
        )
        assert within(
            e.failures_prevented.value or 0, t.failures_prevented, e.failures_prevented.n
        ), e.agent_id
        if specs[e.agent_id].obeys:  # the gate helps the agents that obey it
            assert (e.failure_rate_all.high or 1) < t.ungated_failure_rate
        else:  # the agent that ignores it fails as often as without the gate
            assert within(e.failure_rate_all.value or 0, t.ungated_failure_rate, m)
