"""Retention against real Postgres: 40 days of simulated traffic written
through the real ``EventWriter``, one retention run, then

- the events partitions of days before the events horizon are gone (whole tables), except a
  day replayed (written into) within the horizon; the rest of the events are all there, and
  every older 1-minute / hourly / daily sum, item and (dropped) event id is deleted;
- every aggregate over a window the horizons leave whole is unchanged: calibration sums at each
  resolution, every dashboard query (24h and 7d, as Grafana sends them), the analytics CLI
  (calibration, escalation, thresholds) with a fixed range;
- the run is counted in the worker's metrics, and a second run removes nothing more.
"""

from __future__ import annotations

import asyncio
import json
import math
from datetime import UTC, datetime, timedelta

import asyncpg
from typer.testing import CliRunner

from monitor.analytics import repo, repo_escalation
from monitor.analytics.bins import BinSums
from monitor.analytics.design_effect import design_effects
from monitor.cli.main import app
from monitor.core.retention_settings import RetentionSettings, midnight
from monitor.ingest.rows import event_row
from monitor.ingest.writer import EventWriter
from monitor.sim.traffic import Simulator
from monitor.store import partitions
from monitor.store.engine import libpq_url, make_engine
from monitor.store.retention import run_retention
from monitor.telemetry.ops_metrics import OpsMetrics
from tests.factories import T0, event
from tests.ingest.test_read_rollups import dashboard_sql

NOW = datetime.now(UTC).replace(microsecond=0)
TODAY = midnight(NOW.date())
SETTINGS = RetentionSettings(
    retention_events_days=30,
    retention_event_ids_days=30,
    retention_minute_sums_days=30,
    retention_hourly_sums_days=34,
    retention_daily_sums_days=37,
    retention_items_days=30,
    retention_conversations_days=30,
    retention_dead_letters_days=30,
    retention_verdicts_days=30,
    partitions_ahead_days=2,
)
CLI_FROM, CLI_TO = (TODAY - timedelta(days=20)).isoformat(), TODAY.isoformat()


REPLAYED = event(
    "replayed",
    "c-replayed",
    "tool_result",
    at=(TODAY - timedelta(days=35, hours=-1) - T0).total_seconds(),
)


_LIVE = (
    "LEAST({col} + interval '2 seconds',"
    " date_trunc('day', {col}, 'UTC') + interval '1 day' - interval '1 millisecond')"
)


async def fill(url: str) -> int:
    """40 days of traffic (about 800 conversations) in batches of 500 events, ingested as if
    live (``ingested_at`` = ts + 2 s within its UTC day: Postgres's clock cannot be moved),
    then one event of a day past the horizon replayed now."""
    start = NOW - timedelta(days=40)
    sim = Simulator(seed=11, start=start, interval=timedelta(days=40) / 800)
    events = [e for e in sim.events(800) if e.ts <= NOW]
    writer = EventWriter(url)
    try:
        for i in range(0, len(events), 500):
            await writer.write([event_row(e) for e in events[i : i + 500]])
        conn = await asyncpg.connect(libpq_url(url))
        try:
            # 2 s later, but never past the end of the event's UTC day: an event of the last
            # 2 s before the cut's midnight would otherwise count as its day written into
            # since the horizon, and keep that day (what depends on the time the test runs)
            await conn.execute(f"UPDATE events SET ingested_at = {_LIVE.format(col='ts')}")
            await conn.execute(
                f"UPDATE conversations SET updated_at = {_LIVE.format(col='last_ts')}"
            )
        finally:
            await conn.close()
        assert (await writer.write([event_row(REPLAYED)])).inserted == 1
        await age_side_tables(url)
    finally:
        await writer.close()
    return len(events) + 1


async def age_side_tables(url: str) -> None:
    """Dead letters and judge verdicts/requests, one per day of the 40 (their time columns
    default to now(), so they are set here)."""
    conn = await asyncpg.connect(libpq_url(url))
    try:
        for d in range(40):
            at = NOW - timedelta(days=d, hours=1)
            await conn.execute(
                "INSERT INTO dead_letters (source, reason, detail, raw, raw_md5, received_at)"
                " VALUES ('test', 'invalid_json', 'x', '\\x00', md5($1), $2)",
                str(d),
                at,
            )
            await conn.execute(
                "INSERT INTO verdicts (conversation_id, agent_id, judge, judge_version, status,"
                " created_at) VALUES ($1, 'a', 'j', '1', 'ok', $2)",
                f"v{d}",
                at,
            )
            await conn.execute(
                "INSERT INTO judge_requests (conversation_id, agent_id, reasons, requested_at)"
                " VALUES ($1, 'a', '[]', $2)",
                f"v{d}",
                at,
            )
    finally:
        await conn.close()


def windows() -> dict[str, tuple[datetime, datetime]]:
    """Calibration windows inside each horizon (1m: not hour-aligned; 1h; 1d). The 1h window
    starts an hour off the day so that it is not whole days when run in the first hour of a UTC
    day (its end is then midnight)."""
    hour = NOW.replace(minute=0, second=0)
    return {
        "1m": (NOW - timedelta(days=29, minutes=17), NOW),
        "1h": (hour - timedelta(days=33, hours=1), hour),
        "1d": (TODAY - timedelta(days=36), TODAY),
        "past": (TODAY - timedelta(days=40), TODAY - timedelta(days=31, minutes=3)),
    }


def rounded(sums: BinSums) -> str:
    """The sums to 9 significant digits (the same rows summed by different plans may round
    differently in the last bits), the counts exactly."""
    floats = (sums.weight, sums.sum_conf, sums.sum_y, sums.sum_sq_err, sums.sum_w2)
    return f"{sums.count.tolist()} " + " ".join(f"{x:.9g}" for a in floats for x in a)


def row_key(row: tuple[object, ...]) -> str:
    """A panel row's sort key: its floats to 9 significant digits (see :func:`rounded`)."""
    return repr(tuple(f"{x:.9g}" if isinstance(x, float) else x for x in row))


def close(got: object, want: object) -> bool:
    """Equal but for the last bits of floats (relative 1e-12), in lists, tuples and dicts: the
    SQL sums the same bins in an order its plan chooses, which may differ before and after
    retention deleted rows (other keys and every count compare exactly)."""
    if isinstance(got, float) and isinstance(want, float):
        return math.isclose(got, want, rel_tol=1e-12, abs_tol=1e-15)
    if isinstance(got, (list, tuple)) and isinstance(want, (list, tuple)):
        return len(got) == len(want) and all(close(g, w) for g, w in zip(got, want, strict=True))
    if isinstance(got, dict) and isinstance(want, dict):
        return got.keys() == want.keys() and all(close(got[k], want[k]) for k in got)
    return got == want


async def aggregates(url: str) -> dict[str, object]:
    out: dict[str, object] = {}
    engine = make_engine(url)
    try:
        # the part of the past window whose sums retention keeps: whole days after the daily
        # horizon (37 days), whole hours after the hourly one (34); its edge minutes go (30)
        kept = (TODAY - timedelta(days=37), windows()["past"][1].replace(minute=0))
        for name, (lo, hi) in {**windows(), "past kept": kept}.items():
            assert repo.bin_range(lo, hi)[0] == {"past": "1m", "past kept": "1h"}.get(name, name)
            sums = await repo.bin_sums(engine, repo.Segment(), lo, hi, group_by=("agent_id",))
            out[f"bins {name}"] = sorted((k, rounded(v)) for k, v in sums.items())
        # inside the items' horizon (30 days), with and without partial hours, and past it
        hour = NOW.replace(minute=0, second=0)
        for name, (lo, hi) in {
            "1m": windows()["1m"],
            "1h": (hour - timedelta(days=29), hour),
            "past": windows()["past"],
        }.items():
            deffs = await design_effects(engine, repo.Segment(), lo, hi, with_total=True)
            out[f"design effects {name}"] = sorted(deffs.items())
        esc = await repo_escalation.escalation_conversations(
            engine, repo.Segment(), TODAY - timedelta(days=20), TODAY
        )
        out["escalation"] = sorted((k, repr(v)) for k, v in esc.items())
    finally:
        await engine.dispose()
    conn = await asyncpg.connect(libpq_url(url))
    try:
        for name, sql in dashboard_sql():
            rows = await conn.fetch(sql)
            out[f"panel {name}"] = sorted((tuple(r) for r in rows), key=row_key)
    finally:
        await conn.close()
    for cmd in ("calibration", "escalation", "thresholds"):
        result = await asyncio.to_thread(  # the CLI runs its own event loop
            CliRunner().invoke,
            app,
            [cmd, "--from", CLI_FROM, "--to", CLI_TO, "--json"],
            env={"MONITOR_DATABASE_URL": url},
        )
        assert result.exit_code == 0, result.output
        out[f"cli {cmd}"] = json.loads(result.stdout)
    return out


async def counts(conn: asyncpg.Connection) -> dict[str, int]:
    cut = TODAY - timedelta(days=30)
    sqls = {
        "events old": "SELECT count(*) FROM events WHERE ts < $1",
        "events kept": "SELECT count(*) FROM events WHERE ts >= $1",
        "ids old": "SELECT count(*) FROM event_ids WHERE ts < $1",
        "items old": "SELECT count(*) FROM items WHERE ts < $1",
        "item hours old": "SELECT count(*) FROM item_hours WHERE hour < $1",
        "design hours old": "SELECT count(*) FROM design_hours WHERE hour < $1",
        "label hours old": "SELECT count(*) FROM label_hours WHERE hour < $1",
        "bins 1m old": "SELECT count(*) FROM calibration_bins WHERE resolution = '1m'"
        " AND window_start < $1",
        "bins 1h old": "SELECT count(*) FROM calibration_bins WHERE resolution = '1h'"
        " AND window_start < $1::timestamptz - interval '4 days'",
        "bins 1d old": "SELECT count(*) FROM calibration_bins WHERE resolution = '1d'"
        " AND window_start < $1::timestamptz - interval '7 days'",
        "bins 1d kept": "SELECT count(*) FROM calibration_bins WHERE resolution = '1d'"
        " AND window_start >= $1::timestamptz - interval '7 days'",
        "esc 1h old": "SELECT count(*) FROM escalation_bins WHERE resolution = '1h'"
        " AND window_start < $1::timestamptz - interval '4 days'",
        "esc 1d old": "SELECT count(*) FROM escalation_bins WHERE resolution = '1d'"
        " AND window_start < $1::timestamptz - interval '7 days'",
        "esc 1h kept": "SELECT count(*) FROM escalation_bins WHERE resolution = '1h'"
        " AND window_start >= $1::timestamptz - interval '4 days'",
        "conversations old": "SELECT count(*) FROM conversations WHERE last_ts < $1"
        " AND conversation_id <> 'c-replayed'",
        "conversations kept": "SELECT count(*) FROM conversations WHERE last_ts >= $1",
        "conv minutes old": "SELECT count(*) FROM conversation_minutes WHERE minute < $1",
        "dead letters old": "SELECT count(*) FROM dead_letters WHERE received_at < $1",
        "dead letters kept": "SELECT count(*) FROM dead_letters WHERE received_at >= $1",
        "verdicts old": "SELECT count(*) FROM verdicts WHERE created_at < $1",
        "judge requests old": "SELECT count(*) FROM judge_requests WHERE requested_at < $1",
    }
    return {k: int(await conn.fetchval(sql, cut)) for k, sql in sqls.items()}


async def test_retention_drops_old_days_and_keeps_every_remaining_aggregate(
    database_url: str,
) -> None:
    written = await fill(database_url)
    before = await aggregates(database_url)
    assert all(before[k] for k in ("bins past", "bins 1m", "bins 1h", "bins 1d", "escalation"))
    panels = [k for k in before if k.startswith("panel ")]
    assert sum(1 for k in panels if before[k]) >= len(panels) // 2  # panels with rows compared
    conn = await asyncpg.connect(libpq_url(database_url))
    engine = make_engine(database_url)
    try:
        old = await counts(conn)
        assert old["events old"] + old["events kept"] == written
        assert all(v > 0 for v in old.values()), old  # every kind has rows to remove
        async with engine.connect() as c:
            days_before = await partitions.partition_days(c)
        assert days_before[0] <= (TODAY - timedelta(days=39)).date()

        day_lo = midnight(REPLAYED.ts.date())
        on_day = int(
            await conn.fetchval(
                "SELECT count(*) FROM events WHERE ts >= $1 AND ts < $2",
                day_lo,
                day_lo + timedelta(days=1),
            )
        )
        assert on_day > 1  # the day's live events and the replayed one

        report = await run_retention(engine, SETTINGS, NOW)
        assert report.ran and report.failed == []
        async with engine.connect() as c:
            days_after = await partitions.partition_days(c)
        cut = (TODAY - timedelta(days=30)).date()
        replayed_day = REPLAYED.ts.date()
        # the replayed old day stays (written into within the horizon); the next day is kept
        assert days_after[:2] == [replayed_day, cut]
        assert days_after[-1] == NOW.date() + timedelta(days=2)  # created ahead
        assert report.partitions_dropped == len([d for d in days_before if d < cut]) - 1
        # today (when no event fell on it yet: the first hour of a UTC day) and the 2 days ahead
        ahead = {NOW.date() + timedelta(days=k) for k in range(3)}
        assert report.partitions_created == len(ahead - set(days_before)) >= 2
        new = await counts(conn)
        zero = (
            "items old",
            "item hours old",
            "design hours old",
            "label hours old",
            "bins 1m old",
            "bins 1h old",
            "bins 1d old",
            "esc 1h old",
            "esc 1d old",
            "conversations old",
            "conv minutes old",
            "dead letters old",
            "verdicts old",
            "judge requests old",
        )
        assert {k: new[k] for k in zero} == dict.fromkeys(zero, 0)
        assert new["events old"] == new["ids old"] == on_day  # that day's events and ids
        assert new["events kept"] == old["events kept"]
        for kept in ("bins 1d kept", "esc 1h kept", "conversations kept", "dead letters kept"):
            assert new[kept] == old[kept], kept
        assert report.deleted["conversations"] == old["conversations old"]
        # the replayed conversation's row was written into today: kept though its events are old
        assert (
            await conn.fetchval(
                "SELECT event_count FROM conversations WHERE conversation_id = 'c-replayed'"
            )
            == 1
        )
        assert report.deleted["dead_letters"] == old["dead letters old"] > 0
        assert report.deleted["event_ids"] == old["ids old"] - on_day
        assert report.deleted["items"] == old["items old"]
        # the minute sums of ingestion (all written today) are inside their horizon: kept
        assert report.deleted["event_minutes"] == 0 and report.deleted["ingest_delay_bins"] == 0

        metrics = OpsMetrics()
        metrics.retention(report, NOW.timestamp())
        text = metrics.render().decode()
        assert (
            f'monitor_retention_partitions_total{{action="dropped"}} '
            f"{float(report.partitions_dropped)}" in text
        )
        assert 'monitor_retention_runs_total{result="ok"} 1.0' in text

        again = await run_retention(engine, SETTINGS, NOW)
        assert again.partitions_dropped == again.partitions_created == 0
        assert set(again.deleted.values()) == {0}
    finally:
        await conn.close()
        await engine.dispose()

    after = await aggregates(database_url)
    # read as days, hours and edge minutes (repo.bin_pieces), the past window keeps what the
    # daily and hourly sums' horizons keep
    assert after["bins past"] == before["bins past kept"] != before["bins past"]
    assert after["design effects past"] == [] != before["design effects past"]
    for key in before:
        if not key.endswith(" past"):
            assert close(after[key], before[key]), (key, after[key], before[key])
