"""``monitor alerts backtest`` on real Postgres seeded with real model answers (tests/data/answers)
through the ingest writer: it agrees with what the worker's own walk (drift checks, then
evaluation, at each step: monitor.alerts.timeline) writes, and it leaves live alert state,
drift references and the outbox alone. Also: a flapping alert is visible in ``alerts list``,
``v_alerts`` and ``/metrics``, and one notification says it flaps."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine
from typer.testing import CliRunner

from monitor.alerts.backtest import (
    SHADOWED,
    Change,
    DriftJob,
    backtest,
    summarize,
    summarize_incidents,
)
from monitor.alerts.evaluate import evaluate_once
from monitor.alerts.incidents import Incident
from monitor.alerts.observations import observe
from monitor.alerts.rules import RuleSet, default_rules, load_rules
from monitor.alerts.timeline import replay_alert_timeline
from monitor.cli.main import app
from monitor.contract.events import AgentEvent
from monitor.sim.answers import AnswerAgent, Mixture, answer_events, answer_items, parse_pools
from monitor.sim.answers import tune as tune_mix
from monitor.telemetry.ops_metrics import OpsMetrics
from tests.seeding import engine_on_copy, seeded_database

ANSWERS = Path(__file__).resolve().parents[1] / "data" / "answers" / "stated_confidence_answers.csv"
START = datetime(2026, 5, 4, tzinfo=UTC)
HOURS = 12
CHANGE = START + timedelta(hours=7)
CALIBRATED = Mixture(
    (("lsat_gemini-1.5-flash", 0.4), ("sciq_claude-3-haiku", 0.2), ("sciq_gemini-1.5-flash", 0.4))
)


def _agents() -> list[AnswerAgent]:
    pools = parse_pools(ANSWERS.read_text())
    edge = tune_mix(pools, CALIBRATED, Mixture((("lsat_gpt-4", 1.0),)), "ece", 0.13)
    over = tune_mix(
        pools, CALIBRATED, Mixture((("lsat_gpt-3.5-turbo", 1.0),)), "overconfidence_gap", 0.2
    )
    return [
        AnswerAgent("stable", 3, "qa", ((None, edge),)),
        AnswerAgent("changed", 3, "qa", ((None, CALIBRATED), (CHANGE, over))),
    ]


def _events() -> list[AgentEvent]:
    pools = parse_pools(ANSWERS.read_text())
    events = []
    for agent in _agents():
        items = answer_items(agent, pools, START, START + timedelta(hours=HOURS), 150, seed=7)
        events += answer_events(agent, items, "bt")
    return events


#: the tests share a module fixture: one xdist process makes it (`--dist loadgroup`)
pytestmark = pytest.mark.xdist_group("alert-backtest")


@pytest.fixture(scope="module")
def template(migrated_template_url: str) -> Iterator[str]:
    with seeded_database(migrated_template_url, "mon_bttpl", _events()) as url:
        yield url


@pytest.fixture
async def db(template: str) -> AsyncIterator[tuple[str, AsyncEngine]]:
    """A fresh copy of the seeded database: its URL and an engine on it."""
    async with engine_on_copy(template, "mon_bt") as (url, eng):
        yield url, eng


async def q(engine: AsyncEngine, sql: str) -> list[Any]:
    async with engine.connect() as conn:
        return list((await conn.execute(text(sql))).all())


async def live_rows(engine: AsyncEngine) -> dict[str, int]:
    return {t: (await q(engine, f"SELECT count(*) FROM {t}"))[0][0] for t in SHADOWED}


STEP = timedelta(minutes=15)
FROM, TO = START + timedelta(hours=2), START + timedelta(hours=HOURS)
DRIFT = DriftJob(every=STEP)


async def test_backtest_agrees_with_the_worker_and_leaves_live_state_alone(
    db: tuple[str, AsyncEngine],
) -> None:
    url, engine = db
    rules = default_rules()
    steps, identities, incidents = await backtest(engine, rules, FROM, TO, STEP, DRIFT)
    assert set((await live_rows(engine)).values()) == {0}  # nothing written live
    assert await q(engine, "SELECT nspname FROM pg_namespace WHERE nspname LIKE 'backtest_%'") == []
    ours = [(n.created_at, n.idempotency_key) for s in steps for n in s.notifications]

    # the worker's walk over the same history, writing the live tables
    metrics = OpsMetrics()
    await replay_alert_timeline(
        engine,
        rules,
        FROM,
        TO,
        STEP,
        sinks={},
        notifier=None,
        drift_recent=DRIFT.recent,
        drift_alpha=DRIFT.alpha,
        drift_min_samples=DRIFT.min_samples,
        drift_reference=DRIFT.reference,
        drift_min_reference=DRIFT.min_reference,
        not_after=TO,  # the same ticks: no flush tick after the walk
        on_tick=lambda t: metrics.incidents(
            t.report.open_incidents, [n.severity for n in t.report.pages], t.report.incident_updates
        ),
    )
    worker = [
        (at, key)
        for at, key in await q(engine, "SELECT at, idempotency_key FROM alert_history ORDER BY id")
        if at <= TO
    ]
    assert ours == worker
    assert len(ours) >= 3
    # the same incidents, ids, members, pages and updates as the worker stored
    stored = [
        Incident.from_dict(r[0]) for r in await q(engine, "SELECT state FROM alert_incidents")
    ]
    assert sorted(incidents, key=lambda i: i.id) == sorted(stored, key=lambda i: i.id)
    history = await q(engine, "SELECT incident_id FROM alert_history WHERE kind = 'firing'")
    assert {i for (i,) in history} == {i.id for i in stored}
    # one incident per agent, each paging once: the stable agent's ECE (it stays firing);
    # the changed agent's drift and calibration alerts page once together
    summary = {s.key: s for s in summarize_incidents(incidents)}
    assert set(summary) == {"agent=stable", "agent=changed"}
    assert summary["agent=stable"].pages == 1 and summary["agent=changed"].pages == 1
    assert "drift_tier3" in summary["agent=changed"].alerts
    assert len(summary["agent=changed"].alerts) >= 2
    # shown: /metrics, v_alerts (the dashboards' alert tables) and `alerts list`
    exposed = metrics.render()
    open_now = sum(1 for i in stored if i.resolved_at is None)
    assert f"monitor_incidents_open {open_now:.1f}".encode() in exposed
    assert b'monitor_incident_pages_total{severity="critical"} 2.0' in exposed
    updates = sum(i.updates for i in stored)
    assert f"monitor_incident_updates_total {updates:.1f}".encode() in exposed
    holder = {m.fingerprint: i.id for i in stored for m in i.members}
    shown = await q(engine, "SELECT fingerprint, incident_id FROM v_alerts")
    assert shown and all(inc == holder[fp] for fp, inc in shown)
    args = ["alerts", "list", "--all", "--json"]
    out = await asyncio.to_thread(CliRunner().invoke, app, args, env={"MONITOR_DATABASE_URL": url})
    assert out.exit_code == 0, out.output
    listed = json.loads(out.output)
    assert {i["id"]: i["alerts"] for i in listed["incidents"]} == {
        i.id: [m.rule for m in i.members] for i in stored
    }
    assert all(a["incident"] == holder.get(a["fingerprint"]) for a in listed["alerts"])

    figures = {
        (r.rule, r.scope["agent"]): r
        for r in summarize(steps, identities, STEP, [Change("changed", CHANGE)])
    }
    # the stable agent sits at the ECE threshold's edge: one page, it stays firing
    assert figures[("ece_tier3", "stable")].pages == 1
    assert figures[("ece_tier3", "stable")].fired == 1
    assert figures[("ece_tier3", "stable")].flaps == 0
    assert not any(
        r.rule.startswith("drift") and r.fired for (_, a), r in figures.items() if a == "stable"
    )
    # the changed agent: drift fired once, within the recent hour plus for: 10m at this
    # 15-minute step (bench/alert_quality.py measures the delay at the worker's 5 minutes)
    drift = figures[("drift_tier3", "changed")]
    assert drift.fired == 1
    delay = drift.first_fired_after[f"changed@{CHANGE.isoformat()}"]
    assert delay is not None and delay <= 90
    changed = [r for (_, a), r in figures.items() if a == "changed"]
    assert sum(r.pages for r in changed) == 1 < sum(r.fired for r in changed)
    # the worker's stored checks ran the sequential test once the reference reached its
    # minimum size, and it flagged the change
    checks = await q(
        engine,
        "SELECT agent_id, fired_tests, (details->>'surprise_log_e')::float FROM drift_checks",
    )
    assert any(a == "changed" and "surprise" in t.split(",") for a, t, _ in checks), checks
    assert not any(a == "stable" and "surprise" in t.split(",") for a, t, _ in checks)
    assert any(e is not None for a, _, e in checks if a == "stable")


async def test_backtest_command_prints_figures_per_rule_and_segment(
    db: tuple[str, AsyncEngine],
) -> None:
    url, engine = db
    args = [
        "alerts",
        "backtest",
        "--from",
        FROM.isoformat(),
        "--to",
        TO.isoformat(),
        "--step",
        "15m",
        "--agent",
        "changed",
        "--change",
        f"changed@{CHANGE.isoformat()}",
        "--json",
    ]
    env = {"MONITOR_DATABASE_URL": url, "MONITOR_DRIFT_INTERVAL_S": "900"}
    out = await asyncio.to_thread(CliRunner().invoke, app, args, env=env)
    assert out.exit_code == 0, out.output
    shown = json.loads(out.output)
    rows = shown["rules"]
    assert {r["scope"]["agent"] for r in rows} == {"changed"}
    drift = next(r for r in rows if r["rule"] == "drift_tier3")
    assert drift["fired"] == 1 and drift["episodes"] == 1 and drift["firing_minutes"] > 0
    assert 0 <= drift["first_fired_after_change_min"][f"changed@{CHANGE.isoformat()}"] <= 90
    [incident] = shown["incidents"]
    assert incident["key"] == "agent=changed" and incident["pages"] == 1
    assert "drift_tier3" in incident["alerts"] and incident["updates"] >= 1
    assert sum(r["pages"] for r in rows) == 1
    assert set((await live_rows(engine)).values()) == {0}


FLAPPY = """
group_wait: 0s
rules:
  - name: ece_point
    metric: ece
    scope: {{agent: stable}}
    comparison: ">"
    threshold: {threshold}
    window: 1h
    min_samples: 50
    severity: critical
    flapping: {{window: 4h, slot: 15m, start: 0.3, stop: 0.15}}
    annotations: {{summary: "ECE {{value}} above {{threshold}} for {{agent}}"}}
"""


async def test_a_flapping_alert_is_visible_and_notified_once(
    db: tuple[str, AsyncEngine], tmp_path: Path
) -> None:
    """A point-estimate rule whose threshold is the stable agent's median hourly ECE starts
    and stops firing over and over, through the worker's evaluation."""
    url, engine = db
    times = [START + k * STEP for k in range(8, 4 * HOURS)]
    probe = load_rules(FLAPPY.format(threshold=0.5), "flappy.yaml")
    values = sorted([o.value for t in times for o in await observe(engine, probe, t)])
    text_rules = FLAPPY.format(threshold=round(values[len(values) // 2], 4))
    rules: RuleSet = load_rules(text_rules, "flappy.yaml")
    metrics = OpsMetrics()
    marked_at = None
    for i, t in enumerate(times):
        report = await evaluate_once(engine, rules, t, ["webhook"])
        metrics.alerts(report.flapping)
        if report.flapping and marked_at is not None:
            assert report.notifications == []  # held while it flaps
        if report.flapping and marked_at is None:
            assert [n.kind.value for n in report.notifications] == ["flapping"]
            marked_at = i
            assert b'monitor_alerts_flapping{rule="ece_point"} 1.0' in metrics.render()
            [row] = await q(engine, "SELECT rule, flapping, flap_share, summary FROM v_alerts")
            assert row[0] == "ece_point" and row[1] is True and row[2] >= 0.3
            assert "is flapping" in row[3]
            path = tmp_path / "flappy.yaml"
            path.write_text(text_rules)
            args = ["alerts", "list", "--json", "--file", str(path)]
            env = {"MONITOR_DATABASE_URL": url}
            out = await asyncio.to_thread(CliRunner().invoke, app, args, env=env)
            assert out.exit_code == 0, out.output
            [listed] = json.loads(out.output)["alerts"]
            assert listed["rule"] == "ece_point" and listed["flapping"] is True
    assert marked_at is not None
    kinds = [r[0] for r in await q(engine, "SELECT kind FROM alert_history ORDER BY id")]
    first = kinds.index("flapping")
    assert kinds[:first].count("firing") >= 2  # it fired, resolved and fired again
    [(summary,)] = await q(engine, "SELECT summary FROM alert_history WHERE kind = 'flapping'")
    assert summary.startswith("ece_point for stable / qa (tier 3) is flapping: it started or")
    notes = [
        n["kind"]
        for (p,) in await q(engine, "SELECT payload FROM notification_outbox ORDER BY id")
        for n in p["notifications"]
    ]
    assert notes.count("flapping") == kinds.count("flapping") >= 1
