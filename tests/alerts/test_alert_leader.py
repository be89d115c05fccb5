"""Leader election of the alert evaluator, and the observations of the metrics that do not come
from calibration bins (consumer lag, judge failure categories, DLQ rate), on real Postgres."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from monitor.alerts import evaluate as ev
from monitor.alerts.observations import observe
from monitor.alerts.rules import RuleSet, load_rules
from monitor.alerts.states import fingerprint
from monitor.core.clock import FixedClock
from monitor.ingest.rows import DeadLetter, event_row
from monitor.ingest.writer import EventWriter
from monitor.sim.traffic import Simulator
from monitor.store.engine import make_engine

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
SINKS = ("slack", "webhook")
MIN = timedelta(minutes=1)
RULES = load_rules(
    """
group_wait: 0s
rules:
  - {name: lag, metric: consumer_lag, comparison: ">", threshold: 100, window: 5m,
     severity: warning, annotations: {summary: "lag {value}"}}
  - {name: auth, metric: judge_failure_rate, category: "fabrication:authorization",
     comparison: ">", threshold: 0, window: 15m, severity: critical, annotations: {summary: a}}
  - {name: fab, metric: judge_failure_rate, category: fabrication, scope: {agent: "bill*"},
     comparison: ">", threshold: 0.5, window: 15m, severity: warning, annotations: {summary: f}}
  - {name: dlq, metric: dlq_rate, comparison: ">", threshold: 0.05, window: 5m,
     severity: warning, annotations: {summary: d}}
""",
    "rules.yaml",
)


def only(name: str) -> RuleSet:
    return RULES.model_copy(update={"rules": (RULES.rule(name),)})


@pytest.fixture
async def engine(database_url: str) -> AsyncIterator[AsyncEngine]:
    eng = make_engine(database_url)
    yield eng
    await eng.dispose()


async def q(engine: AsyncEngine, sql: str, **params: Any) -> list[Any]:
    async with engine.connect() as conn:
        return list((await conn.execute(text(sql), params)).all())


def recorder(seen: list[str], name: str) -> Callable[[ev.EvaluationReport], None]:
    return lambda _report: seen.append(name)


# advisory locks are per database; other tests' workers on the same server hold their own
THIS_DB = " AND database = (SELECT oid FROM pg_database WHERE datname = current_database())"


async def test_one_leader_evaluates_and_another_takes_over_when_it_dies(
    engine: AsyncEngine,
) -> None:
    rs, clock = only("lag"), FixedClock(T0)
    seen: list[str] = []
    stops = {"a": asyncio.Event(), "b": asyncio.Event()}
    tasks = {
        name: asyncio.create_task(
            ev.run(
                engine,
                rs,
                SINKS,
                stop,
                0.05,
                clock,
                lag=lambda: 500.0,
                on_report=recorder(seen, name),
            )
        )
        for name, stop in stops.items()
    }
    await asyncio.sleep(1.0)
    assert len(seen) >= 5 and len(set(seen)) == 1  # one leader evaluates, the other waits
    leader = seen[0]
    follower = "b" if leader == "a" else "a"
    # the leader dies hard: its lock session is killed, then its task is gone
    held = await q(
        engine,
        "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted"
        " AND (classid::bigint << 32) + objid::bigint = :k" + THIS_DB,
        k=ev.LEADER_LOCK,
    )
    assert len(held) == 1
    await q(engine, "SELECT pg_terminate_backend(:pid)", pid=held[0][0])
    tasks[leader].cancel()
    seen.clear()
    await asyncio.sleep(1.0)
    assert seen and set(seen) == {follower}
    stops[follower].set()
    await asyncio.wait_for(tasks[follower], 5)
    assert await q(
        engine, "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'" + THIS_DB
    ) == [(0,)]
    # evaluated many times by two leaders: one page, one row per sink
    rows = await q(engine, "SELECT sink, payload FROM notification_outbox ORDER BY id")
    assert [r[0] for r in rows] == list(SINKS)
    (n,) = rows[0][1]["notifications"]
    assert (n["kind"], n["fingerprint"], n["value"]) == ("firing", fingerprint("lag", {}), 500.0)


async def test_consumer_lag_needs_a_source(engine: AsyncEngine) -> None:
    assert await observe(engine, only("lag"), T0) == []
    assert await observe(engine, only("lag"), T0, lag=lambda: None) == []
    (o,) = await observe(engine, only("lag"), T0, lag=lambda: 42.0)
    assert (o.value, o.scope, o.at) == (42.0, {}, T0)


async def test_judge_failure_rate_by_category(engine: AsyncEngine) -> None:
    verdicts = [  # (agent, status, categories, minutes before T0)
        ("billing", "ok", '["fabrication:authorization"]', 1),
        ("billing", "ok", '["fabrication"]', 2),
        ("billing", "ok", "[]", 3),
        ("billing", "error", '["fabrication:authorization"]', 4),  # errors are not judged items
        ("billing", "ok", '["fabrication:authorization"]', 20),  # outside the 15m window
        ("shop", "ok", "[]", 5),
    ]
    async with engine.begin() as conn:
        for i, (agent, status, cats, ago) in enumerate(verdicts):
            await conn.execute(
                text(
                    "INSERT INTO verdicts (conversation_id, agent_id, judge, judge_version,"
                    " status, categories, created_at) VALUES (:c, :a, 'j', '1', :s,"
                    " CAST(:cats AS jsonb), :at)"
                ),
                {"c": f"c{i}", "a": agent, "s": status, "cats": cats, "at": T0 - ago * MIN},
            )
    found = await observe(engine, RULES, T0)
    obs = {(o.rule, o.scope["agent"]): o for o in found if o.rule in ("auth", "fab")}
    assert set(obs) == {("auth", "billing"), ("auth", "shop"), ("fab", "billing")}
    assert obs["auth", "billing"].value == pytest.approx(1 / 3)
    assert obs["auth", "billing"].samples == 3
    assert obs["auth", "shop"].value == 0.0
    assert obs["fab", "billing"].value == pytest.approx(2 / 3)  # sub-kinds count
    r = await ev.evaluate_once(engine, only("auth"), T0, SINKS)
    assert r.firing == [fingerprint("auth", {"agent": "billing"})] and r.outbox_rows == 2


async def test_dlq_rate(engine: AsyncEngine, database_url: str) -> None:
    events = list(Simulator(3, T0).events(3))
    dead = [DeadLetter("agent-events", 0, i, "not_json", None, "bad", b"{") for i in range(2)]
    w = EventWriter(database_url)
    try:
        await w.write([event_row(e) for e in events], dead)
    finally:
        await w.close()
    now = datetime.now(UTC) + timedelta(seconds=1)  # ingestion time is the database's clock
    (o,) = await observe(engine, only("dlq"), now)
    assert o.value == pytest.approx(2 / (len(events) + 2)) and o.samples == len(events) + 2
    (late,) = await observe(engine, only("dlq"), now + timedelta(minutes=10))
    assert (late.value, late.samples) == (None, 0)
