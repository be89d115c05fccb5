"""The judges dashboard's panels give the rows their earlier SQL over ``v_verdicts`` gives.

The panels over verdicts read the per-minute roll-ups of migration 0039 (``v_verdict_minutes``,
``v_verdict_categories``, ``v_verdict_pairs``); :data:`REFERENCE` holds each panel's earlier SQL
over ``v_verdicts`` (categories unnested), read at whole minutes as the panels now promise. On
the seeded database (real conversations judged by the deterministic judges, rubric verdicts,
errors among them), for every scenario of the dashboards' SQL walk (default range, whole
history, each variable at one and two values and at a value that matches nothing) and for
ranges that cut the verdicts in the middle, each panel returns the same rows as its reference.
"Judge latency" shows histogram percentiles: it is compared with
:func:`monitor.judges.latency_buckets.percentile` over the verdicts instead.
"""

from __future__ import annotations

import math
from datetime import timedelta
from fractions import Fraction
from typing import Any

from monitor.judges import latency_buckets as lb
from tests.dashboards import grafana_sql as g
from tests.dashboards.test_dashboard_sql import (
    Scenario,
    resolve_variables,
    run_sql,
    seeded_connection,
    seeded_scenarios,
)
from tests.dashboards.test_dashboards import dashboards
from tests.test_deploy_files import all_panels

#: ``v_verdicts`` at whole minutes: what the panels over the verdict roll-ups promise (a verdict
#: counts when the minute it was written in starts in the range)
MINUTES = """(SELECT date_trunc('minute', time, 'UTC') AS time, verdict_row, conversation_id,
  agent_id, domain, tier, judge, judge_version, status, label, latency_ms, category,
  fabrication_type, outcome_success FROM v_verdicts)"""

#: each rewritten panel's SQL as it was over ``v_verdicts`` (at whole minutes for the panels
#: that now read the roll-ups)
REFERENCE: dict[str, str] = {
    "Verdicts": """
SELECT sum(verdict_row::int) AS "verdicts",
  sum((verdict_row AND status = 'error')::int) AS "errors"
FROM {MINUTES} v
WHERE $__timeFilter(time)
  AND ('__all__' IN ($agent) OR agent_id IN ($agent))
  AND ('__all__' IN ($domain) OR domain IN ($domain))
  AND ('__all__' IN ($tier) OR tier::text IN ($tier))""",
    "Precision of judge flags": """
WITH per_conv AS (
SELECT judge, judge_version, conversation_id, bool_or(label = 0) AS flagged,
  bool_and(NOT outcome_success) AS failed
FROM {MINUTES} v
WHERE verdict_row AND status = 'ok' AND label IS NOT NULL AND outcome_success IS NOT NULL
  AND $__timeFilter(time)
  AND ('__all__' IN ($agent) OR agent_id IN ($agent))
  AND ('__all__' IN ($domain) OR domain IN ($domain))
  AND ('__all__' IN ($tier) OR tier::text IN ($tier))
GROUP BY judge, judge_version, conversation_id)
SELECT (count(*) FILTER (WHERE flagged AND failed))::float
  / NULLIF(count(*) FILTER (WHERE flagged), 0) AS "precision"
FROM per_conv""",
    "Judge error rate": """
SELECT avg((status = 'error')::int) AS "error rate"
FROM {MINUTES} v
WHERE verdict_row
  AND $__timeFilter(time)
  AND ('__all__' IN ($agent) OR agent_id IN ($agent))
  AND ('__all__' IN ($domain) OR domain IN ($domain))
  AND ('__all__' IN ($tier) OR tier::text IN ($tier))""",
    "Verdicts by failure category": """
SELECT category,
  count(*) AS "verdicts"
FROM {MINUTES} v
WHERE category IS NOT NULL AND category NOT LIKE 'fabrication:%'
  AND $__timeFilter(time)
  AND ('__all__' IN ($agent) OR agent_id IN ($agent))
  AND ('__all__' IN ($domain) OR domain IN ($domain))
  AND ('__all__' IN ($tier) OR tier::text IN ($tier))
GROUP BY category
ORDER BY 2 DESC""",
    "Fabrications by type": """
SELECT fabrication_type AS "fabrication type",
  count(*) AS "verdicts"
FROM {MINUTES} v
WHERE fabrication_type IS NOT NULL
  AND $__timeFilter(time)
  AND ('__all__' IN ($agent) OR agent_id IN ($agent))
  AND ('__all__' IN ($domain) OR domain IN ($domain))
  AND ('__all__' IN ($tier) OR tier::text IN ($tier))
GROUP BY 1
ORDER BY 2 DESC""",
    "Judge errors": """
SELECT
  $__timeGroupAlias(time, $__interval),
  judge AS metric,
  count(*) FILTER (WHERE status = 'error') AS "errors"
FROM {MINUTES} v
WHERE verdict_row
  AND $__timeFilter(time)
  AND ('__all__' IN ($agent) OR agent_id IN ($agent))
  AND ('__all__' IN ($domain) OR domain IN ($domain))
  AND ('__all__' IN ($tier) OR tier::text IN ($tier))
GROUP BY 1, 2
ORDER BY 1""",
    "Judges against ground truth": """
WITH base AS (
SELECT * FROM {MINUTES} v
WHERE verdict_row
  AND $__timeFilter(time)
  AND ('__all__' IN ($agent) OR agent_id IN ($agent))
  AND ('__all__' IN ($domain) OR domain IN ($domain))
  AND ('__all__' IN ($tier) OR tier::text IN ($tier))
), per_conv AS (
SELECT judge, judge_version, conversation_id, bool_or(label = 0) AS flagged,
  bool_and(NOT outcome_success) AS failed
FROM base
WHERE status = 'ok' AND label IS NOT NULL AND outcome_success IS NOT NULL
GROUP BY judge, judge_version, conversation_id
), volume AS (
SELECT judge, judge_version, count(*) AS verdicts,
  count(*) FILTER (WHERE status = 'error') AS errors, avg(latency_ms) AS latency
FROM base
GROUP BY judge, judge_version
)
SELECT v.judge, v.judge_version AS version, v.verdicts, v.errors,
  count(p.conversation_id) AS "with outcome",
  count(*) FILTER (WHERE p.flagged) AS flagged,
  (count(*) FILTER (WHERE p.flagged AND p.failed))::float
    / NULLIF(count(*) FILTER (WHERE p.flagged), 0) AS precision,
  (count(*) FILTER (WHERE p.flagged AND p.failed))::float
    / NULLIF(count(*) FILTER (WHERE p.failed), 0) AS recall,
  v.latency AS "mean latency ms"
FROM volume v LEFT JOIN per_conv p USING (judge, judge_version)
GROUP BY v.judge, v.judge_version, v.verdicts, v.errors, v.latency
ORDER BY v.judge, v.judge_version""",
}


def same(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return (math.isnan(a) and math.isnan(b)) or math.isclose(a, b, rel_tol=1e-12, abs_tol=0)
    return bool(a == b)


def key(row: tuple[Any, ...]) -> tuple[str, ...]:
    return tuple(repr(v) for v in row)


async def test_rewritten_judges_panels_return_the_rows_of_their_reference(
    seeded_dashboard_url: str,
) -> None:
    board = dashboards()["monitor-judges"]
    panels = {p["title"]: p for p in all_panels(board)}
    assert set(REFERENCE) <= set(panels)
    checked = 0
    nonempty: set[str] = set()
    async with seeded_connection(seeded_dashboard_url) as conn:
        scenarios = await seeded_scenarios(conn, board)
        lo, hi = await conn.fetchrow("SELECT min(created_at), max(created_at) FROM verdicts")
        third = (hi - lo) / 3
        scenarios += [  # ranges that start or end among the verdicts
            Scenario("first third", g.TimeRange(lo - timedelta(seconds=1), lo + third)),
            Scenario("middle third", g.TimeRange(lo + third, hi - third)),
            Scenario("last third", g.TimeRange(hi - third, hi + timedelta(seconds=1))),
        ]
        for scenario in scenarios:
            problems: list[str] = []
            variables = await resolve_variables(conn, board, scenario, problems)
            assert not problems, problems
            for title, reference in REFERENCE.items():
                old = reference.replace("{MINUTES}", MINUTES)
                panel = panels[title]
                new = panel["targets"][0]["rawSql"]
                assert new != old, f"{title}: not rewritten (drop it from REFERENCE)"
                interval = g.panel_interval_ms(panel, scenario.time_range, None)

                def sql(raw: str) -> str:
                    return g.interpolate(
                        raw,
                        time_range=scenario.time_range,  # noqa: B023 - used in this iteration
                        interval_ms=interval,  # noqa: B023
                        variables=variables,  # noqa: B023
                    )

                want = await run_sql(conn, sql(old))
                got = await run_sql(conn, sql(new))
                where = f"{title} [{scenario.name}]"
                assert got.columns == want.columns, where
                assert got.types == want.types, where
                rows_got = sorted(got.rows, key=key)
                rows_want = sorted(want.rows, key=key)
                assert len(rows_got) == len(rows_want), where
                for a, b in zip(rows_got, rows_want, strict=True):
                    assert all(same(x, y) for x, y in zip(a, b, strict=True)), (where, a, b)
                if any(v not in (None, 0) for r in want.rows for v in r):
                    nonempty.add(title)
                checked += 1
    assert checked == len(REFERENCE) * len(scenarios)
    # the comparison is not vacuous: every panel shows something in some scenario
    assert nonempty == set(REFERENCE), set(REFERENCE) - nonempty


#: the verdicts' latencies per time bucket and judge, as the "Judge latency" panel groups them
LATENCIES = """
SELECT
  $__timeGroupAlias(time, $__interval),
  judge, latency_ms
FROM {MINUTES} v
WHERE verdict_row
  AND $__timeFilter(time)
  AND ('__all__' IN ($agent) OR agent_id IN ($agent))
  AND ('__all__' IN ($domain) OR domain IN ($domain))
  AND ('__all__' IN ($tier) OR tier::text IN ($tier))"""


async def test_judge_latency_panel_shows_the_histogram_percentiles_of_the_verdicts(
    seeded_dashboard_url: str,
) -> None:
    """ "Judge latency" shows, per time bucket and judge, the upper edge of the histogram
    bucket holding the nearest-rank p50 / p95 of the verdicts' latencies
    (:func:`monitor.judges.latency_buckets.percentile` over every verdict of the whole minutes
    of the range): never below that latency and at most one bucket (9.1 %) above it."""
    board = dashboards()["monitor-judges"]
    panel = {p["title"]: p for p in all_panels(board)}["Judge latency"]
    compared = 0
    async with seeded_connection(seeded_dashboard_url) as conn:
        scenarios = await seeded_scenarios(conn, board)
        for scenario in scenarios:
            problems: list[str] = []
            variables = await resolve_variables(conn, board, scenario, problems)
            assert not problems, problems
            interval = g.panel_interval_ms(panel, scenario.time_range, None)

            def sql(raw: str) -> str:
                return g.interpolate(
                    raw,
                    time_range=scenario.time_range,  # noqa: B023 - used in this iteration
                    interval_ms=interval,  # noqa: B023
                    variables=variables,  # noqa: B023
                )

            got = await run_sql(conn, sql(panel["targets"][0]["rawSql"]))
            assert got.columns == ["time", "metric", "p50", "p95"], scenario.name
            raw = await run_sql(conn, sql(LATENCIES.replace("{MINUTES}", MINUTES)))
            groups: dict[tuple[Any, str], list[float]] = {}
            for t, judge, ms in raw.rows:
                groups.setdefault((t, judge), []).append(ms)
            want = {}
            for k, xs in groups.items():
                counts = lb.histogram(xs)
                want[k] = (lb.percentile(counts, 0.5), lb.percentile(counts, 0.95))
                for q, shown in zip((0.5, 0.95), want[k], strict=True):
                    exact = sorted(xs)[math.ceil(Fraction(str(q)) * len(xs)) - 1]
                    assert shown is not None
                    assert exact <= shown <= max(1.0, exact * lb.MAX_RATIO * (1 + 1e-12))
            rows = {(t, m): (p50, p95) for t, m, p50, p95 in got.rows}
            assert len(rows) == len(got.rows), scenario.name
            assert rows == want, scenario.name
            compared += len(want)
    assert compared > 0  # the seeded verdicts show in some scenario: not vacuous
