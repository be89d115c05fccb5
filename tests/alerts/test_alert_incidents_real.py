"""Incidents on real model answers (tests/data/answers, the agents of bench/alert_quality.py):
the default rules walked in memory with the shipped code (:mod:`monitor.alerts.timeline_sim`).
An agent that changes once and one miscalibrated all along each fire several alerts, and each
opens ONE incident that pages once; no alert flaps."""

from __future__ import annotations

from datetime import timedelta

import pytest

from bench.real_agents import ANSWERS, PER_HOUR, REAL_HOURS, T0, real_agents
from monitor.alerts.rules import default_rules
from monitor.alerts.states import Kind
from monitor.alerts.timeline_sim import SimStream, alert_timeline
from monitor.sim.answers import answer_items, parse_pools

AGENTS = ("changed:overconfident", "changed:ece", "overconfidence_tier3:edge", "ece_tier3:under")


@pytest.mark.slow  # two simulated days of checks for four agents (~30 s of CPU): make test
@pytest.mark.timeout(900)
def test_one_problem_opens_one_incident_and_pages_once() -> None:
    pools = parse_pools(ANSWERS.read_text())
    agents, facts = real_agents()
    end = T0 + timedelta(hours=REAL_HOURS)
    items = {
        (a, "qa", 3): answer_items(agents[a], pools, T0, end, PER_HOUR, seed=1) for a in AGENTS
    }
    stream = SimStream.from_items(T0, REAL_HOURS * 60 + 15, items)
    tl = alert_timeline(
        stream,
        default_rules(),
        T0 + timedelta(hours=1),
        end,
        escalation_step=timedelta(minutes=30),  # as the benchmark: a day of conversations each
    )
    assert not [p for p in tl.pages if p.kind is Kind.FLAPPING]
    change = T0 + timedelta(hours=24)
    for agent in AGENTS[:3]:
        fired = {p.rule for p in tl.pages if p.agent == agent and p.kind is Kind.FIRING}
        incidents = [i for i in tl.incidents.values() if i["labels"]["agent"] == agent]
        pages = [p for p in tl.pages if p.agent == agent and p.pages]
        assert len(fired) >= 2, (agent, fired)  # several rules see the problem
        assert len(incidents) == 1 and len(pages) == 1, (agent, incidents, pages)
        [incident] = incidents
        assert {m["rule"] for m in incident["members"]} == fired
        assert incident["pages"] == 1 and incident["updates"] >= len(fired) - 1
        if agent.startswith("changed"):
            assert pages[0].at >= change  # nothing before the change
        else:
            assert pages[0].at < T0 + timedelta(hours=3)  # miscalibrated from the start
    # the healthy agent (population ECE 0.038) never pages
    assert facts["ece_tier3:under"]["ece"] < 0.05
    assert not [p for p in tl.pages if p.agent == "ece_tier3:under"]
    assert not [p for p in tl.pages if p.rule.startswith("drift") and p.agent == AGENTS[2]]
