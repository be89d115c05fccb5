"""Every dashboard's "Firing alerts" table says what each alert's summary says.

For every default rule, an alert fired through the lifecycle and stored as the worker stores it
(state, history) on a real Postgres is shown by each "Firing alerts" panel (its SQL as Grafana
sends it) with the estimate, the bound and the threshold its summary was rendered from, after a
later evaluation moved the state's value (a rule on a lower bound stays firing while its bound
falls: the panels once showed that later value beside the first summary), exactly as
``monitor report``'s alert table shows them.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import asyncpg

from monitor.alerts import repo
from monitor.alerts.lifecycle import Observation, evaluate, render
from monitor.alerts.rules import default_rules
from monitor.analytics.repo import Segment
from monitor.report.html import alert_numbers
from monitor.report.write import firing_alerts
from monitor.store.engine import libpq_url, make_engine
from tests.dashboards import grafana_sql as g
from tests.dashboards.test_dashboard_sql import Scenario, resolve_variables, run_sql
from tests.dashboards.test_dashboards import dashboards
from tests.report.test_report_alerts import T0, breaching, fire, scope_for
from tests.test_deploy_files import all_panels


async def store_fired_alerts(url: str) -> dict[str, Any]:
    """Fire every default rule, move a bound rule's value after its notification, store it;
    the rules by fingerprint."""
    engine = make_engine(url)
    out: dict[str, Any] = {}
    try:
        for rule in default_rules().rules:
            state, notes, at = fire(rule)
            later = state
            if rule.estimate == "lower_bound":
                drop = Observation(
                    rule.name,
                    scope_for(rule),
                    -0.0708,
                    1234.0,
                    at + timedelta(minutes=1),
                    resolve_value=rule.threshold + 0.3,
                    estimate=0.0412,
                )
                later, quiet = evaluate(rule, state, drop, at + timedelta(minutes=1))
                assert later.status.value == "firing" and not quiet, rule.name
            async with engine.begin() as conn:
                assert await repo.save_state(conn, later, None)
                await repo.record_history(conn, notes)
            out[state.fingerprint] = rule
    finally:
        await engine.dispose()
    return out


async def panel_rows(conn: asyncpg.Connection, board: dict[str, Any]) -> list[dict[str, Any]]:
    [panel] = [p for p in all_panels(board) if p["title"] == "Firing alerts"]
    scenario = Scenario("everything", g.TimeRange(T0 - timedelta(days=1), T0 + timedelta(days=1)))
    problems: list[str] = []
    variables = await resolve_variables(conn, board, scenario, problems)
    assert not problems, problems
    sql = g.interpolate(
        panel["targets"][0]["rawSql"],
        time_range=scenario.time_range,
        interval_ms=60000,
        variables=variables,
    )
    result = await run_sql(conn, sql)
    return [dict(zip(result.columns, r, strict=True)) for r in result.rows]


async def test_firing_alert_panels_show_the_numbers_of_their_summary(database_url: str) -> None:
    rules = await store_fired_alerts(database_url)
    engine = make_engine(database_url)
    try:  # the report's table, the reference
        report = {a["fingerprint"]: a for a in await firing_alerts(engine, Segment())}
    finally:
        await engine.dispose()
    conn = await asyncpg.connect(libpq_url(database_url))
    try:
        fps = {
            (r["rule"], r["agent_id"]): r["fingerprint"]
            for r in await conn.fetch("SELECT rule, agent_id, fingerprint FROM v_alerts")
        }
        boards = [
            d
            for d in dashboards().values()
            if any(p["title"] == "Firing alerts" for p in all_panels(d))
        ]
        assert len(boards) >= 5
        for board in boards:
            rows = await panel_rows(conn, board)
            assert len(rows) == len(rules), board["uid"]
            for row in rows:
                fp = fps[(row["rule"], row["agent"])]
                rule, want = rules[fp], report[fp]
                estimate, bound = alert_numbers(want)
                assert (row["estimate"], row["99% bound"]) == (estimate, bound), rule.name
                assert row["threshold"] == want["threshold"] == rule.threshold
                assert row["items"] == want["samples"]
                assert row["as of"] == want["notified_at"]
                assert row["summary"] == want["summary"]
                # the summary is the rule's template rendered with the numbers shown beside it
                bounded = rule.estimate == "lower_bound"
                context = {
                    "rule": rule.name,
                    "value": f"{bound if bounded else estimate:.4g}",
                    "estimate": f"{estimate:.4g}",
                    "threshold": f"{row['threshold']:g}",
                    "samples": f"{row['items']:g}",
                }
                scope = scope_for(rule)
                context.update({k: scope.get(k, "all") for k in ("agent", "domain", "tier")})
                assert render(rule.annotations.summary, context) == row["summary"], rule.name
                if bounded:  # the bound that fired, not the state's later -0.0708
                    assert bound == breaching(rule) and bound != -0.0708, rule.name
                    assert estimate == breaching(rule) + 0.0987, rule.name
                else:
                    assert bound is None and estimate == breaching(rule), rule.name
    finally:
        await conn.close()


async def test_an_alert_not_notified_in_its_episode_shows_no_numbers(database_url: str) -> None:
    """A firing alert whose episode sent nothing (silenced, flapping) shows empty numbers, not
    an earlier episode's."""
    rules = await store_fired_alerts(database_url)
    fp = next(iter(rules))
    conn = await asyncpg.connect(libpq_url(database_url))
    try:  # a later episode: fired after every stored notification
        await conn.execute(
            "UPDATE alert_states SET state = jsonb_set(state, '{fired_at}', to_jsonb($2::text))"
            " WHERE fingerprint = $1",
            fp,
            (T0 + timedelta(days=2)).isoformat(),
        )
        row = await conn.fetchrow(
            "SELECT estimate, bound, samples, notified_at, summary, threshold FROM v_alerts"
            " WHERE fingerprint = $1",
            fp,
        )
    finally:
        await conn.close()
    assert row is not None
    assert (row["estimate"], row["bound"], row["samples"], row["notified_at"]) == (None,) * 4
    assert row["summary"] is not None and row["threshold"] == rules[fp].threshold
