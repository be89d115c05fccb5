"""The traffic simulator: determinism, and each agent's behaviour matching its construction."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from itertools import pairwise
from pathlib import Path
from statistics import mean

import pytest
from typer.testing import CliRunner

from monitor.cli.main import app
from monitor.contract.events import AgentEvent, decode_event
from monitor.sim.traffic import AgentSpec, Simulator, default_agents

START = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)
N = 8000  # ~2000 conversations per default agent
CHANGE = START + timedelta(seconds=5 * N // 2)  # half-way through the run


@dataclass
class Conv:
    agent: str
    start: datetime
    min_conf: float
    success: bool
    escalated: bool


def _summarise(conv: list[AgentEvent]) -> Conv:
    confs = [
        e.message.confidence
        for e in conv
        if e.message is not None and e.message.confidence is not None
    ]
    outcomes = [e.outcome for e in conv if e.outcome is not None]
    assert len(outcomes) == 1
    return Conv(
        conv[0].agent.id,
        conv[0].ts,
        min(confs),
        outcomes[0].success,
        any(e.type == "escalation" for e in conv),
    )


#: the tests share a module fixture: one xdist process makes it (`--dist loadgroup`)
pytestmark = pytest.mark.xdist_group("simulate")


@pytest.fixture(scope="module")
def sim() -> Simulator:
    return Simulator(11, START, default_agents(change_point=CHANGE))


@pytest.fixture(scope="module")
def convs(sim: Simulator) -> list[list[AgentEvent]]:
    return list(sim.conversations(N))


@pytest.fixture(scope="module")
def by_agent(convs: list[list[AgentEvent]]) -> dict[str, list[Conv]]:
    out: dict[str, list[Conv]] = defaultdict(list)
    for conv in convs:
        s = _summarise(conv)
        out[s.agent].append(s)
    return out


def _gap(items: list[Conv]) -> float:
    return mean(c.min_conf for c in items) - mean(c.success for c in items)


def test_same_seed_and_start_give_identical_events() -> None:
    a = [e.to_json() for e in Simulator(5, START).events(300)]
    b = [e.to_json() for e in Simulator(5, START).events(300)]
    assert a == b
    assert a != [e.to_json() for e in Simulator(6, START).events(300)]
    other_start = list(Simulator(5, START + timedelta(days=1)).events(300))
    assert not {e.event_id for e in other_start} & {decode_event(x).event_id for x in a}


def test_conversation_k_does_not_depend_on_what_came_before(sim: Simulator) -> None:
    assert sim.conversation(123) == list(sim.conversations(124))[123]
    assert sim.conversation_start(10) == START + timedelta(seconds=50)


def test_every_event_validates_and_conversations_are_well_formed(
    convs: list[list[AgentEvent]],
) -> None:
    ids: set[str] = set()
    for conv in convs[:1500]:
        assert [e.event_id for e in conv] == [
            f"{conv[0].conversation_id}:{i}" for i in range(len(conv))
        ]
        assert all(a.ts < b.ts for a, b in pairwise(conv))
        assert conv[0].message is not None and conv[0].message.role == "user"
        assert conv[-1].outcome is not None and conv[-1].outcome.source == "ground_truth"
        for e in conv:
            assert decode_event(e.to_json()) == e
            ids.add(e.event_id)
            if e.message is not None and e.message.role == "assistant" and e.message.content:
                assert e.message.confidence is not None
                assert e.message.confidence_source == "verbalized"
    assert len(ids) == sum(len(c) for c in convs[:1500])
    kinds = [e for c in convs[:1500] for e in c]
    results = [e.tool_result for e in kinds if e.tool_result is not None]
    assert any(r.ok for r in results) and any(not r.ok and r.error for r in results)
    assert {e.type for e in kinds} == {
        "message",
        "tool_result",
        "escalation",
        "outcome",
        "feedback",
    }
    tiers = {(e.agent.id, e.context.domain, e.context.tier) for e in kinds if e.context}
    assert len({t[1] for t in tiers}) == 3 and len({t[2] for t in tiers}) == 3


def test_events_are_merged_in_time_order(sim: Simulator) -> None:
    merged = list(sim.events(200))
    assert all(a.ts <= b.ts for a, b in pairwise(merged))
    grouped = [e for conv in sim.conversations(200) for e in conv]
    assert sorted(e.event_id for e in merged) == sorted(e.event_id for e in grouped)
    positions = defaultdict(list)
    for e in merged:
        positions[e.conversation_id].append(int(e.event_id.rsplit(":", 1)[1]))
    assert all(p == sorted(p) for p in positions.values())


def test_agents_are_balanced(by_agent: dict[str, list[Conv]]) -> None:
    assert set(by_agent) == {a.agent_id for a in default_agents()}
    assert all(1800 < len(v) < 2200 for v in by_agent.values())


def test_calibrated_agent_success_matches_confidence(by_agent: dict[str, list[Conv]]) -> None:
    calibrated = by_agent["sim-airline-calibrated"]
    assert abs(_gap(calibrated)) < 0.05
    low = [c for c in calibrated if c.min_conf < 0.5]
    high = [c for c in calibrated if c.min_conf >= 0.8]
    assert abs(_gap(low)) < 0.06 and abs(_gap(high)) < 0.06
    assert mean(c.success for c in high) - mean(c.success for c in low) > 0.3


def test_overconfident_agent_falls_short(by_agent: dict[str, list[Conv]]) -> None:
    gap = _gap(by_agent["sim-retail-overconfident"])
    assert gap > 0.15
    assert gap == pytest.approx(0.25, abs=0.05)


def test_drift_only_after_the_change_point(by_agent: dict[str, list[Conv]]) -> None:
    drifting = by_agent["sim-telecom-drifting"]
    before = [c for c in drifting if c.start < CHANGE]
    after = [c for c in drifting if c.start >= CHANGE]
    assert len(before) > 800 and len(after) > 800
    assert abs(_gap(before)) < 0.05
    assert _gap(after) > 0.15


def _escalation_rates(items: list[Conv]) -> list[float]:
    bins: dict[int, list[bool]] = defaultdict(list)
    for c in items:
        bins[min(int(c.min_conf * 4), 3)].append(c.escalated)
    return [mean(bins[b]) for b in sorted(bins) if len(bins[b]) > 100]


def test_inverted_agent_escalates_more_when_confident(by_agent: dict[str, list[Conv]]) -> None:
    inverted = _escalation_rates(by_agent["sim-airline-inverted"])
    normal = _escalation_rates(by_agent["sim-airline-calibrated"])
    assert len(inverted) >= 3 and inverted == sorted(inverted)
    assert inverted[-1] - inverted[0] > 0.1
    assert normal == sorted(normal, reverse=True) and normal[0] - normal[-1] > 0.1


def test_spec_exposes_the_true_functions() -> None:
    agents = {a.behaviour: a for a in default_agents(change_point=CHANGE)}
    before, after = CHANGE - timedelta(seconds=1), CHANGE
    assert agents["calibrated"].success_probability(0.7, after) == 0.7
    assert agents["overconfident"].success_probability(0.9, before) == pytest.approx(0.65)
    assert agents["drifting"].success_probability(0.9, before) == 0.9
    assert agents["drifting"].success_probability(0.9, after) == pytest.approx(0.65)
    assert agents["drifting"].overconfident_at(after) and not agents["drifting"].overconfident_at(
        before
    )
    inv, cal = agents["inverted"], agents["calibrated"]
    assert inv.escalation_probability(0.9) > inv.escalation_probability(0.3)
    assert cal.escalation_probability(0.9) < cal.escalation_probability(0.3)
    never = default_agents(change_point=None)[2]
    assert never.success_probability(0.9, after + timedelta(days=999)) == 0.9


def test_invalid_arguments() -> None:
    with pytest.raises(ValueError, match="timezone-aware"):
        Simulator(1, datetime(2025, 1, 1))
    with pytest.raises(ValueError, match="interval"):
        Simulator(1, START, interval=timedelta(0))
    with pytest.raises(ValueError, match="at least one agent"):
        Simulator(1, START, agents=[])
    with pytest.raises(ValueError, match="confidence_range"):
        AgentSpec("x", "calibrated", "airline", 1, confidence_range=(0.9, 0.1))


def test_cli_writes_reproducible_jsonl(tmp_path: Path) -> None:
    runner = CliRunner()
    args = [
        "simulate",
        "--seed",
        "3",
        "-n",
        "40",
        "--start",
        "2025-01-01T00:00:00Z",
        "--change-point-minutes",
        "1",
    ]
    first, second = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    for out in (first, second):
        result = runner.invoke(app, [*args, "--output", str(out)])
        assert result.exit_code == 0, result.output
    assert first.read_bytes() == second.read_bytes()
    events = [decode_event(line) for line in first.read_bytes().splitlines()]
    assert sum(e.type == "outcome" for e in events) == 40
    assert f"wrote {len(events)} events" in result.stdout
    assert "drift at 2025-01-01T00:01:00+00:00" in result.stdout


def test_cli_rejects_conflicting_options(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        app, ["simulate", "-n", "5", "--duration", "10", "-o", str(tmp_path / "x.jsonl")]
    )
    assert result.exit_code == 2
    assert "not both" in result.stderr


@pytest.mark.parametrize("duration,rate", [(3, 50), (8, 100), (60, 200)])
def test_demo_traffic_never_runs_ahead_of_the_wall_clock(duration: float, rate: float) -> None:
    """`monitor up`'s plan: the newest simulated event is at most `now` (conversations last
    minutes past their start, so the span starts earlier than conversations x interval)."""
    from monitor.stack.demo import INTERVAL, plan_traffic

    now = datetime(2026, 11, 23, 18, 0, 0, 500_000, tzinfo=UTC)
    plan = plan_traffic(7, duration, rate, now)
    events = list(plan.simulator.events(plan.conversations))
    newest = max(e.ts for e in events)
    assert newest <= now
    assert now - newest < timedelta(seconds=2)  # ... and the span still ends now
    assert len(events) == plan.events >= duration * rate
    assert plan.simulator.start < now - plan.conversations * INTERVAL
    assert plan.simulator.start < plan.change_point < plan.recovery_point < newest
