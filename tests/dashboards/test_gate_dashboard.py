"""The gate dashboard (dashboards/gate.json) on real Postgres: its numbers on data whose answers
are worked out by hand, and its effectiveness table against `monitor gate --json` on gated
traffic decided by the shipped gate code (tests/dashboards/seed_gate.py). The generic checks
(every query runs, shapes, variables) are in test_dashboard_sql.py."""

from __future__ import annotations

import asyncio
import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from monitor.contract.events import AgentEvent, validate_event
from monitor.ingest.rows import event_row
from monitor.ingest.writer import EventWriter
from monitor.store.engine import libpq_url
from tests.dashboards import grafana_sql as g
from tests.dashboards.seed_gate import gated_events
from tests.dashboards.test_dashboard_sql import Scenario, resolve_variables, run_sql
from tests.factories import T0, event_dict
from tests.gate.test_effect import gate_json
from tests.test_deploy_files import all_panels

DASHBOARD = json.loads((Path(__file__).parents[2] / "dashboards" / "gate.json").read_text())
RANGE = g.TimeRange(T0 - timedelta(days=1), T0 + timedelta(days=1))


async def write(url: str, events: list[AgentEvent]) -> None:
    w = EventWriter(url)
    try:
        await w.write([event_row(e) for e in events])
    finally:
        await w.close()


async def panel(
    conn: asyncpg.Connection,
    title: str,
    tr: g.TimeRange = RANGE,
    selection: dict[str, tuple[str, ...]] | None = None,
) -> list[dict[str, Any]]:
    """The rows of the panel's query as Grafana would send it (variables resolved)."""
    p = next(p for p in all_panels(DASHBOARD) if p["title"] == title)
    problems: list[str] = []
    variables = await resolve_variables(
        conn, DASHBOARD, Scenario("s", tr, selection or {}), problems
    )
    assert not problems, problems
    sql = g.interpolate(
        p["targets"][0]["rawSql"],
        time_range=tr,
        interval_ms=g.panel_interval_ms(p, tr, None),
        variables=variables,
    )
    result = await run_sql(conn, sql)
    return [dict(zip(result.columns, row, strict=True)) for row in result.rows]


# conversation: agent, domain, [decisions oldest first], outcome success (None: none yet)
KNOWN = {
    "c1": ("agent-a", "retail", ["proceed"], True),
    "c2": ("agent-a", "retail", ["proceed"], False),
    "c3": ("agent-a", "retail", ["proceed"], True),
    "c4": ("agent-a", "retail", ["revise"], False),
    "c5": ("agent-a", "retail", ["revise"], True),
    "c6": ("agent-a", "retail", ["escalate"], False),
    "c7": ("agent-a", "retail", ["escalate"], None),
    "c8": ("agent-a", "retail", ["escalate", "proceed"], True),  # the latest decision counts
    "c9": ("agent-b", "airline", ["proceed"], True),  # decided by fail-open (degraded)
    "c10": ("agent-b", "airline", ["escalate"], False),
    "c11": ("agent-a", "retail", ["escalate"], False),  # shadow: the agent proceeded, failed
    "c12": ("agent-a", "retail", ["proceed"], True),  # shadow
}
SHADOW = {"c11", "c12"}  # decided by a rule in shadow mode (enforced: false)


def known_events() -> list[AgentEvent]:
    out = []
    n = 0
    for cid, (agent, domain, decisions, success) in KNOWN.items():
        ctx = {"domain": domain, "tier": 2}
        out.append(validate_event(event_dict(f"{cid}:m", cid, at=n, agent=agent, context=ctx)))
        for d in decisions:
            n += 1
            out.append(
                validate_event(
                    event_dict(
                        f"gate:{cid}:{d}",
                        cid,
                        "gate",
                        at=n,
                        agent=agent,
                        context=ctx,
                        decision=d,
                        latency_ms=float(n),
                        degraded="fail open: checks took 61 ms, deadline 50 ms"
                        if cid == "c9"
                        else None,
                        enforced=cid not in SHADOW,
                    )
                )
            )
        if success is not None:
            out.append(
                validate_event(
                    event_dict(
                        f"{cid}:o",
                        cid,
                        "outcome",
                        at=n + 0.5,
                        agent=agent,
                        context=ctx,
                        success=success,
                    )
                )
            )
    return out


async def test_gate_panels_give_the_worked_out_numbers(database_url: str) -> None:
    await write(database_url, known_events())
    conn = await asyncpg.connect(libpq_url(database_url))
    try:
        # agent-a/retail, latest decisions: proceed c1 c2 c3 c8, revise c4 c5, escalate c6 c7;
        # outcomes known for 7 (not c7), failed c2 c4 c6; agent-b/airline: proceed c9 (ok),
        # escalate c10 (failed); shadow (agent-a/retail): escalate c11 (failed), proceed c12 (ok)
        # count only in the shadow rows
        (esc,) = await panel(conn, "Escalation rate (human cost)")
        assert esc["escalation rate"] == pytest.approx(3 / 10)  # c6 c7 c10
        (prevented,) = await panel(conn, "Failures prevented")
        assert prevented["failures prevented"] == pytest.approx(3 / 4)  # c4 c6 c10 of 4 failed
        (rates,) = await panel(conn, "Failure rate: proceeded vs all")
        assert rates["proceeded"] == pytest.approx(1 / 5) and rates["all"] == pytest.approx(4 / 9)
        (degraded,) = await panel(conn, "Degraded answers (fail-open/closed)")
        assert degraded["degraded share"] == pytest.approx(1 / 13)  # c8 has two decisions
        rows = await panel(conn, "Gate effectiveness per agent x domain x mode")
        assert [(r["agent"], r["mode"]) for r in rows] == [
            ("agent-a", "enforced"),
            ("agent-a", "shadow"),
            ("agent-b", "enforced"),
        ]
        table = {(r["agent"], r["mode"]): r for r in rows}
        a, b = table["agent-a", "enforced"], table["agent-b", "enforced"]
        shadow = table["agent-a", "shadow"]
        assert (shadow["conversations"], shadow["proceed"], shadow["escalate"]) == (2, 1, 1)
        assert shadow["escalation rate"] == pytest.approx(1 / 2)  # what enforcing would cost
        assert shadow["failures prevented"] == 1  # c11's failure: enforcing would stop it
        assert shadow["failure rate proceeded"] == 0 and shadow["failure rate all"] == 0.5
        assert (
            a["domain"],
            a["conversations"],
            a["proceed"],
            a["revise"],
            a["escalate"],
            a["with outcome"],
        ) == ("retail", 8, 4, 2, 2, 7)
        assert a["escalation rate"] == pytest.approx(2 / 8)
        assert a["failure rate all"] == pytest.approx(3 / 7)
        assert a["failure rate proceeded"] == pytest.approx(1 / 4)
        assert a["failures prevented"] == pytest.approx(2 / 3)
        assert a["relative reduction"] == pytest.approx(1 - (1 / 4) / (3 / 7))
        # Wilson 95 % of 2/3: centre (p + z2/2n) / (1 + z2/n), n = 3
        z2 = 1.959963984540054**2
        centre = (2 / 3 + z2 / 6) / (1 + z2 / 3)
        half = 1.959963984540054 / (1 + z2 / 3) * ((2 / 9) / 3 + z2 / 36) ** 0.5
        assert a["prevented low"] == pytest.approx(centre - half)
        assert a["prevented high"] == pytest.approx(centre + half)
        assert (b["conversations"], b["proceed"], b["escalate"]) == (2, 1, 1)
        assert b["failure rate proceeded"] == 0 and b["failures prevented"] == 1
        assert b["prevented high"] == 1.0  # clipped like wilson_interval
        revise = {r["agent"]: r for r in await panel(conn, "Revise outcomes per agent x domain")}
        assert (revise["agent-a"]["revised"], revise["agent-a"]["revised and failed"]) == (2, 1)
        assert revise["agent-a"]["revise failure rate"] == pytest.approx(0.5)
        assert revise["agent-b"]["revised"] == 0
        assert revise["agent-b"]["revise failure rate"] is None
        series = await panel(conn, "Decisions by kind over time per agent x domain")
        assert sum(r["decisions"] for r in series) == 13
        by_metric: dict[str, int] = {}
        for r in series:
            by_metric[r["metric"]] = by_metric.get(r["metric"], 0) + r["decisions"]
        assert by_metric == {
            "agent-a / retail: proceed": 4,
            "agent-a / retail: revise": 2,
            "agent-a / retail: escalate": 3,
            "agent-b / airline: proceed": 1,
            "agent-b / airline: escalate": 1,
            "agent-a / retail: escalate (shadow)": 1,
            "agent-a / retail: proceed (shadow)": 1,
        }
        rates = {
            r["metric"]: r["escalation rate"]
            for r in await panel(conn, "Escalation rate over time per agent x domain")
        }
        assert rates["agent-a / retail (shadow)"] == pytest.approx(1 / 2)
        kinds = {
            r["agent"]: r
            for r in await panel(conn, "Degraded decisions by kind per agent x domain")
        }
        # c9 failed open past its deadline; agent-a's 9 enforced decisions (c8 has two) did not
        assert (kinds["agent-b"]["enforced decisions"], kinds["agent-b"]["failed open"]) == (2, 1)
        assert kinds["agent-b"]["past deadline"] == 1 and kinds["agent-b"]["failed closed"] == 0
        assert kinds["agent-b"]["fail-open share"] == pytest.approx(1 / 2)
        assert (kinds["agent-a"]["enforced decisions"], kinds["agent-a"]["failed open"]) == (9, 0)
        assert kinds["agent-a"]["fail-open share"] == 0
        latency = await panel(conn, "Gate latency")
        assert max(r["p99"] for r in latency) <= 13 and min(r["p50"] for r in latency) >= 1
        # a selection restricts: only agent-b
        (only_b,) = await panel(
            conn, "Escalation rate (human cost)", selection={"agent": ("agent-b",)}
        )
        assert only_b["escalation rate"] == pytest.approx(1 / 2)
    finally:
        await conn.close()


async def test_ungated_baseline_panel_gives_the_worked_out_numbers(database_url: str) -> None:
    ungated = []
    # agent-a/retail conversations that never asked the gate: 3 failed, 1 ok, 1 no outcome
    for i, ok in enumerate([False, False, True, False, None]):
        ctx = {"domain": "retail", "tier": 2}
        ungated.append(event_dict(f"u{i}:m", f"u{i}", at=100 + i, context=ctx))
        if ok is not None:
            ungated.append(
                event_dict(f"u{i}:o", f"u{i}", "outcome", at=100.5 + i, context=ctx, success=ok)
            )
    # an agent that never asked the gate has no baseline row; an ungated conversation before
    # the range is not counted
    ungated.append(event_dict("n1:m", "n1", at=5, agent="agent-n", context={"domain": "retail"}))
    ungated.append(event_dict("old:m", "old", at=-3 * 86400, context={"domain": "retail"}))
    await write(database_url, known_events() + [validate_event(e) for e in ungated])
    conn = await asyncpg.connect(libpq_url(database_url))
    try:
        rows = await panel(conn, "Ungated baseline per agent x domain")
    finally:
        await conn.close()
    assert len(rows) == 1  # agent-b/airline has no ungated conversation, agent-n no decision
    (a,) = rows
    assert (a["agent"], a["domain"], a["ungated conversations"], a["ungated with outcome"]) == (
        "agent-a",
        "retail",
        5,
        4,
    )
    assert a["failure rate ungated"] == pytest.approx(3 / 4)
    assert a["failure rate proceeded"] == pytest.approx(1 / 4)  # c2 of c1 c2 c3 c8
    assert a["reduction vs ungated"] == pytest.approx(1 - (1 / 4) / (3 / 4))


def test_effectiveness_table_agrees_with_monitor_gate_json(database_url: str) -> None:
    """Enforced and shadow rows (every 5th conversation decided in shadow mode) both equal
    `monitor gate --json` (sources recorded and shadow)."""
    events, decisions = gated_events(T0, 240, ungated_every=4, shadow_every=5)
    asyncio.run(write(database_url, events))
    assert {"proceed", "revise", "escalate"} <= set(decisions.values())
    out = gate_json(
        database_url,
        "--no-replay",
        "--from",
        RANGE.start.isoformat(),
        "--to",
        RANGE.end.isoformat(),
    )
    mode = {"recorded": "enforced", "shadow": "shadow"}
    effects = out["effects"]
    cli = {(e["agent_id"], e["domain"], mode[e["source"]]): e for e in effects}

    async def rows(title: str) -> list[dict[str, Any]]:
        conn = await asyncpg.connect(libpq_url(database_url))
        try:
            return await panel(conn, title)
        finally:
            await conn.close()

    table = {
        (r["agent"], r["domain"], r["mode"]): r
        for r in asyncio.run(rows("Gate effectiveness per agent x domain x mode"))
    }
    base = {
        (r["agent"], r["domain"], "enforced"): r
        for r in asyncio.run(rows("Ungated baseline per agent x domain"))
    }
    assert base and set(base) <= set(cli)
    for key, e in cli.items():
        if key not in base:
            assert e["ungated_conversations"] == 0, key
            continue
        r = base[key]
        assert r["ungated conversations"] == e["ungated_conversations"] > 0
        assert r["ungated with outcome"] == e["failure_rate_ungated"]["n"]
        assert r["failure rate ungated"] == pytest.approx(
            e["failure_rate_ungated"]["value"], abs=1e-12
        )
        assert r["failure rate proceeded"] == pytest.approx(
            e["failure_rate_proceeded"]["value"], abs=1e-12
        )
        assert r["reduction vs ungated"] == pytest.approx(e["reduction_vs_ungated"], abs=1e-12)
    assert set(table) == set(cli) and len(table) == 6  # 3 agents x (enforced, shadow)
    shadow = [e for k, e in cli.items() if k[2] == "shadow"]
    # the shadow rows carry outcomes: what enforcing would have prevented and cost
    assert sum(e["failures_prevented"]["k"] for e in shadow) > 0
    assert sum(e["decisions"]["escalate"] for e in shadow) > 0
    for key, e in cli.items():
        r = table[key]
        assert r["conversations"] == e["conversations"]
        assert [r[d] for d in ("proceed", "revise", "escalate")] == [
            e["decisions"][d] for d in ("proceed", "revise", "escalate")
        ]
        assert r["with outcome"] == e["with_outcome"]
        for col, name in (
            ("escalation rate", "escalation_rate"),
            ("failure rate all", "failure_rate_all"),
            ("failure rate proceeded", "failure_rate_proceeded"),
            ("failures prevented", "failures_prevented"),
        ):
            assert r[col] == pytest.approx(e[name]["value"], abs=1e-12), (key, col)
        assert r["prevented low"] == pytest.approx(e["failures_prevented"]["low"], abs=1e-9)
        assert r["prevented high"] == pytest.approx(e["failures_prevented"]["high"], abs=1e-9)
        assert r["relative reduction"] == pytest.approx(e["relative_reduction"], abs=1e-12)
