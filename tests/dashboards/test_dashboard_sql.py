"""Every query of every dashboard runs on a real, migrated Postgres seeded through the write path.

Grafana cannot run here, so each dashboard in dashboards/*.json is checked the way Grafana would
use it: its template-variable queries and every panel target are interpolated by
``tests/dashboards/grafana_sql.py`` (Grafana's macros and variable formats) and executed,
read-only, on a
database filled by the real ``EventWriter`` with both tau2 runs, simulator traffic and dead
letters from real validation failures. For each target, under several time ranges and variable
selections:

- the query executes;
- a time-series target returns a ``time`` column (timestamps or epoch numbers) inside the time
  range, ascending, and at least one numeric value column; a stat/gauge/bar-gauge target returns
  a numeric column;
- every field a panel references (override matchers, table sort, reduce fields,
  transformations) is among the fields its queries return;
- with everything selected, every panel shows data (a non-zero number), unless listed in
  ``MAY_BE_EMPTY``; selecting one or two values of a variable restricts the columns that hold
  that variable's values to the selection, and a value that matches nothing empties the panels
  that use the variable.

``test_checker_rejects_broken_panels`` proves that the same checker fails a dashboard whose panel
references a missing table or column (and the other mistakes above). Datasource references,
``schemaVersion`` and panel ids are checked in test_deploy_files.py.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import re
from collections.abc import AsyncIterator, Iterable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from monitor.contract.events import InvalidEvent, decode_event
from monitor.ingest.rows import DeadLetter
from monitor.store.engine import libpq_url
from tests.dashboards import grafana_sql as g
from tests.factories import event_dict
from tests.test_deploy_files import all_panels, dashboard_files, provisioned_datasources

POSTGRES = "grafana-postgresql-datasource"
TIME_PANELS = {"timeseries", "graph", "state-timeline", "status-history"}
NUMERIC_PANELS = {"stat", "gauge", "bargauge", "piechart"}
NUMERIC_TYPES = {"int2", "int4", "int8", "float4", "float8", "numeric", "oid", "money"}
TIME_TYPES = {"timestamptz", "timestamp", "date"}
NO_FIELD_REFS = {"merge", "reduce", "seriesToRows", "labelsToFields", "concatenate"}
# Panels that may legitimately show nothing with the seeded data: {(dashboard uid, panel id): why}
MAY_BE_EMPTY: dict[tuple[str, int], str] = {}
NOTHING = "no-such-value 'quoted'"


@dataclass(frozen=True)
class Scenario:
    name: str
    time_range: g.TimeRange
    selection: dict[str, tuple[str, ...]] = field(default_factory=dict)  # missing: default
    require_signal: bool = False  # every panel must show a non-zero number
    expect_no_signal: bool = False  # panels using a selected variable must show nothing
    baseline: str | None = None  # the All scenario whose columns a selection must restrict


@dataclass(frozen=True)
class Result:
    columns: list[str]
    types: list[str]
    rows: list[tuple[Any, ...]]

    def numeric(self, exclude: Iterable[str] = ()) -> list[int]:
        return [
            i
            for i, (c, t) in enumerate(zip(self.columns, self.types, strict=True))
            if t in NUMERIC_TYPES and c not in exclude
        ]

    def has_signal(self) -> bool:
        cols = self.numeric(exclude=("time",))
        return any(row[i] not in (None, 0) for row in self.rows for i in cols)


# --- running queries --------------------------------------------------------------------------


async def run_sql(conn: asyncpg.Connection, sql: str) -> Result:
    """Execute like Grafana's datasource, but read-only: a dashboard query must not write."""
    async with conn.transaction(readonly=True):
        stmt = await conn.prepare(sql)
        rows = await stmt.fetch()
    attrs = stmt.get_attributes()
    return Result([a.name for a in attrs], [a.type.name for a in attrs], [tuple(r) for r in rows])


def postgres_datasources() -> dict[str, dict[str, Any]]:
    return {ds["uid"]: ds for ds in provisioned_datasources() if ds["type"] == POSTGRES}


def default_datasource_uid() -> str | None:
    return next((ds["uid"] for ds in provisioned_datasources() if ds.get("isDefault")), None)


def datasource_of(*nodes: dict[str, Any]) -> tuple[dict[str, Any] | None, str | None]:
    """The provisioned Postgres datasource a target runs on, or why it cannot be checked."""
    ref = next((n["datasource"] for n in nodes if n.get("datasource")), None)
    uid = ref.get("uid") if isinstance(ref, dict) else (ref or default_datasource_uid())
    ds = postgres_datasources().get(uid or "")
    return (ds, None) if ds else (None, f"datasource {ref!r} is not a provisioned {POSTGRES}")


def variable_specs(dashboard: dict[str, Any]) -> list[dict[str, Any]]:
    return list(dashboard.get("templating", {}).get("list", []))


async def resolve_variables(
    conn: asyncpg.Connection, dashboard: dict[str, Any], scenario: Scenario, problems: list[str]
) -> list[g.Variable]:
    """The dashboard's variables with their options (queries run) and the scenario's selection."""
    resolved: list[g.Variable] = []
    for spec in variable_specs(dashboard):
        name, kind, query = spec["name"], spec.get("type"), spec.get("query", "")
        where = f"variable ${name} [{scenario.name}]"
        options: list[str] = []
        if kind == "query":
            sql = query if isinstance(query, str) else query.get("rawSql", "")
            ds, why = datasource_of(spec)
            if ds is None:
                problems.append(f"{where}: {why}")
                continue
            try:  # variable queries get the time range; $__interval is not meant for them
                text = g.interpolate(
                    sql,
                    time_range=scenario.time_range,
                    interval_ms=60000,
                    variables=resolved,
                    search_filter=True,
                )
                result = await run_sql(conn, text)
            except (g.GrafanaSQLError, asyncpg.PostgresError) as exc:
                problems.append(f"{where}: {type(exc).__name__}: {exc}")
                continue
            if {"__text", "__value"} <= set(result.columns):
                cols = [result.columns.index("__value")]
            else:
                cols = list(range(len(result.columns)))
            options = list(dict.fromkeys(str(r[i]) for r in result.rows for i in cols))
            if spec.get("regex"):
                pattern = js_regex(spec["regex"])
                options = [o for o in options if pattern.search(o)]
            if scenario.require_signal and not options:
                problems.append(f"{where}: the query returned no options")
        elif kind in ("custom", "interval"):
            options = [o.strip() for o in re.findall(r"(?:\\,|[^,])+", query)]
        elif kind in ("constant", "textbox"):
            options = [query]
        else:
            problems.append(f"{where}: variable type {kind!r} is not modelled by this checker")
            continue
        include_all = bool(spec.get("includeAll"))
        default = (g.ALL,) if include_all else tuple(options[:1])
        resolved.append(
            g.Variable(
                name,
                multi=bool(spec.get("multi")),
                include_all=include_all,
                all_value=spec.get("allValue") or None,
                options=tuple(options),
                selected=scenario.selection.get(name, default),
            )
        )
    return resolved


# --- what a panel needs from its results ------------------------------------------------------


def js_regex(text: str) -> re.Pattern[str]:
    """A Grafana regex option: ``/pattern/flags`` or a bare pattern."""
    if m := re.fullmatch(r"/(.*)/([gimsuy]*)", text, re.S):
        return re.compile(m.group(1), re.I if "i" in m.group(2) else 0)
    return re.compile(text)


def field_references(panel: dict[str, Any], problems: list[str]) -> list[tuple[str, str]]:
    """``(kind, text)`` for every field the panel names: kind ``name`` or ``regex``."""
    refs: list[tuple[str, str]] = []
    for override in panel.get("fieldConfig", {}).get("overrides", []):
        matcher = override.get("matcher", {})
        kind, options = matcher.get("id"), matcher.get("options")
        if kind == "byName":
            refs.append(("name", options))
        elif kind == "byNames":
            refs.extend(("name", n) for n in options.get("names", []))
        elif kind == "byRegexp":
            alternatives = [options] if re.search(r"[()\[\]]", options) else options.split("|")
            refs.extend(("regex", a) for a in alternatives)
        elif kind not in ("byType", "byFrameRefID", "byValue"):
            problems.append(f"override matcher {kind!r} is not modelled by this checker")
    opts = panel.get("options", {})
    refs.extend(("name", s["displayName"]) for s in opts.get("sortBy", []) if "displayName" in s)
    if fields := opts.get("reduceOptions", {}).get("fields"):
        refs.append(("regex" if fields.startswith("/") else "name", fields))
    for t in panel.get("transformations", []):
        o = t.get("options", {})
        if t.get("disabled") or t["id"] in NO_FIELD_REFS:
            continue
        if t["id"] == "organize":
            for key in ("excludeByName", "indexByName", "renameByName"):
                refs.extend(("name", n) for n in o.get(key, {}))
        elif t["id"] == "filterFieldsByName":
            refs.extend(("name", n) for n in o.get("include", {}).get("names", []))
        elif t["id"] == "sortBy":
            refs.extend(("name", s["field"]) for s in o.get("sort", []) if s.get("field"))
        elif t["id"] == "groupBy":
            refs.extend(("name", n) for n in o.get("fields", {}))
        else:
            problems.append(f"transformation {t['id']!r} is not modelled by this checker")
    return refs


def display_names(target: dict[str, Any], result: Result) -> set[str]:
    """Field names Grafana shows for a result (time series: also the series from ``metric``)."""
    names = set(result.columns)
    if target.get("format", "time_series") == "time_series":
        names.add("Time")
        labels = [i for i, t in enumerate(result.types) if t in ("text", "varchar", "bpchar")]
        values = [c for i, c in enumerate(result.columns) if i in result.numeric(("time",))]
        for row in result.rows:
            for i in labels:
                names.add(str(row[i]))
                names.update(f"{row[i]} {v}" for v in values)
    return names


def epoch_ms(value: Any) -> float:
    """A time value in epoch ms, as Grafana's ``epochPrecisionToMS`` reads numbers."""
    if isinstance(value, datetime):
        return value.timestamp() * 1000
    number = float(value)
    exponent = f"{number:e}".rsplit("e", 1)[1]
    return number * 1000 if exponent == "+09" else number / 1e6 if exponent == "+18" else number


def shape_problems(
    panel: dict[str, Any],
    target: dict[str, Any],
    result: Result,
    scenario: Scenario,
    interval_ms: int,
) -> list[str]:
    out = []
    time_series = target.get("format", "time_series") == "time_series"
    if time_series or panel.get("type") in TIME_PANELS:
        if "time" not in result.columns:
            return [f"no 'time' column (got {result.columns})"]
        i = result.columns.index("time")
        if result.types[i] not in TIME_TYPES | NUMERIC_TYPES:
            out.append(f"'time' is {result.types[i]}, not a timestamp or epoch number")
        elif not result.numeric(exclude=("time", "metric")):
            out.append(f"no numeric value column (got {result.columns} of {result.types})")
        else:
            times = [epoch_ms(r[i]) for r in result.rows if r[i] is not None]
            lo = scenario.time_range.start.timestamp() * 1000 - interval_ms
            hi = scenario.time_range.end.timestamp() * 1000
            if any(not lo <= t <= hi for t in times):
                out.append("time values outside the time range")
            if times != sorted(times):
                out.append("rows not sorted by time (Grafana rejects long series out of order)")
    elif panel.get("type") in NUMERIC_PANELS and not result.numeric():
        out.append(f"no numeric column for a {panel['type']} panel (got {result.columns})")
    return out


# --- the checker ------------------------------------------------------------------------------


async def check_dashboard(
    conn: asyncpg.Connection, dashboard: dict[str, Any], scenarios: Sequence[Scenario]
) -> list[str]:
    """Every problem of every panel target under every scenario (empty: the dashboard is fine)."""
    problems: list[str] = []
    results: dict[tuple[str, Any, Any], Result] = {}
    for scenario in scenarios:
        variables = await resolve_variables(conn, dashboard, scenario, problems)
        for panel in all_panels(dashboard):
            if panel.get("targets"):
                where = f"panel {panel.get('id')} {panel.get('title')!r} [{scenario.name}]"
                found = await check_panel(conn, panel, scenario, variables, results)
                problems.extend(f"{where}: {p}" for p in found)
                signal = any(
                    r.has_signal()
                    for (s, p, _), r in results.items()
                    if s == scenario.name and p == panel.get("id")
                )
                exempt = (dashboard.get("uid"), panel.get("id")) in MAY_BE_EMPTY
                if scenario.require_signal and not signal and not exempt:
                    problems.append(f"{where}: no data with the seeded database")
    return problems


async def check_panel(
    conn: asyncpg.Connection,
    panel: dict[str, Any],
    scenario: Scenario,
    variables: list[g.Variable],
    results: dict[tuple[str, Any, Any], Result],
) -> list[str]:
    """Run the panel's targets (results go to ``results``) and return the panel's problems."""
    if "libraryPanel" in panel:
        return ["library panels are not modelled by this checker"]
    problems: list[str] = []
    names: set[str] = set()
    selected = {v.name for v in variables if v.name in scenario.selection}
    for target in panel["targets"]:
        here = f"target {target.get('refId')}"
        ds, why = datasource_of(target, panel)
        if ds is None or not target.get("rawSql") or target.get("editorMode") == "builder":
            problems.append(f"{here}: not a raw Postgres SQL query ({why or 'no rawSql'})")
            continue
        interval_ms = g.panel_interval_ms(
            panel, scenario.time_range, ds.get("jsonData", {}).get("timeInterval")
        )
        try:
            sql = g.interpolate(
                target["rawSql"],
                time_range=scenario.time_range,
                interval_ms=interval_ms,
                variables=variables,
            )
            result = await run_sql(conn, sql)
        except (g.GrafanaSQLError, asyncpg.PostgresError) as exc:
            problems.append(f"{here}: {type(exc).__name__}: {exc}")
            continue
        results[(scenario.name, panel.get("id"), target.get("refId"))] = result
        names |= display_names(target, result)
        found = shape_problems(panel, target, result, scenario, interval_ms)
        uses = {n for n in selected if re.search(rf"\$\{{?{n}\b|\[\[{n}\b", target["rawSql"])}
        if scenario.expect_no_signal and uses and result.has_signal():
            found.append(f"shows data although ${sorted(uses)} matches nothing")
        if scenario.baseline and uses:
            base = results.get((scenario.baseline, panel.get("id"), target.get("refId")))
            found.extend(restriction_problems(base, result, variables, uses))
        problems.extend(f"{here}: {p}" for p in found)
    for kind, text in field_references(panel, problems):
        ok = text in names if kind == "name" else any(js_regex(text).search(n) for n in names)
        if names and not ok:
            problems.append(f"references field {text!r} ({kind}), not in {sorted(names)}")
    return problems


def restriction_problems(
    base: Result | None, result: Result, variables: Sequence[g.Variable], uses: set[str]
) -> list[str]:
    """Columns holding a variable's values under All must hold only the selected ones."""
    if base is None:
        return []
    out = []
    for var in (v for v in variables if v.name in uses):
        for i, column in enumerate(base.columns):
            seen = {r[i] for r in base.rows if r[i] is not None}
            if not seen or not seen <= set(var.options) or column not in result.columns:
                continue
            j = result.columns.index(column)
            got = {r[j] for r in result.rows if r[j] is not None}
            if not got <= set(var.selected):
                out.append(
                    f"{column!r} is not restricted to ${var.name}={list(var.selected)}: "
                    f"it shows {sorted(got)}"
                )
    return out


async def assert_dashboard_ok(
    conn: asyncpg.Connection, dashboard: dict[str, Any], scenarios: Sequence[Scenario]
) -> None:
    problems = await check_dashboard(conn, dashboard, scenarios)
    assert not problems, f"{dashboard.get('title')}:\n" + "\n".join(problems)


# --- seeded database and scenarios ------------------------------------------------------------


def dead_letters() -> list[DeadLetter]:
    """Dead letters as the ingest path makes them: real validation failures of real bytes."""
    good = event_dict("dl-1", "dl-conv", agent="sim-airline-calibrated")
    bad: list[bytes] = [
        b"{not json",
        json.dumps({**good, "schema": "agent-event/v0"}).encode(),
        json.dumps({k: v for k, v in good.items() if k != "ts"}).encode(),
        json.dumps({**good, "message": {**good["message"], "confidence": 1.7}}).encode(),
        json.dumps({**good, "attributes": {"blob": "x" * 300_000}}).encode(),
    ]
    out = []
    for offset, raw in enumerate(bad):
        with pytest.raises(InvalidEvent) as caught:
            decode_event(raw)
        exc = caught.value
        out.append(DeadLetter("agent-events", 0, offset, exc.reason, exc.field, exc.detail, raw))
    return out


@asynccontextmanager
async def seeded_connection(url: str) -> AsyncIterator[asyncpg.Connection]:
    """A connection to the seeded database at ``url`` (``seeded_dashboard_url``: both tau2
    runs, three hours of simulator traffic, dead letters, and the analytics, verdicts and
    alerts written on top of them, tests/dashboards/seed.py); closed on exit."""
    conn = await asyncpg.connect(libpq_url(url))
    try:
        yield conn
    finally:
        await conn.close()


def scenarios_for(
    dashboard: dict[str, Any], now: datetime, oldest: datetime, variables: Sequence[g.Variable]
) -> list[Scenario]:
    """The dashboard's default range and the whole history with everything selected, then each
    query variable at one value, two values (multi) and a value that matches nothing."""
    t = dashboard.get("time") or {"from": "now-6h", "to": "now"}
    default = g.TimeRange(g.parse_time(t["from"], now), g.parse_time(t["to"], now))
    history = g.TimeRange(oldest - timedelta(days=1), now)
    out = [
        Scenario("default range, all", default, require_signal=True),
        Scenario("history, all", history, require_signal=True),
    ]
    for v in variables:
        picks = [v.options[:1], v.options[:2]] if v.multi else [v.options[:1]]
        out += [
            Scenario(f"history, ${v.name}={list(p)}", history, {v.name: p}, baseline="history, all")
            for p in picks
            if p
        ]
        out.append(
            Scenario(
                f"history, ${v.name} matches nothing",
                history,
                {v.name: (NOTHING,)},
                expect_no_signal=True,
            )
        )
    return out


# --- tests ------------------------------------------------------------------------------------


# What a person (or a data link) types into a textbox variable: a value picked from the seeded
# database that shows in every panel using it (a conversation with verdicts and gate decisions).
TYPED: dict[tuple[str, str], str] = {
    ("monitor-conversation", "conversation"): """
SELECT g.conversation_id FROM v_gate_decisions g
WHERE EXISTS (SELECT 1 FROM verdicts v WHERE v.conversation_id = g.conversation_id
              AND v.score > 0)
ORDER BY g.time DESC, g.conversation_id LIMIT 1""",
}


async def typed_values(
    conn: asyncpg.Connection, dashboard: dict[str, Any]
) -> dict[str, tuple[str, ...]]:
    """Each textbox variable's value from :data:`TYPED` (a textbox without one fails)."""
    out = {}
    for spec in variable_specs(dashboard):
        if spec.get("type") == "textbox":
            sql = TYPED.get((dashboard.get("uid", ""), spec["name"]))
            assert sql, f"no value to type into ${spec['name']} (TYPED)"
            value = await conn.fetchval(sql)
            assert value is not None, f"the seeded database has no value for ${spec['name']}"
            out[spec["name"]] = (str(value),)
    return out


async def seeded_scenarios(conn: asyncpg.Connection, dashboard: dict[str, Any]) -> list[Scenario]:
    """The scenarios for ``dashboard`` on a seeded database (its variables' options resolved,
    its textboxes typed: each scenario has the typed value, and one scenario a value that
    matches nothing)."""
    await conn.execute("SET statement_timeout = '10s'")
    now = await conn.fetchval("SELECT clock_timestamp()")
    oldest = await conn.fetchval("SELECT min(ts) FROM events")
    problems: list[str] = []
    everything = Scenario("options", g.TimeRange(oldest - timedelta(days=1), now))
    variables = await resolve_variables(conn, dashboard, everything, problems)
    assert not problems, problems
    specs = {s["name"]: s for s in variable_specs(dashboard)}
    queried = [v for v in variables if v.options and specs[v.name].get("type") == "query"]
    out = scenarios_for(dashboard, now, oldest, queried)
    typed = await typed_values(conn, dashboard)
    out = [dataclasses.replace(s, selection={**typed, **s.selection}) for s in out]
    history = g.TimeRange(oldest - timedelta(days=1), now)
    return out + [
        Scenario(
            f"history, ${name} matches nothing", history, {name: (NOTHING,)}, expect_no_signal=True
        )
        for name in typed
    ]


@pytest.mark.parametrize("path", dashboard_files(), ids=lambda p: p.name)
async def test_dashboard_queries_run_on_seeded_postgres(
    path: Path, seeded_dashboard_url: str
) -> None:
    dashboard = json.loads(path.read_text())
    async with seeded_connection(seeded_dashboard_url) as conn:
        await assert_dashboard_ok(conn, dashboard, await seeded_scenarios(conn, dashboard))


@dataclass(frozen=True)
class Mutation:
    """A realistic mistake: a regex substitution in a panel's first matching target."""

    what: str
    expected: str  # regex a problem must match
    pattern: str
    replacement: str
    required: bool = True  # some panel of every dashboard must be breakable this way
    every_panel: bool = False  # break each applicable panel (else only the first)


def mutations(dashboard: dict[str, Any]) -> list[Mutation]:
    timed = "$__timeFilter(" in json.dumps(dashboard)
    out = [
        # a set-returning function (escalation_bins_in) renamed is a missing function
        Mutation(
            "missing table", "Undefined(Table|Function)Error", r"\bFROM (\w+)", r"FROM \1_missing"
        ),
        Mutation(
            "missing column",
            "UndefinedColumnError",
            r"\$__timeFilter\((\w+)\)",
            r"$__timeFilter(\1_missing)",
            required=timed,
        ),
        Mutation(  # a dashboard of one conversation has no time filter to break
            "missing column in the filter",
            "UndefinedColumnError",
            r"\bWHERE (\w+) = ",
            r"WHERE \1_missing = ",
            required=not timed,
        ),
        Mutation(
            "unknown macro",
            "UnknownMacroError",
            r"\$__timeFilter\(",
            "$__timeFilterz(",
            required=timed,
        ),
        Mutation(
            "filter that matches nothing",
            "no data with the seeded database",
            r"\bWHERE ",
            "WHERE false AND ",
        ),
        Mutation(
            "time series without a time column",
            "no 'time' column",
            r"\$__timeGroupAlias\(([^)]*)\)",
            r"$__timeGroup(\1) AS bucket",
            required=False,
        ),
    ]
    names = "|".join(re.escape(v["name"]) for v in variable_specs(dashboard))
    if names:
        out += [
            Mutation(
                "unknown variable", "UnknownVariableError", rf"\$(\{{)?({names})\b", r"$\1\2_typo"
            ),
            Mutation(
                "filter that ignores the variable",
                "matches nothing|not restricted",
                rf"(\$\{{?(?:{names})\b(?::\w+)?\}}?\))",
                r"\1 OR (true)",
                required=False,
                every_panel=True,
            ),
        ]
    return out


def broken_copies(dashboard: dict[str, Any], mutation: Mutation) -> list[tuple[dict, dict]]:
    """``(one-panel dashboard, the same with the mistake)`` for the panels it applies to."""
    out = []
    for panel in all_panels(dashboard):
        for i, target in enumerate(panel.get("targets", [])):
            if re.search(mutation.pattern, target.get("rawSql", "")):
                broken = copy.deepcopy(panel)
                sql = broken["targets"][i]["rawSql"]
                broken["targets"][i]["rawSql"] = re.sub(
                    mutation.pattern, mutation.replacement, sql, count=1
                )
                out.append(({**dashboard, "panels": [panel]}, {**dashboard, "panels": [broken]}))
                break
    return out if mutation.every_panel else out[:1]


@pytest.mark.parametrize("path", dashboard_files(), ids=lambda p: p.name)
async def test_checker_rejects_broken_panels(path: Path, seeded_dashboard_url: str) -> None:
    """The checker above passes a panel and fails a copy of it with one mistake in it."""
    dashboard = json.loads(path.read_text())
    async with seeded_connection(seeded_dashboard_url) as conn:
        scenarios = await seeded_scenarios(conn, dashboard)
        passed: set[str] = set()  # panels checked clean already (the database is only read)
        for mutation in mutations(dashboard):
            pairs = broken_copies(dashboard, mutation)
            assert pairs or not mutation.required, f"no panel to break with {mutation.what!r}"
            for original, broken in pairs:
                where = (mutation.what, broken["panels"][0].get("title"))
                if (key := json.dumps(original["panels"], sort_keys=True)) not in passed:
                    assert await check_dashboard(conn, original, scenarios) == [], where
                    passed.add(key)
                with pytest.raises(AssertionError, match=mutation.expected) as caught:
                    await assert_dashboard_ok(conn, broken, scenarios)
                problems = str(caught.value).splitlines()[1:]  # after the title: one a line
                assert any(re.search(mutation.expected, p) for p in problems), (where, problems)
        missing_field = copy.deepcopy(next(p for p in all_panels(dashboard) if p.get("targets")))
        missing_field.setdefault("fieldConfig", {}).setdefault("overrides", []).append(
            {"matcher": {"id": "byName", "options": "no such field"}, "properties": []}
        )
        with pytest.raises(AssertionError, match="references field 'no such field'"):
            await assert_dashboard_ok(conn, {**dashboard, "panels": [missing_field]}, scenarios)


# --- grafana_sql against Grafana's own expectations (pure) ------------------------------------

T0 = datetime(2018, 4, 12, 18, 0, tzinfo=UTC)
FIVE_MIN = g.TimeRange(T0, T0 + timedelta(minutes=5))


@pytest.mark.parametrize(
    ("sql", "expanded"),
    [
        # the cases of Grafana's pkg/tsdb/grafana-postgresql-datasource/macros_test.go
        ("select $__time(time_column)", 'select time_column AS "time"'),
        (
            "WHERE $__timeFilter(time_column)",
            "WHERE time_column BETWEEN '2018-04-12T18:00:00Z' AND '2018-04-12T18:05:00Z'",
        ),
        (
            "select $__timeFrom(), $__timeTo()",
            "select '2018-04-12T18:00:00Z', '2018-04-12T18:05:00Z'",
        ),
        (
            "SELECT $__timeGroup(time_column,'5m'), value",
            'SELECT floor(extract(epoch from time_column)/300)*300 AS "time", value',
        ),
        (
            "SELECT $__timeGroup(time_column,'5m') as time, value",
            "SELECT floor(extract(epoch from time_column)/300)*300 as time, value",
        ),
        (
            "$__timeGroupAlias(time_column , '5m')",
            'floor(extract(epoch from time_column)/300)*300 AS "time"',
        ),
        ("select $__unixEpochFilter(time)", "select time >= 1523556000 AND time <= 1523556300"),
        ("select $__unixEpochNanoFrom()", "select 1523556000000000000"),
        ("SELECT $__unixEpochGroupAlias(c+a,'5m')", 'SELECT floor((c+a)/300)*300 AS "time"'),
        # $__interval / $__interval_ms, as the dashboards use them (fill values are Grafana-side)
        (
            "$__timeGroupAlias(ts, $__interval, 0), n * 1000.0 / $__interval_ms",
            'floor(extract(epoch from ts)/20)*20 AS "time", n * 1000.0 / 20000',
        ),
        (
            "$__timeGroup(ts, '20ms', NULL) $__timeGroup(ts, 1h30m, previous)",
            "floor(extract(epoch from ts)/0.02)*0.02 floor(extract(epoch from ts)/5400)*5400",
        ),
        ("$__timeGroup(ts, '30d')", "floor(extract(epoch from ts)/2.592e+06)*2.592e+06"),
        (
            "$__from $__to ${__range_s} $__unixEpochFrom()",
            "1523556000000 1523556300000 300 1523556000",
        ),
    ],
)
def test_macros_expand_like_grafana(sql: str, expanded: str) -> None:
    assert g.interpolate(sql, time_range=FIVE_MIN, interval_ms=20000) == expanded


def test_fractional_time_range_formats_like_go() -> None:
    t = g.TimeRange(datetime(1960, 2, 1, 7, 0, 0, 500000, UTC), T0)
    assert g.interpolate(
        "$__timeFilter(t) $__unixEpochFilter(t)", time_range=t, interval_ms=1000
    ) == (
        "t BETWEEN '1960-02-01T07:00:00.5Z' AND '2018-04-12T18:00:00Z' "
        "t >= -312915600 AND t <= 1523556000"
    )


AGENT = g.Variable("agent", multi=True, include_all=True, all_value="'__all__'", options=("a", "b"))
FORMATS = "($agent) ${agent} [[agent]] ${agent:csv} ${agent:sqlstring} ${agent:text}"


@pytest.mark.parametrize(
    ("variable", "expanded"),
    [
        (AGENT, "('__all__') '__all__' '__all__' '__all__' '__all__' All"),
        (
            g.Variable(**{**AGENT.__dict__, "all_value": None}),
            "('a','b') 'a','b' 'a','b' a,b 'a','b' All",
        ),
        (
            g.Variable(**{**AGENT.__dict__, "selected": ("a", "o'b")}),
            "('a','o''b') 'a','o''b' 'a','o''b' a,o'b 'a','o''b' a + o'b",
        ),
        (g.Variable("agent", options=("a", "b"), selected=("a",)), "(a) a a a 'a' a"),
        (
            g.Variable("agent", options=("o'b",), selected=("o'b",)),
            "(o''b) o''b o''b o'b 'o''b' o'b",
        ),
    ],
)
def test_variables_format_like_grafana(variable: g.Variable, expanded: str) -> None:
    assert (
        g.interpolate(FORMATS, time_range=FIVE_MIN, interval_ms=1000, variables=[variable])
        == expanded
    )


@pytest.mark.parametrize(
    ("sql", "error"),
    [
        ("WHERE $__timeFilterz(ts)", g.UnknownMacroError),
        ("SELECT $__rate_interval", g.UnknownMacroError),
        ("WHERE $__timeFilter()", g.GrafanaSQLError),
        ("$__timeGroup(ts)", g.GrafanaSQLError),
        ("$__timeGroup(ts, five minutes)", g.GrafanaSQLError),
        ("$__timeGroup(ts, 5m, zero)", g.GrafanaSQLError),
        ("agent_id IN ($agents)", g.UnknownVariableError),
        ("agent_id IN (${agent:regex})", g.UnknownVariableError),
        ("agent_id = '${agent.id}'", g.UnknownVariableError),
    ],
)
def test_unknown_macros_and_variables_fail_loudly(sql: str, error: type[Exception]) -> None:
    with pytest.raises(error):
        g.interpolate(sql, time_range=FIVE_MIN, interval_ms=1000, variables=[AGENT])


def test_panel_interval_follows_grafana() -> None:
    six_hours = g.TimeRange(T0 - timedelta(hours=6), T0)
    half_width = {"gridPos": {"w": 12}}
    assert g.panel_interval_ms(half_width, six_hours, None) == 20000  # 6 h / 960 px -> 20 s
    assert g.panel_interval_ms({**half_width, "interval": "1m"}, six_hours, "10s") == 60000
    assert g.panel_interval_ms({"maxDataPoints": 10}, six_hours, None) == 1800000
    assert g.panel_interval_ms({}, g.TimeRange(T0 - timedelta(minutes=5), T0), "10s") == 10000
    assert [g.seconds_to_hms(s) for s in (0.5, 20, 90, 86400, 604800)] == [
        "500ms",
        "20s",
        "1m",
        "1d",
        "7d",
    ]
