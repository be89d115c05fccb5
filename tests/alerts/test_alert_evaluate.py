"""Alert evaluation on real Postgres seeded with simulator traffic through the ingest writer.

Traffic: 2400 conversations of the four default simulated agents (3 h 20 min, the drifting
agent turns overconfident half way), then 100 minutes in which every agent is calibrated (the
"recovery"). The database is seeded once per module and cloned per test (template database).
Evaluations run at explicit simulated times; assertions are on the committed rows.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from monitor.alerts import evaluate as ev
from monitor.alerts import repo as alerts_repo
from monitor.alerts.rules import RuleSet, load_rules
from monitor.alerts.silences import Ack, Matcher, Silence
from monitor.alerts.states import fingerprint
from monitor.analytics import reports as fa
from monitor.analytics.repo import Segment
from monitor.contract.events import AgentEvent
from monitor.sim.traffic import AgentSpec, Simulator, default_agents
from monitor.store import engine as pg
from tests.seeding import engine_on_copy, seeded_database

N_CONV = 2400
NOW = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)
START = NOW - timedelta(seconds=5 * N_CONV)
CHANGE = START + timedelta(seconds=5 * N_CONV / 2)
T1 = START + timedelta(hours=1)  # well before the change point
SINKS = ("slack", "webhook")
OVER = "sim-retail-overconfident"
CALIBRATED = "sim-airline-calibrated"
DRIFTING = "sim-telecom-drifting"

RULES_YAML = """
group_wait: 0s
group_interval: 1m
rules:
  - {name: ece_high, metric: ece, scope: {agent: "sim-*"}, comparison: ">", threshold: 0.15,
     window: 1h, for: 10m, min_samples: 100, severity: critical, repeat_interval: 1h,
     annotations: {summary: "ECE {value} above {threshold} for {agent}"}}
  - {name: drift, metric: drift, comparison: ">=", threshold: 1, window: 1h,
     severity: critical, annotations: {summary: "drift for {agent}"}}
"""


def rules(only: str | None = None) -> RuleSet:
    rs = load_rules(RULES_YAML, "test_rules.yaml")
    if only is None:
        return rs
    return rs.model_copy(update={"rules": tuple(r for r in rs.rules if r.name == only)})


def at(minutes: float, base: datetime = T1) -> datetime:
    return base + timedelta(minutes=minutes)


def seg_fp(rule: str, agent: str) -> str:
    spec = {a.agent_id: a for a in default_agents()}[agent]
    return fingerprint(rule, {"agent": agent, "domain": spec.domain, "tier": str(spec.tier)})


def _events() -> list[AgentEvent]:
    events = list(Simulator(11, START, default_agents(CHANGE)).events(N_CONV))
    recovered = tuple(
        AgentSpec(a.agent_id, "calibrated", a.domain, a.tier, confidence_range=a.confidence_range)
        for a in default_agents()
    )
    return events + list(Simulator(12, NOW, recovered).events(1200))


#: the tests share a module fixture: one xdist process makes it (`--dist loadgroup`)
pytestmark = pytest.mark.xdist_group("alert-evaluate")


@pytest.fixture(scope="module")
def template(migrated_template_url: str) -> Iterator[str]:
    with seeded_database(migrated_template_url, "mon_altpl", _events()) as url:
        yield url


@pytest.fixture
async def engine(template: str) -> AsyncIterator[AsyncEngine]:
    """A fresh copy of the seeded database (CREATE DATABASE ... TEMPLATE)."""
    async with engine_on_copy(template, "mon_alev") as (_, eng):
        yield eng


async def q(engine: AsyncEngine, sql: str, **params: Any) -> list[Any]:
    async with engine.connect() as conn:
        return list((await conn.execute(text(sql), params)).all())


async def outbox(engine: AsyncEngine) -> list[Any]:
    return await q(engine, "SELECT sink, payload FROM notification_outbox ORDER BY id")


def members(rows: list[Any], fp: str) -> list[tuple[str, int]]:
    """(kind, sequence) of ``fp``'s notifications in the outbox rows of the first sink."""
    notes = [n for sink, p in rows if sink == SINKS[0] for n in p["notifications"]]
    return [(n["kind"], n["sequence"]) for n in notes if n["fingerprint"] == fp]


async def test_ece_fires_after_for_once_repeats_and_resolves(engine: AsyncEngine) -> None:
    rs, fp = rules("ece_high"), seg_fp("ece_high", OVER)
    r0 = await ev.evaluate_once(engine, rs, at(0), SINKS)
    assert fp in r0.pending and r0.outbox_rows == 0 and r0.observations == 4
    r5 = await ev.evaluate_once(engine, rs, at(5), SINKS)
    assert fp in r5.pending and await outbox(engine) == []
    r10 = await ev.evaluate_once(engine, rs, at(10), SINKS)
    assert r10.firing == [fp] and r10.outbox_rows == 2  # one batch, one row per sink
    rows = await outbox(engine)
    assert {r[0] for r in rows} == set(SINKS) and members(rows, fp) == [("firing", 0)]
    note = rows[0][1]["notifications"][0]
    assert note["value"] > 0.15 and note["threshold"] == 0.15 and note["samples"] >= 100
    assert note["scope"] == {"agent": OVER, "domain": "retail", "tier": "1"}
    for m in (15, 20, 40):  # dedup: still firing, nothing new
        r = await ev.evaluate_once(engine, rs, at(m), SINKS)
        assert r.outbox_rows == 0 and fp in r.firing
    r70 = await ev.evaluate_once(engine, rs, at(71), SINKS)  # past repeat_interval (1h)
    assert [n.kind.value for n in r70.notifications if n.fingerprint == fp] == ["repeat"]
    assert members(await outbox(engine), fp) == [("firing", 0), ("repeat", 1)]
    # the recovery: the window [NOW+10m, NOW+70m) only holds calibrated traffic
    rr = await ev.evaluate_once(engine, rs, at(70, NOW), SINKS)
    assert fp not in rr.firing
    assert members(await outbox(engine), fp) == [("firing", 0), ("repeat", 1), ("resolved", 0)]
    assert (await ev.evaluate_once(engine, rs, at(75, NOW), SINKS)).outbox_rows == 0
    hist = await q(
        engine, "SELECT kind FROM alert_history WHERE fingerprint = :fp ORDER BY id", fp=fp
    )
    assert [h[0] for h in hist] == ["firing", "repeat", "resolved"]
    # the calibrated agent never breached: no state beyond inactive, no history
    cal = seg_fp("ece_high", CALIBRATED)
    st = await q(engine, "SELECT status FROM alert_states WHERE fingerprint = :fp", fp=cal)
    assert st == [("inactive",)]
    assert await q(engine, "SELECT 1 FROM alert_history WHERE fingerprint = :fp", fp=cal) == []


async def test_drift_fires_for_the_drifting_agent_and_resolves(engine: AsyncEngine) -> None:
    rs = rules("drift")

    async def step(now: datetime) -> ev.EvaluationReport:
        await fa.run_drift(engine, Segment(), fa.drift_windows(now, timedelta(minutes=40)))
        return await ev.evaluate_once(engine, rs, now, SINKS)

    before = await step(CHANGE - timedelta(minutes=5))
    assert before.observations == 4 and before.firing == [] and before.outbox_rows == 0
    after = await step(CHANGE + timedelta(minutes=40))
    fp = seg_fp("drift", DRIFTING)
    assert after.firing == [fp] and after.outbox_rows == 2
    note = (await outbox(engine))[0][1]["notifications"][0]
    assert note["kind"] == "firing" and note["scope"]["agent"] == DRIFTING
    assert "accuracy_drop" in (note["detail"] or "")
    recovered = await step(NOW + timedelta(minutes=90))
    assert recovered.firing == []
    assert [(n.kind.value, n.fingerprint) for n in recovered.notifications] == [("resolved", fp)]
    hist = await q(engine, "SELECT fingerprint, kind FROM alert_history ORDER BY id")
    assert hist == [(fp, "firing"), (fp, "resolved")]


async def test_concurrent_evaluations_write_each_notification_once(
    engine: AsyncEngine, template: str
) -> None:
    rs, fp = rules("ece_high"), seg_fp("ece_high", OVER)
    other = pg.make_engine(str(engine.url.render_as_string(hide_password=False)))
    try:
        for m in (0, 10, 20):
            await asyncio.gather(*(ev.evaluate_once(e, rs, at(m), SINKS) for e in (engine, other)))
    finally:
        await other.dispose()
    rows = await outbox(engine)
    assert len(rows) == 2 and members(rows, fp) == [("firing", 0)]
    assert len(await q(engine, "SELECT 1 FROM alert_history")) == 1


async def test_silence_suppresses_and_its_end_pages(engine: AsyncEngine) -> None:
    rs, fp = rules("ece_high"), seg_fp("ece_high", OVER)
    s = Silence(
        "s1", (Matcher("alertname", "ece_*"), Matcher("agent", OVER)), at(0), at(30), "deploy", "me"
    )
    async with engine.begin() as conn:
        await alerts_repo.create_silence(conn, s)
    for m in (0, 10, 20, 29):
        r = await ev.evaluate_once(engine, rs, at(m), SINKS)
        assert r.outbox_rows == 0
    assert fp in r.firing
    r = await ev.evaluate_once(engine, rs, at(31), SINKS)  # silence ended: the owed page
    assert [(n.kind.value, n.fingerprint) for n in r.notifications] == [("firing", fp)]
    # a second silence, ended early with unsilence: the repeat is owed again
    async with engine.begin() as conn:
        await alerts_repo.create_silence(
            conn, Silence("s2", (Matcher("agent", OVER),), at(32), at(200), "x", "me")
        )
    assert (await ev.evaluate_once(engine, rs, at(95), SINKS)).outbox_rows == 0
    async with engine.begin() as conn:
        await alerts_repo.expire_silence(conn, "s2", at(96))
    r = await ev.evaluate_once(engine, rs, at(97), SINKS)
    assert [(n.kind.value, n.sequence) for n in r.notifications if n.fingerprint == fp] == [
        ("firing", 1)
    ]


async def test_ack_stops_repeats(engine: AsyncEngine) -> None:
    rs, fp = rules("ece_high"), seg_fp("ece_high", OVER)
    for m in (0, 10):
        await ev.evaluate_once(engine, rs, at(m), SINKS)
    async with engine.begin() as conn:
        acked = await alerts_repo.ack(conn, Ack(fp, "alice", at(12), "looking"), "critical")
    assert acked.acked_by == "alice"
    for m in (75, 140):  # past the repeat interval twice (the drifting agent fires by 140)
        r = await ev.evaluate_once(engine, rs, at(m), SINKS)
        assert fp in r.firing and not [n for n in r.notifications if n.fingerprint == fp]
    assert members(await outbox(engine), fp) == [("firing", 0)]


async def test_failure_after_state_write_leaves_nothing(
    engine: AsyncEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    rs, fp = rules("ece_high"), seg_fp("ece_high", OVER)
    await ev.evaluate_once(engine, rs, at(0), SINKS)
    before = await q(engine, "SELECT fingerprint, status, version FROM alert_states ORDER BY 1")

    async def boom(*args: Any, **kwargs: Any) -> int:
        raise RuntimeError("outbox down")

    monkeypatch.setattr(ev, "enqueue", boom)
    with pytest.raises(RuntimeError, match="outbox down"):
        await ev.evaluate_once(engine, rs, at(10), SINKS)
    assert (
        await q(engine, "SELECT fingerprint, status, version FROM alert_states ORDER BY 1")
        == before
    )
    assert await q(engine, "SELECT 1 FROM alert_history") == []
    assert await q(engine, "SELECT 1 FROM alert_groups") == []
    assert await outbox(engine) == []
    monkeypatch.undo()
    r = await ev.evaluate_once(engine, rs, at(10), SINKS)
    assert r.firing == [fp] and r.outbox_rows == 2


async def test_group_wait_holds_then_flushes_together(engine: AsyncEngine) -> None:
    rs = rules().model_copy(update={"group_wait": timedelta(seconds=30), "group_by": ("severity",)})
    await ev.evaluate_once(engine, rs, at(0), SINKS)
    r = await ev.evaluate_once(engine, rs, at(10), SINKS)
    assert r.notifications and r.outbox_rows == 0 and r.next_due_at == at(10.5)
    r = await ev.evaluate_once(engine, rs, at(10.5), SINKS)
    assert r.outbox_rows == 2 and len(r.batches) == 1
    assert {n.fingerprint for n in r.batches[0].notifications} >= {seg_fp("ece_high", OVER)}


@pytest.mark.parametrize("p90_window", ["2h", "3h"])  # one read shared by both rules; one each
async def test_escalation_observations_per_segment(engine: AsyncEngine, p90_window: str) -> None:
    rs = load_rules(
        f"""
rules:
  - {{name: inv, metric: escalation_inversion, comparison: ">=", threshold: 1, window: 2h,
     severity: critical, annotations: {{summary: i}}}}
  - {{name: p90, metric: time_to_escalation_p90_s, scope: {{tier: 1}}, comparison: ">",
     threshold: 20, window: {p90_window}, severity: warning, annotations: {{summary: p}}}}
""",
        "esc.yaml",
    )
    r = await ev.evaluate_once(engine, rs, START + timedelta(minutes=100), SINKS)
    # only the inverted agent escalates more when confident; p90 (~35 s) only for tier-1 agents
    tier1 = {seg_fp("p90", a) for a in ("sim-airline-inverted", OVER)}
    assert set(r.firing) == {seg_fp("inv", "sim-airline-inverted")} | tier1
    assert r.observations == 4 + 2
