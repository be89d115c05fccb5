"""The default alert rules on the runtime trust gate, observed from gate events in Postgres."""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy import text

from monitor.alerts.evaluate import evaluate_once
from monitor.alerts.observations import observe
from monitor.alerts.rule_models import Severity
from monitor.alerts.rules import default_rules
from monitor.alerts.states import fingerprint
from monitor.contract.events import AgentEvent, validate_event
from monitor.ingest.rows import event_row
from monitor.ingest.writer import EventWriter
from monitor.store.engine import make_engine
from tests.factories import T0, event_dict

NOW = T0 + timedelta(minutes=20)  # the gate events are at T0 + 10..14 min


def gate(i: int, conv: str, decision: str, agent: str = "bot", **extra: object) -> AgentEvent:
    return validate_event(
        event_dict(
            f"g{i}",
            conv,
            "gate",
            at=600 + i,
            agent=agent,
            context={"domain": "retail", "tier": 2},
            decision=decision,
            findings=[],
            **extra,
        )
    )


async def test_default_gate_rules_observe_escalations_failures_and_fallbacks(
    database_url: str,
) -> None:
    events = []
    # 60 conversations of bot: 15 escalated, 45 proceeded (40 with an outcome, 8 failed)
    for i in range(60):
        decision = "escalate" if i < 15 else "proceed"
        slow = "fail open: checks took 80.0 ms, deadline 50 ms"
        extra = {"degraded": slow} if i % 20 == 0 else {}
        events.append(gate(i, f"c{i}", decision, **extra))
        if 15 <= i < 55:
            events.append(
                validate_event(
                    event_dict(
                        f"o{i}", f"c{i}", "outcome", at=900 + i, agent="bot", success=i >= 23
                    )
                )
            )
    # c15 was first escalated, then proceeded: its latest decision counts for the failures
    events.append(gate(100, "c15", "escalate"))  # at 700: later than c15's proceed at 615
    # another agent
    events.append(gate(200, "d1", "escalate", agent="other", degraded="fail closed: x"))
    w = EventWriter(database_url)
    try:
        await w.write([event_row(e) for e in events])
    finally:
        await w.close()
    rules = default_rules()
    names = ("gate_escalation_rate", "gate_proceeded_failures", "gate_degraded")
    only = rules.model_copy(update={"rules": tuple(rules.rule(n) for n in names)})
    engine = make_engine(database_url)
    try:
        found = await observe(engine, only, NOW)
        after = await observe(engine, only, NOW + timedelta(minutes=10))  # degraded: 15 min
    finally:
        await engine.dispose()
    got = {(o.rule, o.scope["agent"]): (o.value, o.samples) for o in found}
    assert got[("gate_escalation_rate", "bot")] == (16 / 61, 61)
    assert got[("gate_escalation_rate", "other")] == (1.0, 1)
    # proceeded (latest decision) with an outcome: c16..c54 (c15 is now escalated) = 39,
    # failed: c16..c22 = 7
    assert got[("gate_proceeded_failures", "bot")] == (7 / 39, 39)
    assert got[("gate_degraded", "bot")] == (3 / 61, 61)
    assert got[("gate_degraded", "other")] == (1.0, 1)
    scope = next(o.scope for o in found if o.rule == "gate_degraded")
    assert scope == {"agent": "bot", "domain": "retail", "tier": "2"}
    assert {o.rule for o in after} == set(names) - {"gate_degraded"}


async def test_default_fail_open_rule_pages_above_its_share_of_enforced_decisions(
    database_url: str,
) -> None:
    """``gate_fail_open`` (critical, 2 % of enforced decisions over 15 min, at least 50, for
    5 min): ``leaky`` fails open on 3 % of its enforced decisions and pages; ``tight`` fails
    open on 1 % (plus fail-closed answers and shadow fail-opens, which do not count) and
    does not."""
    events = []
    open_slow = {"degraded": "fail open: checks took 80.0 ms, deadline 50 ms"}
    llm_open = {"degraded": "llm timeout: on_llm_timeout proceed"}
    closed = {"degraded": "fail closed: gate error (KeyError)"}
    shadow_open = {"enforced": False, **open_slow}
    for i in range(200):
        # leaky: 200 enforced, 6 failed open (4 by the deadline, 2 by the LLM fallback) = 3 %
        leak = open_slow if i % 50 == 0 else llm_open if i in (7, 107) else {}
        events.append(gate(i, f"l{i}", "proceed", agent="leaky", **leak))
        # tight: 200 enforced, 2 failed open = 1 %; 10 failed closed; 40 shadow failing open
        tight = open_slow if i in (3, 103) else closed if i % 20 == 1 else {}
        events.append(gate(200 + i, f"t{i}", "proceed", agent="tight", **tight))
        if i < 40:
            events.append(gate(400 + i, f"s{i}", "proceed", agent="tight", **shadow_open))
    w = EventWriter(database_url)  # at T0 + 10 min .. T0 + 17.3 min
    try:
        await w.write([event_row(e) for e in events])
    finally:
        await w.close()
    rules = default_rules()
    rule = rules.rule("gate_fail_open")
    assert rule.severity is Severity.CRITICAL
    only = rules.model_copy(update={"rules": (rule,), "group_wait": timedelta(0)})
    scope = {"domain": "retail", "tier": "2"}
    leaky = fingerprint("gate_fail_open", {"agent": "leaky", **scope})
    tight = fingerprint("gate_fail_open", {"agent": "tight", **scope})
    engine = make_engine(database_url)
    try:
        found = await observe(engine, only, T0 + timedelta(minutes=18))
        got = {o.scope["agent"]: (o.value, o.samples) for o in found}
        assert got == {"leaky": (6 / 200, 200), "tight": (2 / 200, 200)}
        first = await evaluate_once(engine, only, T0 + timedelta(minutes=18), ("webhook",))
        assert first.pending == [leaky] and first.firing == []
        fired = await evaluate_once(engine, only, T0 + timedelta(minutes=23), ("webhook",))
        assert fired.firing == [leaky]
        assert [(n.fingerprint, n.kind) for n in fired.notifications] == [(leaky, "firing")]
        async with engine.connect() as conn:
            sql = "SELECT payload FROM notification_outbox WHERE sink = 'webhook'"
            payloads = (await conn.execute(text(sql))).scalars().all()
    finally:
        await engine.dispose()
    notes = [n for p in payloads for n in p["notifications"]]
    assert [(n["fingerprint"], n["labels"]["severity"]) for n in notes] == [(leaky, "critical")]
    assert tight not in {n["fingerprint"] for n in notes}
