"""Read latency of the analytics: every dashboard query and the analytics CLI on a filled store.

One run creates a scratch database on ``DATABASE_URL``'s server, migrates it, and fills it
through the worker's own write path (``EventWriter.write``: staging COPY, the idempotent batch
statement with the ``conversations`` roll-up, sampling decisions, items and calibration bins)
with simulated traffic (``monitor.sim.traffic.Simulator``) whose conversations start evenly
over the last 7 days, in batches of ``--batch`` events in global ts order (``--order
conversation``: conversation by conversation, the same rows, see :func:`_traffic`), until about
``--items`` items exist. Then it times, each as the median of ``--repeat`` runs:

- every dashboard query: each template-variable query and each panel target of
  dashboards/*.json, interpolated exactly as Grafana would (tests/dashboards/grafana_sql.py:
  macros, ``$__interval`` from the panel width, every variable at "All"), for the ranges
  ``now-24h .. now`` and ``now-7d .. now``;
- the analytics CLI commands (``monitor thresholds --json``, ``monitor escalation --since 7d
  --json``, ``monitor calibration --since 7d --json``) as subprocesses, wall time, with the
  CLI's start-up (``monitor --help``) measured in the same run beside them;
- the database part of ``thresholds`` / ``escalation``: ``analytics.repo.escalation_conversations``
  in process (7 days, every agent);
- choosing the exemplars of a firing alert (``monitor.alerts.exemplar_repo.choose``), for every
  default rule and every agent segment, at the end of the range, in one transaction that is
  rolled back: the drift rules find a drift check of the last hour against the 24 hours before
  it (stored by ``run_drift``, marked fired in the transaction, as a drift alert finds one), the
  other rules what the traffic holds (the simulated traffic has no judge verdicts, gate
  decisions or dead letters: those picks read an empty index range); and the whole of what the
  evaluator adds for one alert that fires (``exemplar_repo.record``: choose, the conversation
  locks, the promotion and the insert), per alert, over one alert per rule and segment.

With ``--judged`` the fill is followed by a verdict per labelled item of the weighted sample and
a drift check of every segment every hour, so the judges' and drift panels (their Examples too)
read real volumes. The Conversation dashboard's textbox gets the latest conversation's id.

It prints a table, the slowest queries with their ``EXPLAIN ANALYZE`` plans, and drops the
database. Note: ``ingested_at`` is the time of the fill (a few minutes), so every event falls
in both ranges of the pipeline panels that filter on it (their worst case). Run from the
repository root::

    DATABASE_URL=postgresql://postgres@127.0.0.1:5432/postgres .venv/bin/python bench/metrics.py
    ... bench/metrics.py --items 10000 --repeat 3
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import asyncpg
from sqlalchemy import text

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from bench.harness import scratch_database  # noqa: E402
from monitor.alerts import exemplar_repo  # noqa: E402
from monitor.alerts.observations import segment_scope  # noqa: E402
from monitor.alerts.rules import default_rules  # noqa: E402
from monitor.alerts.states import AlertState, Status, fingerprint  # noqa: E402
from monitor.analytics import repo  # noqa: E402
from monitor.analytics import reports as fa  # noqa: E402
from monitor.analytics.design_effect import design_effects  # noqa: E402
from monitor.contract.events import AgentEvent  # noqa: E402

try:  # with the escalation roll-up; before it: one row per conversation
    from monitor.analytics.repo_escalation import escalation_conversations
except ImportError:  # pragma: no cover - the "before" checkout
    escalation_conversations = repo.escalation_conversations  # type: ignore[attr-defined]
from monitor.ingest.rows import event_row  # noqa: E402
from monitor.ingest.writer import EventWriter  # noqa: E402
from monitor.sim.traffic import Simulator  # noqa: E402
from monitor.store.engine import make_engine, upgrade  # noqa: E402
from tests.dashboards import grafana_sql as g  # noqa: E402

#: events between two ANALYZE runs of the fill: the servers this runs on may have autovacuum off
#: (this machine's has), and a store filled without statistics gets plans for empty tables
ANALYZE_EVERY = 500_000
RANGES = {"24h": timedelta(hours=24), "7d": timedelta(days=7)}
CLI = {
    "monitor --help (start-up)": ["--help"],
    "monitor thresholds --json": ["thresholds", "--json"],
    "monitor escalation --since 7d --json": ["escalation", "--since", "7d", "--json"],
    "monitor calibration --since 7d --json": ["calibration", "--since", "7d", "--json"],
}


def _traffic(sim: Simulator, n_conv: int, order: str) -> Iterator[AgentEvent]:
    """The simulator's events in global ts order (as a live stream), or conversation by
    conversation (each conversation's events together, conversations by start): the same rows
    in the end (every write is idempotent and order-free per conversation; checked by
    bench/fill_order_check.py), but a batch then touches ~batch/8 conversations whatever the
    density, not every conversation active in its minutes (at 10M items ~3,000 per 5,000
    events: the time-ordered fill ran at ~4k events/s)."""
    if order == "time":
        yield from sim.events(n_conv)
        return
    for conversation in sim.conversations(n_conv):
        yield from conversation


async def fill(
    dsn: str, items: int, batch: int, now: datetime, order: str = "time"
) -> tuple[int, int, float]:
    """Write simulated traffic until about ``items`` items exist: (events, items, seconds).
    Prints a progress line every :data:`ANALYZE_EVERY` events."""
    probe = Simulator(seed=13, start=now)
    per_conv = (
        sum(
            1
            for c in probe.conversations(200)
            for e in c
            if e.type == "message" and e.confidence is not None
        )
        / 200
    )
    n_conv = max(1, round(items / per_conv))
    sim = Simulator(seed=13, start=now - timedelta(days=7), interval=timedelta(days=7) / n_conv)
    writer = EventWriter(dsn)
    await writer.start()
    written, analyzed, rows = 0, 0, []
    t0 = time.perf_counter()
    try:
        for event in _traffic(sim, n_conv, order):
            if event.ts > now:
                continue
            rows.append(event_row(event))
            if len(rows) >= batch:
                written += (await writer.write(rows)).inserted
                rows = []
                if written >= analyzed + ANALYZE_EVERY:  # what autovacuum would do
                    await _analyze(dsn)
                    analyzed = written
                    elapsed = time.perf_counter() - t0
                    print(
                        f"  fill: {written:,} events in {elapsed:.0f} s "
                        f"({written / elapsed:,.0f}/s)",
                        flush=True,
                    )
        if rows:
            written += (await writer.write(rows)).inserted
    finally:
        await writer.close()
    seconds = time.perf_counter() - t0
    conn = await asyncpg.connect(dsn)
    try:
        n_items = int(await conn.fetchval("SELECT count(*) FROM items"))
        await conn.execute("VACUUM ANALYZE")
    finally:
        await conn.close()
    return written, n_items, seconds


#: one verdict per labelled item of the weighted sample, as a judge agreeing with its label
#: would store it (the judges' dashboard and its Examples read verdicts at this volume)
_VERDICTS = """
INSERT INTO verdicts (conversation_id, item_id, agent_id, judge, judge_version, status, label,
                      score, categories, evidence, rationale, created_at)
SELECT i.conversation_id, i.event_id, i.agent_id, 'bench-judge', '1', 'ok', i.label,
  i.label::float8, CASE WHEN i.label = 0 THEN '["wrong_information"]' ELSE '[]' END::jsonb,
  '{}'::jsonb, CASE WHEN i.label = 0 THEN 'the answer contradicts the tool result' END,
  i.ts + interval '1 minute'
FROM items i WHERE i.label IS NOT NULL AND i.weight > 0
ON CONFLICT DO NOTHING"""


async def judge_and_check(dsn: str, now: datetime) -> tuple[int, int]:
    """``--judged``: a verdict per labelled item of the weighted sample and a drift check of
    every segment every hour of the 7 days (1-hour recent window against the hour before), as
    the judges and the worker's periodic checks would store them; returns (verdicts, checks)."""
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute(_VERDICTS)
        verdicts = int(await conn.fetchval("SELECT count(*) FROM verdicts"))
    finally:
        await conn.close()
    engine = make_engine(dsn)
    try:
        from monitor.analytics import reports as fa

        end = now.replace(minute=0, second=0, microsecond=0)
        at = end - timedelta(days=7) + timedelta(hours=2)
        while at <= end:
            windows = fa.drift_windows(at, timedelta(hours=1))
            await fa.run_drift(engine, repo.Segment(), windows, min_samples=50)
            at += timedelta(hours=1)
    finally:
        await engine.dispose()
    conn = await asyncpg.connect(dsn)
    try:
        checks = int(await conn.fetchval("SELECT count(*) FROM drift_checks"))
        await conn.execute("VACUUM ANALYZE verdicts")
        for rollup in ("verdict_minutes", "verdict_category_minutes", "verdict_pairs"):
            # kept by triggers on verdicts (migration 0039), so filled by the INSERT above
            if await conn.fetchval("SELECT to_regclass($1)", rollup) is not None:
                await conn.execute(f"VACUUM ANALYZE {rollup}")
        await conn.execute("VACUUM ANALYZE drift_checks")
    finally:
        await conn.close()
    return verdicts, checks


async def _analyze(dsn: str) -> None:
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute("ANALYZE")
    finally:
        await conn.close()


def template_variables(
    specs: list[dict[str, Any]], typed: dict[str, str] | None = None
) -> list[g.Variable]:
    """A board's template variables with every value selected ("All" where offered); a
    textbox gets its value from ``typed`` (what a data link puts there), else ``x``."""
    typed = typed or {}
    return [
        g.Variable(
            v["name"],
            multi=bool(v.get("multi")),
            include_all=bool(v.get("includeAll")),
            all_value=v.get("allValue") or None,
            options=(typed.get(v["name"], "x"),),
            selected=(g.ALL,) if v.get("includeAll") else (typed.get(v["name"], "x"),),
        )
        for v in specs
    ]


def dashboard_queries(
    now: datetime, typed: dict[str, str] | None = None
) -> list[tuple[str, str, str]]:
    """(range, name, sql) of every variable query and panel target, as Grafana sends them
    (``typed``: the values of textbox variables, by name)."""
    out: list[tuple[str, str, str]] = []
    for path in sorted((REPO / "dashboards").glob("*.json")):
        board = json.loads(path.read_text())
        specs = board.get("templating", {}).get("list", [])
        variables = template_variables(specs, typed)
        for label, span in RANGES.items():
            tr = g.TimeRange(now - span, now)
            for v in specs if label == "7d" else []:
                q = v.get("query", "")
                sql = q if isinstance(q, str) else q.get("rawSql", "")
                if v.get("type") == "query" and sql:
                    text = g.interpolate(sql, time_range=tr, interval_ms=60000, search_filter=True)
                    out.append(("-", f"{path.stem} variable ${v['name']}", text))
            for panel in _panels(board):
                for t in panel.get("targets", []):
                    if not t.get("rawSql"):
                        continue
                    ms = g.panel_interval_ms(panel, tr, None)
                    sql = g.interpolate(
                        t["rawSql"], time_range=tr, interval_ms=ms, variables=variables
                    )
                    out.append((label, f"{path.stem} / {panel.get('title')} [{t['refId']}]", sql))
    return out


def _panels(board: dict[str, Any]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for p in board.get("panels", []):
        out.append(p)
        out.extend(p.get("panels", []))
    return out


async def time_sql(conn: asyncpg.Connection, sql: str, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        await conn.fetch(sql)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def time_cli(argv: list[str], db_url: str, repeat: int) -> float:
    env = {**os.environ, "DATABASE_URL": db_url, "MONITOR_DATABASE_URL": db_url}
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        done = subprocess.run(
            [sys.executable, "-m", "monitor.cli", *argv],
            env=env,
            cwd=REPO,
            capture_output=True,
            text=True,
        )
        # 1: an analytics command found something to flag; its --json output still parses
        # (a crash also exits 1, with a traceback instead)
        if done.returncode not in (0, 1) or (done.returncode == 1 and not _is_json(done.stdout)):
            raise RuntimeError(
                f"monitor {' '.join(argv)}: exit {done.returncode}: {done.stderr[-2000:]}"
            )
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


async def time_exemplars(
    dsn: str, now: datetime, repeat: int
) -> tuple[list[tuple[str, str, float, int]], float, int]:
    """``([(rule, agent, median seconds, exemplars found)], record seconds per alert, alerts)``
    of choosing exemplars (see the module docstring)."""
    engine = make_engine(dsn)
    rules = default_rules().rules
    out: list[tuple[str, str, float, int]] = []
    try:
        hour = fa.drift_windows(now, timedelta(hours=1)).recent
        recent = fa.drift_windows(now, timedelta(hours=1), (hour[0] - timedelta(hours=24), hour[0]))
        await fa.run_drift(engine, repo.Segment(), recent)
        async with engine.connect() as conn:
            segments = (
                await conn.execute(
                    text(
                        "SELECT DISTINCT agent_id, coalesce(domain, ''), coalesce(tier, 0)"
                        " FROM conversations ORDER BY 1, 2, 3"
                    )
                )
            ).all()
            scopes = [segment_scope((str(a), str(d), int(str(t)))) for a, d, t in segments]
            await conn.execute(
                text(
                    "UPDATE drift_checks SET fired = true, fired_tests = 'accuracy_drop'"
                    " WHERE recent_to = :end"
                ),
                {"end": recent.recent[1]},
            )
            for rule in rules:
                for scope in scopes:
                    times, found = [], 0
                    for _ in range(repeat):
                        t0 = time.perf_counter()
                        found = len(await exemplar_repo.choose(conn, rule, scope, now, 3))
                        times.append(time.perf_counter() - t0)
                    out.append((rule.name, scope["agent"], statistics.median(times), found))
            fired = [
                AlertState(
                    fingerprint(r.name, sc), r.name, sc, Status.FIRING, fired_at=now, version=1
                )
                for r in rules
                for sc in scopes
            ]
            t0 = time.perf_counter()
            await exemplar_repo.record(conn, {r.name: r for r in rules}, fired, now, 3)
            per_alert = (time.perf_counter() - t0) / len(fired)
            await conn.rollback()  # the fired marks, promotions and rows: all undone
    finally:
        await engine.dispose()
    return out, per_alert, len(fired)


def _is_json(out: str) -> bool:
    try:
        json.loads(out)
    except ValueError:
        return False
    return True


@contextlib.asynccontextmanager
async def _store(args: argparse.Namespace, now: datetime) -> AsyncIterator[str]:
    """The filled store: a scratch database (dropped unless ``--keep``), or ``--reuse``'s."""
    if args.reuse:
        conn = await asyncpg.connect(args.reuse)
        try:
            n = await conn.fetchval("SELECT count(*) FROM items")
        finally:
            await conn.close()
        print(f"reusing {args.reuse}: {n} items (filled earlier; ranges end {now.isoformat()})")
        t0 = time.perf_counter()  # a store kept from an earlier commit gets its new revisions
        await asyncio.to_thread(upgrade, args.reuse)
        print(f"schema upgraded to head in {time.perf_counter() - t0:.1f} s")
        yield args.reuse
        return
    async with scratch_database(args.database_url, "metrics", keep=args.keep) as dsn:
        events, items, secs = await fill(dsn, args.items, args.batch, now, args.order)
        print(
            f"filled: {events} events, {items} items in {secs:.1f} s "
            f"({events / secs:.0f} events/s through EventWriter)"
        )
        if args.judged:
            verdicts, checks = await judge_and_check(dsn, now)
            print(f"judged: {verdicts} verdicts, {checks} drift checks")
        if args.keep:
            print(f"kept for --reuse: {dsn}")
        yield dsn


async def run(args: argparse.Namespace) -> None:
    now = args.now or datetime.now(UTC).replace(microsecond=0)
    cli = {
        name: [*argv, "--to", now.isoformat()] if args.now and argv != ["--help"] else argv
        for name, argv in CLI.items()
    }
    async with _store(args, now) as dsn:
        conn = await asyncpg.connect(dsn)
        results: list[tuple[float, str, str, str]] = []
        try:
            size = await conn.fetchval(
                "SELECT pg_size_pretty(pg_database_size(current_database()))"
            )
            print(f"database size: {size}")
            # a data link's conversation: the latest one with the most events
            typed = {
                "conversation": await conn.fetchval(
                    "SELECT conversation_id FROM conversations"
                    " ORDER BY last_ts DESC, event_count DESC LIMIT 1"
                )
                or "x"
            }
            for label, name, sql in dashboard_queries(now, typed):
                results.append((await time_sql(conn, sql, args.repeat), label, name, sql))
            slow = sorted(results, reverse=True)[: args.plans]
            plans = [
                "\n".join(r[0] for r in await conn.fetch(f"EXPLAIN (ANALYZE, COSTS OFF) {sql}"))
                for _, _, _, sql in slow
            ]
        finally:
            await conn.close()
        cli_s = {name: time_cli(argv, dsn, args.repeat) for name, argv in cli.items()}
        engine = make_engine(dsn)
        try:
            esc = []
            for _ in range(args.repeat):
                t0 = time.perf_counter()
                await escalation_conversations(engine, repo.Segment(), now - timedelta(days=7), now)
                esc.append(time.perf_counter() - t0)
            deff: dict[str, list[float]] = {"roll-up": [], "scan": []}
            for _ in range(args.repeat):
                for way, scan in (("roll-up", False), ("scan", True)):
                    t0 = time.perf_counter()
                    await design_effects(
                        engine,
                        repo.Segment(),
                        now - timedelta(days=7),
                        now,
                        with_total=True,
                        scan=scan,
                    )
                    deff[way].append(time.perf_counter() - t0)
        finally:
            await engine.dispose()
        exemplars, per_alert, alerts = await time_exemplars(dsn, now, args.repeat)
    print(f"\n| query (median of {args.repeat}) | seconds |\n| --- | ---: |")
    for name, s in cli_s.items():
        print(f"| {name} | {s:.3f} |")
    print(
        f"| repo.escalation_conversations (7d, db part of thresholds/escalation) "
        f"| {statistics.median(esc):.3f} |"
    )
    for way, times in deff.items():
        print(
            f"| design effect, 7d per agent and total ({way}; db part of calibration) "
            f"| {statistics.median(times):.3f} |"
        )
    for label in ("-", *RANGES):
        part = [r for r in results if r[1] == label]
        what = "variable queries" if label == "-" else f"dashboard queries, {label} range"
        print(f"| all {len(part)} {what} (sum of medians) | {sum(r[0] for r in part):.3f} |")
        print(f"| max single {what} | {max(r[0] for r in part):.3f} |")
    by_rule: dict[str, list[tuple[float, int]]] = {}
    for rule, _agent, secs, found in exemplars:
        by_rule.setdefault(rule, []).append((secs, found))
    for rule, got in by_rule.items():
        slowest, found = max(got)
        print(
            f"| exemplars of a firing {rule} alert, slowest of {len(got)} agents"
            f" ({found} found) | {slowest:.3f} |"
        )
    print(
        f"| exemplars: everything the evaluator adds per firing alert (record: choose, lock,"
        f" promote, insert; mean over {alerts}) | {per_alert:.3f} |"
    )
    print("\nevery dashboard query, ms (median):")
    for s, label, name, _ in sorted(results, key=lambda r: (r[2], r[1])):
        print(f"{s * 1000:8.1f}  {label:>3}  {name}")
    print("\nslowest dashboard queries:")
    for (s, label, name, _), plan in zip(slow, plans, strict=True):
        print(f"\n{s * 1000:8.1f} ms  {label:>3}  {name}\n{plan}")


def _aware(text: str) -> datetime:
    value = datetime.fromisoformat(text)
    return value if value.tzinfo else value.replace(tzinfo=UTC)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--items", type=int, default=100_000)
    p.add_argument("--batch", type=int, default=5000)
    p.add_argument(
        "--order",
        choices=("time", "conversation"),
        default="time",
        help="fill in global ts order (a live stream; default) or conversation by"
        " conversation (same rows, far faster at 10M items)",
    )
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument(
        "--judged",
        action="store_true",
        help="after the fill, store a verdict per labelled item and a drift check of every"
        " segment every hour (the judges' and drift panels then read real volumes)",
    )
    p.add_argument("--plans", type=int, default=6, help="how many slowest plans to print")
    p.add_argument(
        "--keep",
        action="store_true",
        help="keep the filled database (its URL is printed) for --reuse",
    )
    p.add_argument(
        "--reuse",
        metavar="URL",
        default=None,
        help="time an existing filled database (from --keep) instead of filling one;"
        " the ranges end at the time of this run",
    )
    p.add_argument(
        "--now",
        type=_aware,
        default=None,
        metavar="ISO",
        help="with --reuse: the ranges end here instead of at the run's time (a store"
        " filled up to an earlier time, e.g. a partial fill; the pipeline panels that"
        " filter on ingested_at then see nothing); the CLI gets --to ISO",
    )
    p.add_argument(
        "--database-url",
        default=os.environ.get("DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/postgres"),
    )
    args = p.parse_args()
    if args.now and not args.reuse:
        p.error("--now applies to --reuse only (a fill writes traffic up to the run's time)")
    asyncio.run(run(args))


if __name__ == "__main__":
    main()
