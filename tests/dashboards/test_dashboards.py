"""The dashboards' contract: the views, the dashboards' shape, their annotations on a
seeded database, and `monitor dashboards push` against a real HTTP server speaking Grafana's API.

Every panel query is run on a seeded Postgres by tests/dashboards/test_dashboard_sql.py;
here: what that
generic checker does not cover (annotation queries, the views' numbers against the CLI's,
migrations of the views, links and variables the alert messages rely on).
"""

from __future__ import annotations

import asyncio
import copy
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import asyncpg
import pytest
import typer
from typer.testing import CliRunner

from monitor.analytics import reports as fa
from monitor.analytics.repo import Segment
from monitor.cli import dashboards as dashboards_cmd
from monitor.dashboards import push as gp
from monitor.store.engine import downgrade, libpq_url, make_engine, upgrade
from tests.dashboards import grafana_sql as g
from tests.dashboards.test_dashboard_sql import (
    NOTHING,
    Scenario,
    resolve_variables,
    run_sql,
)
from tests.db import fetch
from tests.servers.grafana_server import FakeGrafana
from tests.test_deploy_files import DASHBOARDS, all_panels, dashboard_files

UIDS = {
    "monitor-calibration",
    "monitor-conversation",
    "monitor-drift",
    "monitor-escalation",
    "monitor-gate",
    "monitor-judges",
    "monitor-pipeline",
}
VIEWS = {
    "v_calibration_bins",
    "v_calibration_windows",
    "v_calibration_maps",
    "v_escalation_conversations",
    "v_escalation_bins",
    "v_drift_checks",
    "v_verdicts",
    "v_verdict_rows",
    "v_verdict_minutes",
    "v_verdict_categories",
    "v_verdict_pairs",
    "v_verdict_truth_minutes",
    "v_verdict_truth",
    "v_judge_labelling",
    "v_alerts",
    "v_alert_annotations",
    "v_pipeline",
    "v_event_minutes",
    "v_gate_decisions",
    "v_conversations",
    "v_conversation_events",
    "v_conversation_verdicts",
}
EXAMPLES = {  # dashboard -> the function its "Examples" panel reads
    "monitor-calibration": "examples_calibration",
    "monitor-drift": "examples_drift",
    "monitor-escalation": "examples_escalation",
    "monitor-judges": "examples_judges",
}
# what panels may read: the views, and escalation_bins_in (a SQL function over v_escalation_bins)
READABLE = VIEWS | {"escalation_bins_in", "calibration_bins_in", *EXAMPLES.values()}


def dashboards() -> dict[str, dict[str, Any]]:
    return {d["uid"]: d for d in (json.loads(p.read_text()) for p in dashboard_files())}


# --- static shape -----------------------------------------------------------------------------


def test_every_dashboard_is_there_with_scope_variables_and_alerts() -> None:
    found = dashboards()
    assert set(found) == UIDS
    for uid, d in found.items():
        assert d["schemaVersion"] == 39, uid
        ids = [p["id"] for p in all_panels(d)]
        assert len(ids) == len(set(ids)), uid
        if uid == "monitor-conversation":  # one conversation, whenever it happened
            (v,) = d["templating"]["list"]
            assert v["name"] == "conversation" and v["type"] == "textbox"
            assert not v.get("skipUrlSync")  # /d/monitor-conversation/..?var-conversation=ID
            continue
        names = [v["name"] for v in d["templating"]["list"]]
        assert names == ["agent", "domain", "tier"], uid  # /d/<uid>?var-agent=..&var-domain=..
        for v in d["templating"]["list"]:
            assert v["type"] == "query" and v["multi"] and v["includeAll"], (uid, v["name"])
            assert not v.get("skipUrlSync"), (uid, v["name"])  # the URL must set them
        annotations = [a for a in d["annotations"]["list"] if a.get("target")]
        assert any("v_alert_annotations" in a["target"]["rawSql"] for a in annotations), uid
        assert (
            any(
                p["type"] == "table" and "FROM v_alerts" in p["targets"][0]["rawSql"]
                for p in all_panels(d)
            )
            or uid == "monitor-judges"
        ), uid
        assert any(link.get("includeVars") and link.get("keepTime") for link in d["links"]), uid


def test_issue_panels_exist() -> None:
    titles = {uid: {p["title"] for p in all_panels(d)} for uid, d in dashboards().items()}
    assert {
        "ECE over time per agent",
        "ECE over time per tier",
        "Brier score over time per agent",
        "Reliability diagram (selected range)",
        "Confidence histogram (selected range)",
        "Raw vs recalibrated ECE",
        "Firing alerts",
    } <= titles["monitor-calibration"]
    assert {"ECE: recent vs baseline", "p-values of the drift tests", "Drift checks"} <= titles[
        "monitor-drift"
    ]
    assert {
        "Escalation rate by confidence bin",
        "Threshold curve",
        "Time to escalation per agent",
        "Missed escalations",
    } <= titles["monitor-escalation"]
    for uid in EXAMPLES:
        assert "Examples" in titles[uid], uid
    assert {"Conversation", "Sample decision", "Transcript", "Verdicts", "Gate decisions"} == (
        titles["monitor-conversation"]
    )
    assert {
        "Verdicts by failure category",
        "Fabrications by type",
        "Judge latency",
        "Judge errors",
        "Judges against ground truth",
        "Judge labelling per scope",
    } <= titles["monitor-judges"]
    reliability = next(
        p
        for p in all_panels(dashboards()["monitor-calibration"])
        if p["title"].startswith("Reliability")
    )
    assert "diagonal (perfect calibration)" in reliability["targets"][0]["rawSql"]


def test_panels_read_views_not_tables() -> None:
    """New dashboards query only the views (the pipeline keeps its raw-table panels)."""
    for uid, d in dashboards().items():
        if uid == "monitor-pipeline":
            continue
        for p in all_panels(d):
            sql = p["targets"][0]["rawSql"]
            readable = any(f"FROM {v}" in sql or f"JOIN {v}" in sql for v in READABLE)
            assert readable, (uid, p["title"])


# --- views, migrations ------------------------------------------------------------------------


async def views(url: str) -> set[str]:
    conn = await asyncpg.connect(libpq_url(url))
    try:
        rows = await conn.fetch("SELECT viewname FROM pg_views WHERE schemaname = 'public'")
    finally:
        await conn.close()
    return {r["viewname"] for r in rows}


async def test_views_migrate_down_and_up(database_url: str) -> None:
    assert await views(database_url) == VIEWS
    await asyncio.to_thread(downgrade, database_url, "0004")
    assert await views(database_url) == set()
    await asyncio.to_thread(upgrade, database_url, "head")
    assert await views(database_url) == VIEWS


@pytest.fixture
def seeded(seeded_dashboard_url: str) -> str:
    """A database seeded with the dashboards' data (tests/dashboards/seed.py)."""
    return seeded_dashboard_url


ECE_SQL = """
SELECT agent_id, ({}) / sum(weight) AS ece, sum(sum_sq_err) / sum(weight) AS brier
FROM v_calibration_windows WHERE resolution = '1m' AND window_start >= $1 AND window_start < $2
GROUP BY agent_id ORDER BY agent_id"""


async def test_window_view_rolls_up_to_the_cli_numbers(seeded: str) -> None:
    """Σ-then-ECE over v_calibration_windows rows equals flows.analytics.calibration (the CLI)."""
    end = datetime.now(UTC).replace(second=0, microsecond=0) + timedelta(minutes=1)
    start = end - timedelta(hours=2)
    engine = make_engine(seeded)
    try:
        reports = await fa.calibration(engine, Segment(), start, end, n_boot=10)
    finally:
        await engine.dispose()
    terms = " + ".join(f"abs(coalesce(sum(d{b}), 0))" for b in range(10))
    conn = await asyncpg.connect(libpq_url(seeded))
    try:
        rows = await conn.fetch(ECE_SQL.format(terms), start, end)
    finally:
        await conn.close()
    assert {r["agent_id"] for r in rows} == set(reports) - {fa.ALL}
    for r in rows:
        assert r["ece"] == pytest.approx(reports[r["agent_id"]].ece, abs=1e-9)
        assert r["brier"] == pytest.approx(reports[r["agent_id"]].brier, abs=1e-9)
    assert reports["sim-retail-overconfident"].ece > 0.2  # the seeded data mean something


async def judgements_and_panels(url: str, *titles: str) -> tuple[list[Any], dict[str, Any]]:
    """Every stored conversation judgement (:func:`monitor.judges.stats.conversation_judgements`
    over all time) and the results of the judges dashboard's panels ``titles`` over all time
    with everything selected."""
    from monitor.judges.stats import conversation_judgements

    lo, hi = datetime(2000, 1, 1, tzinfo=UTC), datetime.now(UTC) + timedelta(days=1)
    engine = make_engine(url)
    try:
        judged = await conversation_judgements(engine, Segment(), lo, hi)
    finally:
        await engine.dispose()
    board = dashboards()["monitor-judges"]
    panels = {p["title"]: p for p in all_panels(board)}
    scenario = Scenario("everything", g.TimeRange(lo, hi))
    conn = await asyncpg.connect(libpq_url(url))
    try:
        problems: list[str] = []
        variables = await resolve_variables(conn, board, scenario, problems)
        assert not problems, problems
        out = {}
        for title in titles:
            sql = g.interpolate(
                panels[title]["targets"][0]["rawSql"],
                time_range=scenario.time_range,
                interval_ms=60000,
                variables=variables,
            )
            out[title] = await run_sql(conn, sql)
    finally:
        await conn.close()
    return judged, out


async def test_judges_panels_measure_precision_like_the_cli(seeded: str) -> None:
    """The judges dashboard's precision and recall are the conversation-level ones of
    `monitor judges` (a passing check is not "judge says correct"; verdicts on a
    message are not paired one by one with the conversation's outcome)."""
    from monitor.judges.quality import ANY_DETERMINISTIC, ANY_JUDGE, judge_quality

    judged, got = await judgements_and_panels(
        seeded, "Judges against ground truth", "Precision of judge flags"
    )
    table, stat = got["Judges against ground truth"], got["Precision of judge flags"]
    want = {
        (q.judge, q.judge_version): q
        for q in judge_quality(judged)
        if q.category is None and q.judge not in (ANY_DETERMINISTIC, ANY_JUDGE)
    }
    rows = [dict(zip(table.columns, r, strict=True)) for r in table.rows]
    flagged_any = False
    for r in rows:
        q = want.get((r["judge"], r["version"]))
        if q is None:  # no verdict of this judge has an outcome to compare with
            assert r["with outcome"] == 0
            continue
        assert r["with outcome"] == q.pairs
        assert r["flagged"] == q.true_pos + q.false_pos
        flagged_any = flagged_any or r["flagged"] > 0
        for col, prop in (("precision", q.precision), ("recall", q.recall)):
            if prop.value is None:
                assert r[col] is None
            else:
                assert r[col] == pytest.approx(prop.value, abs=1e-12)
    assert flagged_any  # the seeded judges flag something: the comparison is not vacuous
    tp = sum(q.true_pos for q in want.values())
    flagged = sum(q.true_pos + q.false_pos for q in want.values())
    assert stat.rows[0][0] == pytest.approx(tp / flagged, abs=1e-12)


async def test_alert_tables_name_the_incident_of_each_alert(seeded: str) -> None:
    """Every dashboard's "Firing alerts" table shows which incident each alert joined."""
    conn = await asyncpg.connect(libpq_url(seeded))
    try:
        now = await conn.fetchval("SELECT clock_timestamp()")
        want = {
            str(r["fingerprint"]): str(r["id"])
            for r in await conn.fetch(
                "SELECT i.id, m.value #>> '{}' AS fingerprint FROM alert_incidents i,"
                " jsonb_array_elements(i.members) m"
            )
        }
        for uid, d in dashboards().items():
            [panel] = [p for p in all_panels(d) if p["title"] == "Firing alerts"] or [None]
            if panel is None:
                continue
            scenario = Scenario("everything", g.TimeRange(now - timedelta(days=1), now))
            problems: list[str] = []
            variables = await resolve_variables(conn, d, scenario, problems)
            assert not problems, problems
            sql = g.interpolate(
                panel["targets"][0]["rawSql"],
                time_range=scenario.time_range,
                interval_ms=60000,
                variables=variables,
            )
            result = await run_sql(conn, sql)
            rows = [dict(zip(result.columns, r, strict=True)) for r in result.rows]
            assert {(r["rule"], r["agent"]) for r in rows} == {
                ("ece_tier1", "sim-retail-overconfident"),
                ("escalation_inverted", "sim-airline-inverted"),
            }, uid
            fps = {
                r["rule"]: await conn.fetchval(
                    "SELECT fingerprint FROM v_alerts WHERE rule = $1", r["rule"]
                )
                for r in rows
            }
            assert all(r["incident"] == want[fps[r["rule"]]] for r in rows), uid
            assert all(r["incident"].startswith("inc-") for r in rows), uid
    finally:
        await conn.close()


async def test_judge_labelling_panel_shows_the_decisions_of_the_floor(seeded: str) -> None:
    """The "Judge labelling per scope" panel shows, per judge and scope, the interval, the
    flagged conversations behind it and whether the judge labels, as the pure
    :func:`monitor.judges.quality.labelling` decides on every stored verdict."""
    from monitor.judges.quality import POOLED, labelling

    judged, panels = await judgements_and_panels(seeded, "Judge labelling per scope")
    table = panels["Judge labelling per scope"]
    want = {(d.judge, d.judge_version, d.agent_id or None, d.domain): d for d in labelling(judged)}
    # judges with verdicts but no outcome to compare with: a pooled row that labels nothing
    unmeasured = await fetch(
        seeded,
        "SELECT judge, judge_version FROM verdicts GROUP BY 1, 2 EXCEPT"
        " SELECT judge, judge_version FROM judge_quality WHERE flagged + pairs > 0",
    )
    rows = [dict(zip(table.columns, r, strict=True)) for r in table.rows]
    got = {(r["judge"], r["version"], r["agent"], r["domain"] or ""): r for r in rows}
    extra = {(r["judge"], r["judge_version"], None, "") for r in unmeasured}
    assert set(got) == set(want) | extra
    labelled = 0
    for key, d in want.items():
        r = got[key]
        assert r["scope"] == ("pooled" if d.agent_id == POOLED else "agent x domain")
        assert (r["flagged with outcome"], r["with outcome"]) == (d.precision.n, d.pairs)
        assert r["decided by"] == d.decided_by and r["labels"] == ("yes" if d.labels else "no")
        if d.precision.low is None:
            assert r["lower end"] is None
        else:
            assert r["lower end"] == pytest.approx(d.precision.low, abs=1e-12)
            assert r["upper end"] == pytest.approx(d.precision.high, abs=1e-12)
        labelled += d.labels
    assert labelled and labelled < len(want)  # some judges label, some do not: not vacuous


async def run_annotations(
    url: str, dashboard: dict[str, Any], selection: dict[str, tuple[str, ...]]
) -> dict[str, Any]:
    now = datetime.now(UTC)
    scenario = Scenario("annotations", g.TimeRange(now - timedelta(hours=6), now), selection)
    conn = await asyncpg.connect(libpq_url(url))
    try:
        problems: list[str] = []
        variables = await resolve_variables(conn, dashboard, scenario, problems)
        assert not problems, problems
        out = {}
        for a in dashboard["annotations"]["list"]:
            if a.get("target"):
                sql = g.interpolate(
                    a["target"]["rawSql"],
                    time_range=scenario.time_range,
                    interval_ms=60000,
                    variables=variables,
                )
                out[a["name"]] = await run_sql(conn, sql)
        return out
    finally:
        await conn.close()


async def test_annotations_mark_alerts_and_fired_drift_checks(seeded: str) -> None:
    for uid, d in dashboards().items():
        if uid == "monitor-conversation":  # tables of one conversation: no time axis to mark
            assert [a.get("target") for a in d["annotations"]["list"]] == [None]
            continue
        results = await run_annotations(seeded, d, {})
        for name, result in results.items():
            assert {"time", "text", "tags"} <= set(result.columns), (uid, name)
            assert result.rows, (uid, name, "no annotation with the seeded alerts and checks")
        alerts = results["Alerts"]
        texts = [r[alerts.columns.index("text")] for r in alerts.rows]
        assert sum(t.startswith("FIRING:") for t in texts) == 3 and any(
            t.startswith("RESOLVED:") for t in texts
        ), texts
        nothing = await run_annotations(seeded, d, {"agent": (NOTHING,)})
        assert all(not r.rows for r in nothing.values()), uid
    drift = await run_annotations(seeded, dashboards()["monitor-drift"], {})
    assert any("sim-telecom-drifting" in r[1] for r in drift["Drift checks fired"].rows)


async def test_annotation_on_a_missing_view_fails(seeded: str) -> None:
    broken = copy.deepcopy(dashboards()["monitor-calibration"])
    target = next(a for a in broken["annotations"]["list"] if a.get("target"))["target"]
    target["rawSql"] = target["rawSql"].replace("v_alert_annotations", "v_alert_annotation")
    with pytest.raises(asyncpg.UndefinedTableError):
        await run_annotations(seeded, broken, {})


# --- monitor dashboards push ------------------------------------------------------------------


def push_cli(grafana_url: str, token: str | None, *args: str) -> Any:
    app = typer.Typer()
    dashboards_cmd.register(app)
    env = {"MONITOR_GRAFANA_URL": grafana_url, "MONITOR_GRAFANA_FOLDER": "Agent monitor"}
    if token is not None:
        env["MONITOR_GRAFANA_TOKEN"] = token
    return CliRunner().invoke(app, ["dashboards", "push", *args], env=env)


def test_push_creates_then_updates_without_duplicates() -> None:
    with FakeGrafana("s3cret") as grafana:
        first = push_cli(grafana.url, "s3cret")
        assert first.exit_code == 0, first.output
        assert "created" in first.output
        assert len(grafana.folders) == 1
        (folder,) = grafana.folders.values()
        assert folder["title"] == "Agent monitor"
        assert set(grafana.dashboards) == UIDS
        assert all(
            d["folderUid"] == folder["uid"] and d["version"] == 1
            for d in grafana.dashboards.values()
        )
        ids = {uid: d["id"] for uid, d in grafana.dashboards.items()}
        pushed = grafana.dashboards["monitor-calibration"]["dashboard"]
        assert pushed["panels"] == dashboards()["monitor-calibration"]["panels"]

        second = push_cli(grafana.url, "s3cret")
        assert second.exit_code == 0, second.output
        assert "found" in second.output and f"{grafana.url}/d/monitor-drift/" in second.output
        assert len(grafana.folders) == 1 and set(grafana.dashboards) == UIDS
        assert {uid: d["id"] for uid, d in grafana.dashboards.items()} == ids
        assert all(d["version"] == 2 for d in grafana.dashboards.values())
        assert grafana.requests.count(("POST", "/api/folders")) == 1


def test_push_401_is_a_clear_error() -> None:
    with FakeGrafana("s3cret") as grafana:
        result = push_cli(grafana.url, "wrong")
        assert result.exit_code == 1
        assert "401" in result.output and "MONITOR_GRAFANA_TOKEN" in result.output
        assert "Traceback" not in result.output
        assert grafana.dashboards == {} and grafana.folders == {}
        missing = push_cli(grafana.url, None)
        assert missing.exit_code == 1 and "MONITOR_GRAFANA_TOKEN" in missing.output
        assert grafana.requests == [("GET", "/api/search")]  # only the 401 attempt went out


def test_push_unreachable_and_bad_directory(tmp_path: Path) -> None:
    with FakeGrafana("t") as grafana:
        dead = grafana.url
    result = push_cli(dead, "t")
    assert result.exit_code == 1, result.output
    # one line naming the URL and the cause, no urllib3 repr with object addresses
    assert result.output.strip() == (
        f"dashboards push failed: Grafana unreachable at {dead} (MONITOR_GRAFANA_URL or "
        "--url): connection refused"
    )
    assert push_cli(dead, "t", "--dir", str(tmp_path)).exit_code == 2
    assert len(gp.load_dashboards(DASHBOARDS)) == len(UIDS)
