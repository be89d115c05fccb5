"""Thresholds from the advisor: the grouped cut equals the advisor's, the policy shape, and
the cuts computed from a real Postgres at refresh and used by the decision."""

from __future__ import annotations

import json
import uuid
from datetime import timedelta
from typing import Any

import numpy as np
import pytest

from monitor.analytics.advisor import advise
from monitor.analytics.escalation import ConversationEscalation
from monitor.analytics.recalibration import IsotonicMap, RecalibrationResult
from monitor.analytics.write import save_map
from monitor.contract.events import validate_event
from monitor.core.errors import ConfigError
from monitor.gate.advised import AdvisorCuts, cut
from monitor.gate.checks import CheckSet
from monitor.gate.decide import MapEntry, decide
from monitor.gate.effect_repo import gated_conversations
from monitor.gate.policy import AdvisorSpec, load_policy
from monitor.gate.request import parse_gate_request
from monitor.gate.state import MAP_CHECK_IDLE_S, GateState
from monitor.ingest.rows import event_row
from monitor.ingest.writer import EventWriter
from monitor.store.engine import make_engine
from tests.factories import T0, event_dict

NOW = T0 + timedelta(days=1)


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize(
    "question",
    [
        {"keep": 0.8},
        {"budget": 0.35},
        {"target": 0.1},
        {"target": 0.15, "budget": 0.3},
        {"keep": 0.0},
        {"target": 0.0},
    ],
)
def test_the_grouped_cut_is_the_advisors_cut(seed: int, question: dict[str, float]) -> None:
    rng = np.random.default_rng(seed)
    n = int(rng.integers(5, 300))
    conf = np.round(rng.uniform(0, 1, n), int(rng.integers(1, 3)))  # many ties
    weight = rng.choice([1.0, 2.0, 0.5], n)
    outcome = rng.choice([True, False, None], n, p=[0.6, 0.25, 0.15])
    convs = [
        ConversationEscalation(float(c), False, o, float(w))
        for c, w, o in zip(conf, weight, outcome, strict=True)
    ]
    want = advise(convs, **question).threshold
    # grouped per distinct confidence, as the gate reads them from the store
    uniq = np.unique(conf)
    has = np.array([o is not None for o in outcome])
    bad = np.array([o is False for o in outcome])
    rows = [
        [weight[conf == u].sum(), weight[(conf == u) & has].sum(), weight[(conf == u) & bad].sum()]
        for u in uniq
    ]
    sums = np.array(rows)
    got, _ = cut(uniq, sums[:, 0], sums[:, 1], sums[:, 2], AdvisorSpec(**question))
    assert got == want


POLICY = """\
version: adv-1
advisor_refresh_s: 60
rules:
  - agent: {a}
    threshold:
      advisor: {{keep: 0.8, window_days: 3, min_conversations: 5}}
      fallback: 0.45
  - agent: {b}
    threshold:
      advisor: {{target: 0.1, min_conversations: 5}}
      fallback: 0.55
  - threshold: 0.5
"""


def test_the_advisor_shape_loads_and_its_errors_name_file_line_field() -> None:
    p = load_policy(POLICY.format(a="a", b="b"), "gate.yaml")
    first, second, third = p.rules
    assert first.advisor is not None and first.advisor.keep == 0.8
    assert first.advisor.window_days == 3 and first.fixed_threshold == 0.45
    assert second.advisor is not None and second.advisor.question() == "target=0.1 over 7d"
    assert third.advisor is None and third.fixed_threshold == 0.5
    assert p.advisor_refresh_s == 60
    bad = {
        "keep: 0.8,": (
            "keep: 1.8,",
            "gate.yaml:6: rules[0].threshold.advisor.keep: Input should be less than or equal to 1",
        ),
        "fallback: 0.45": (
            "fallback: x",
            "gate.yaml:7: rules[0].threshold.fallback: Input should be a valid number",
        ),
        "{target: 0.1,": (
            "{target: 0.1, keep: 0.5, budget: 0.1,",
            "gate.yaml:10: rules[1].threshold.advisor: keep and budget are two ways",
        ),
        "window_days: 3": (
            "windw_days: 3",
            "gate.yaml:6: rules[0].threshold.advisor.windw_days: Extra inputs are not permitted",
        ),
        "      fallback: 0.55\n": ("", "gate.yaml:9: rules[1].threshold.fallback: Field required"),
    }
    for old, (new, message) in bad.items():
        with pytest.raises(ConfigError) as info:
            load_policy(POLICY.format(a="a", b="b").replace(old, new), "gate.yaml")
        assert str(info.value).startswith(message), (old, str(info.value))
    with pytest.raises(ConfigError, match=r"gate.yaml:3: rules\[0\].threshold.advisor: give"):
        load_policy(
            "version: x\nrules:\n  - threshold: {advisor: {window_days: 2}, fallback: 0.3}\n",
            "gate.yaml",
        )


async def _seed(url: str, convs: list[tuple[str, float, bool | None, float]]) -> None:
    """(agent, min confidence, outcome, hours before NOW) -> one conversation each."""
    events = []
    for i, (agent, conf, ok, hours_ago) in enumerate(convs):
        at = (NOW - T0).total_seconds() - hours_ago * 3600
        cid = f"{agent}-c{i}"
        events.append(
            event_dict(f"{cid}-m", cid, "message", at=at, agent=agent, confidence=conf, turn=0)
        )
        if ok is not None:
            events.append(
                event_dict(f"{cid}-o", cid, "outcome", at=at + 1, agent=agent, success=ok)
            )
    w = EventWriter(url)
    try:
        await w.write([event_row(validate_event(e)) for e in events])
    finally:
        await w.close()


def _ask(state: GateState, agent: str, confidence: float) -> dict[str, Any]:
    body = {
        "conversation_id": "q",
        "agent": {"id": agent},
        "content": "Hello.",
        "confidence": confidence,
        "domain": "retail",
    }
    req = parse_gate_request(
        json.dumps(body).encode(), max_body_bytes=1 << 20, max_content_chars=1000
    )
    return decide(
        req,
        state.policy,
        state.maps,
        state.checks,
        event_id="gate:x",
        now=NOW,
        timer=lambda: 0.0,
        cuts=state.cuts,
    ).answer()


async def test_cuts_from_the_store_drive_the_threshold(database_url: str) -> None:
    tag = uuid.uuid4().hex[:6]
    a, b, few = f"adv-a-{tag}", f"adv-b-{tag}", f"adv-few-{tag}"
    confs = [round(0.1 * k, 1) for k in range(1, 11)]  # 0.1 .. 1.0
    fails = {0.1, 0.2, 0.5}
    convs = [(a, c, None, 1.0) for c in confs]
    convs += [(a, 0.05, False, 24 * 4)]  # outside agent a's 3-day window: not counted
    convs += [(b, c, c not in fails, 2.0) for c in confs]
    convs += [(few, c, True, 1.0) for c in (0.2, 0.4, 0.9)]
    await _seed(database_url, convs)
    policy = load_policy(
        POLICY.format(a=a, b=b).replace(
            "- threshold: 0.5",
            f"""- agent: {few}
    threshold: {{advisor: {{budget: 0.5, min_conversations: 5}}, fallback: 0.35}}""",
        ),
        "g.yaml",
    )
    state = GateState(policy, CheckSet())
    engine = make_engine(database_url)
    try:
        assert _ask(state, a, 0.9)["threshold_source"] == (
            "policy fallback (advisor: not computed yet)"
        )
        assert await state.refresh(engine, NOW)
    finally:
        await engine.dispose()
    at = NOW.isoformat(timespec="seconds")
    # keep 0.8 of 10: escalate at most 2 -> the largest cut escalating <= 20 %: 0.3
    got = _ask(state, a, 0.25)
    assert got["threshold"] == pytest.approx(0.3) and got["decision"] == "escalate"
    assert got["threshold_source"] == f"advisor keep=0.8 over 3d (n=10) at {at}"
    assert _ask(state, a, 0.3)["decision"] == "proceed"  # ties at the cut are kept
    # target 0.1: residual among kept with failures at 0.1, 0.2, 0.5: first <= 0.1 at t=0.6
    # (t=0.3: 1/8, t=0.4: 1/7, t=0.5: 1/6, t=0.6: 0/5)
    got = _ask(state, b, 0.55)
    assert got["threshold"] == pytest.approx(0.6) and got["decision"] == "escalate"
    assert got["threshold_source"] == f"advisor target=0.1 over 7d (n=10) at {at}"
    got = _ask(state, few, 0.3)
    assert got["threshold"] == 0.35 and got["decision"] == "escalate"
    assert got["threshold_source"] == "policy fallback (advisor: not enough data: n=3)"
    assert state.cuts.at == NOW


async def test_the_cut_is_on_calibrated_confidences_and_follows_a_new_map(
    database_url: str,
) -> None:
    tag = uuid.uuid4().hex[:6]
    a = f"adv-m-{tag}"
    await _seed(database_url, [(a, round(0.1 * k, 1), True, 1.0) for k in range(1, 11)])
    policy = load_policy(
        f"""version: m
rules:
  - agent: {a}
    threshold: {{advisor: {{keep: 0.8, min_conversations: 5}}, fallback: 0.5}}
""",
        "g.yaml",
    )
    state = GateState(policy, CheckSet())
    engine = make_engine(database_url)
    try:
        assert await state.refresh(engine, NOW)
        assert state.cuts.cuts[(0, a, "retail")].threshold == pytest.approx(0.3)
        # a map halving every confidence: the cut moves to map(0.3) = 0.15
        half = IsotonicMap((0.0, 1.0), (0.0, 0.5))
        fitted = RecalibrationResult(half, 8, 2, 0.1, 0.05, 0.2, 0.1, 0, 0.3, 10)
        await save_map(engine, a, "retail", fitted, T0, NOW)
        later = NOW + timedelta(seconds=5)  # well within advisor_refresh_s: the map triggers it
        # nobody asked the gate yet, or not for MAP_CHECK_IDLE_S: the check does not run
        assert await state.check_new_map(engine, later, at=100.0) is False
        state.asked(100.0)
        assert await state.check_new_map(engine, later, at=100.0 + MAP_CHECK_IDLE_S) is False
        assert state.maps.get((a, "retail")) is None  # still the old (no) map
        assert await state.check_new_map(engine, later, at=101.0) is True  # in use: refreshed
        assert await state.check_new_map(engine, later, at=101.5) is False  # nothing new since
    finally:
        await engine.dispose()
    assert state.maps[(a, "retail")].version == 1
    cut_ = state.cuts.cuts[(0, a, "retail")]
    assert cut_.threshold == pytest.approx(0.15) and cut_.at == later
    got = _ask(state, a, 0.4)  # calibrated 0.2 >= 0.15
    assert got["calibrated_confidence"] == pytest.approx(0.2) and got["decision"] == "proceed"
    assert _ask(state, a, 0.28)["decision"] == "escalate"  # calibrated 0.14 < 0.15


def test_without_cuts_an_advisor_rule_uses_its_fallback() -> None:
    policy = load_policy(
        "version: f\nrules:\n  - threshold: {advisor: {keep: 0.9}, fallback: 0.7}\n", "g.yaml"
    )
    state = GateState(policy, CheckSet(), {("x", ""): MapEntry(IsotonicMap.identity(), 1)})
    assert state.cuts == AdvisorCuts()
    got = _ask(state, "x", 0.65)
    assert got["threshold"] == 0.7 and got["decision"] == "escalate"
    assert got["threshold_source"] == "policy fallback (advisor: not computed yet)"


async def test_replayed_decisions_use_the_advisors_cut(database_url: str) -> None:
    tag = uuid.uuid4().hex[:6]
    a, few = f"adv-r-{tag}", f"adv-rf-{tag}"
    convs = [(a, round(0.1 * k, 1), k != 2, 1.0) for k in range(1, 11)]
    convs += [(few, c, True, 1.0) for c in (0.2, 0.5)]
    await _seed(database_url, convs)
    policy = load_policy(
        f"""version: r
rules:
  - agent: {a}
    threshold: {{advisor: {{keep: 0.8, min_conversations: 5}}, fallback: 0.9}}
  - agent: {few}
    threshold: {{advisor: {{keep: 0.8, min_conversations: 5}}, fallback: 0.4}}
""",
        "g.yaml",
    )
    engine = make_engine(database_url)
    try:
        rows = await gated_conversations(engine, policy, NOW - timedelta(days=2), NOW)
    finally:
        await engine.dispose()
    got = sorted((r.agent_id, r.decision, r.success) for r in rows)
    assert [r.source for r in rows] == ["replayed"] * 12
    # cut 0.3 (not the fallback 0.9): 0.1 and 0.2 escalated, the failure at 0.2 among them
    assert [d for ag, d, _ in got if ag == a].count("escalate") == 2
    assert (a, "escalate", False) in got
    # too few conversations: the fallback 0.4 escalates 0.2 only
    assert [(d, ok) for ag, d, ok in got if ag == few] == [("escalate", True), ("proceed", True)]


def test_groups_go_to_their_first_rule_and_a_flat_map_merges_candidates() -> None:
    from monitor.gate.advised import ConfidenceGroup, compute_cuts

    policy = load_policy(
        """version: g
rules:
  - agent: x
    tier: 2
    threshold: 0.4
  - agent: x
    threshold: {advisor: {keep: 0.8, min_conversations: 10}, fallback: 0.2}
""",
        "g.yaml",
    )
    groups = [
        ConfidenceGroup("x", "", 0, round(0.1 * k, 1), 1, 1.0, 1.0, 0.0) for k in range(1, 11)
    ]
    groups.append(ConfidenceGroup("x", "", 2, 0.05, 50, 50.0, 50.0, 50.0))  # rule 0's traffic
    plain = compute_cuts(policy, groups, lambda a, d, c: c, NOW)
    assert list(plain.cuts) == [(1, "x", "")]  # the tier-2 group belongs to the fixed rule
    assert plain.cuts[(1, "x", "")].threshold == pytest.approx(0.3)
    assert plain.cuts[(1, "x", "")].n == 10
    flat = compute_cuts(policy, groups, lambda a, d, c: np.maximum(c, 0.5), NOW)
    # 0.1..0.5 all calibrate to 0.5: escalating any of them escalates half -> cut 0.5
    assert flat.cuts[(1, "x", "")].threshold == pytest.approx(0.5)
    few = compute_cuts(policy, groups[:9], lambda a, d, c: c, NOW).cuts[(1, "x", "")]
    assert (few.threshold, few.n, few.reason) == (None, 9, "not enough data")
