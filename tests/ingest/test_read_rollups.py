"""The read roll-ups kept at ingest equal the direct computation over ``events``.

A store is filled through the real ``EventWriter`` with simulated traffic in several batches,
with one batch written twice (a replay), the outcomes held back and written last (late labels)
and one conversation's escalation written before its first turn. Then every roll-up is compared
with what the pre-issue-13 queries compute from ``events``: ``conversations.first_turn`` and
``v_escalation_conversations`` (against the 0005 view, kept verbatim in migration 0013),
``analytics.repo.escalation_conversations`` (against its former LATERAL query),
``event_minutes``, ``ingest_delay_bins``, ``conversation_minutes`` (against GROUP BY over
``conversations``) and ``v_pipeline`` (against the 0005 view; quantiles
against the exact ones, within their bucket), and ``segment_values`` (against SELECT DISTINCT
over conversations). The migration's back-fill is checked the same way (down to 0011, up again)
and no dashboard query's plan reads ``events``.
"""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import asyncpg

from monitor.analytics import repo
from monitor.analytics.repo_escalation import escalation_conversations_per_row
from monitor.ingest import conversation_minutes_sql
from monitor.ingest.rows import event_row
from monitor.ingest.writer import EventWriter
from monitor.sim.traffic import Simulator
from monitor.store.engine import downgrade, libpq_url, make_engine, upgrade
from tests.dashboards import grafana_sql as g
from tests.migrations import load_migration

REPO = Path(__file__).resolve().parents[2]


M = load_migration("0013_read_rollups")
NOW = datetime.now(UTC).replace(microsecond=0)


async def fill(database_url: str) -> None:
    """Simulated traffic over the last 3 hours, with a replay, late outcomes, reordering."""
    sim = Simulator(seed=7, start=NOW - timedelta(hours=3), interval=timedelta(seconds=40))
    events = [e for e in sim.events(240) if e.ts <= NOW]
    outcomes = [e for e in events if e.type == "outcome"]
    rest = [e for e in events if e.type != "outcome"]
    # one escalated conversation: its escalation first, alone, then the rest of it later
    esc = next(e for e in rest if e.type == "escalation" and e.turn)
    rest.remove(esc)
    writer = EventWriter(database_url)
    try:
        await writer.write([event_row(esc)])
        batches = [rest[i : i + 300] for i in range(0, len(rest), 300)]
        for i, batch in enumerate(batches):
            await writer.write([event_row(e) for e in batch])
            if i == 1:  # a replayed batch changes nothing
                again = await writer.write([event_row(e) for e in batch])
                assert again.inserted == 0
        await writer.write([event_row(e) for e in outcomes[: len(outcomes) // 2]])
        await writer.write([event_row(e) for e in outcomes])  # half of it replayed
        await writer.write([event_row(esc)])
    finally:
        await writer.close()


async def rows(conn: asyncpg.Connection, sql: str) -> list[tuple[Any, ...]]:
    return sorted((tuple(r) for r in await conn.fetch(sql)), key=repr)


MINUTES = """SELECT date_trunc('minute', ingested_at, 'UTC'), type, agent_id,
  coalesce(domain, ''), coalesce(tier, 0), count(*) FROM events GROUP BY 1, 2, 3, 4, 5"""
DELAYS = (
    f"SELECT date_trunc('minute', ingested_at, 'UTC'), {M.BUCKET}, count(*) FROM events"
    " GROUP BY 1, 2"
)
SEGMENTS = """SELECT 'agent', agent_id FROM conversations UNION
SELECT 'domain', domain FROM conversations WHERE domain IS NOT NULL UNION
SELECT 'tier', tier::text FROM conversations WHERE tier IS NOT NULL"""
EXACT_DELAY = """SELECT date_trunc('minute', ingested_at, 'UTC') AS minute,
  percentile_disc(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM ingested_at - ts)) AS p50,
  percentile_disc(0.95) WITHIN GROUP (ORDER BY extract(epoch FROM ingested_at - ts)) AS p95
FROM events GROUP BY 1"""
OLD_ESCALATION_REPO = """SELECT c.agent_id, c.min_confidence, c.escalated, c.outcome_success,
  c.sample_weight, c.escalation_turn - coalesce(t.first_turn, 0) AS turns,
  extract(epoch FROM c.escalated_at - c.first_ts) AS seconds
FROM conversations c LEFT JOIN LATERAL (SELECT min(turn) AS first_turn FROM events e
  WHERE e.conversation_id = c.conversation_id) t ON c.escalated
WHERE c.sample_weight > 0 ORDER BY c.agent_id, c.first_ts, c.conversation_id"""


async def assert_rollups_equal_direct(conn: asyncpg.Connection) -> None:
    assert await rows(conn, "SELECT * FROM event_minutes") == await rows(conn, MINUTES)
    assert await rows(conn, "SELECT * FROM ingest_delay_bins") == await rows(conn, DELAYS)
    assert await rows(conn, "SELECT * FROM segment_values") == await rows(conn, SEGMENTS)
    # conversation_minutes: a conversation moved to an earlier minute (its first event late)
    # leaves an all-zero row behind
    kept = await rows(conn, "SELECT * FROM conversation_minutes WHERE conversations <> 0")
    assert kept == await rows(conn, conversation_minutes_sql.backfill())
    assert (
        await conn.fetchval(
            "SELECT count(*) FROM conversation_minutes WHERE"
            " conversations = 0 AND (escalated, with_outcome, tool_results)"
            " <> (0, 0, 0)"
        )
        == 0
    )
    assert sum(r[5] for r in kept) >= 10 and sum(r[7] for r in kept) >= 10  # escalated, ok
    first = await rows(conn, "SELECT conversation_id, first_turn FROM conversations")
    direct = await rows(conn, "SELECT conversation_id, min(turn) FROM events GROUP BY 1")
    assert first == direct
    view = await rows(conn, "SELECT * FROM v_escalation_conversations")
    assert view == await rows(conn, M.OLD_ESCALATION)
    assert sum(1 for r in view if r[8]) >= 10  # escalated conversations are compared
    new_pipe = await conn.fetch("SELECT * FROM v_pipeline ORDER BY time")
    old_pipe = await conn.fetch(f"SELECT * FROM ({M.OLD_PIPELINE}) o ORDER BY time")
    assert [r[:4] for r in new_pipe] == [r[:4] for r in old_pipe]
    exact = {r["minute"]: r for r in await conn.fetch(EXACT_DELAY)}
    assert exact
    for r in new_pipe:
        for col, q in (("delay_p50_s", "p50"), ("delay_p95_s", "p95")):
            # the upper edge of the bucket that holds the exact quantile (each about 19 % wide)
            assert r[col] / 2**0.25 < exact[r["time"]][q] <= r[col] * (1 + 1e-9)


async def test_rollups_equal_the_direct_computation(database_url: str) -> None:
    await fill(database_url)
    conn = await asyncpg.connect(libpq_url(database_url))
    try:
        await assert_rollups_equal_direct(conn)
        old = [tuple(r) for r in await conn.fetch(OLD_ESCALATION_REPO)]
    finally:
        await conn.close()
    engine = make_engine(database_url)
    try:
        got = await escalation_conversations_per_row(
            engine, repo.Segment(), NOW - timedelta(days=1), NOW + timedelta(days=1)
        )
    finally:
        await engine.dispose()
    turns = [(c.escalated, c.escalation_turn) for convs in got.values() for c in convs]
    want = [(bool(r[2]), int(r[5]) if r[2] and r[5] is not None else None) for r in old]
    assert turns == want
    assert any(t for e, t in turns if e)  # non-zero turns to escalation are compared


async def test_migration_backfills_the_rollups(database_url: str) -> None:
    await fill(database_url)
    await asyncio.to_thread(downgrade, database_url, "0011")  # drops the roll-ups
    await asyncio.to_thread(upgrade, database_url, "head")  # back-fills them from events
    conn = await asyncpg.connect(libpq_url(database_url))
    try:
        assert await conn.fetchval("SELECT count(*) FROM event_minutes") > 0
        await assert_rollups_equal_direct(conn)
        await fill(database_url)  # everything replayed after the back-fill: no double count
        await assert_rollups_equal_direct(conn)
    finally:
        await conn.close()


def dashboard_sql() -> list[tuple[str, str]]:
    out = []
    tr = g.TimeRange(NOW - timedelta(days=7), NOW)
    for path in sorted((REPO / "dashboards").glob("*.json")):
        board = json.loads(path.read_text())
        specs = board.get("templating", {}).get("list", [])
        variables = [  # the scope at All; a textbox (one conversation) typed "x"
            g.Variable(
                v["name"],
                multi=True,
                include_all=True,
                all_value=v.get("allValue") or None,
                options=("x",),
            )
            if v["type"] == "query"
            else g.Variable(v["name"], options=("x",), selected=("x",))
            for v in specs
        ]
        for v in (v for v in specs if v["type"] == "query"):
            out.append(
                (
                    f"{path.stem} ${v['name']}",
                    g.interpolate(v["query"], time_range=tr, interval_ms=60000, search_filter=True),
                )
            )
        for p in board.get("panels", []):
            for t in p.get("targets", []):
                if t.get("rawSql"):
                    out.append(
                        (
                            f"{path.stem} / {p.get('title')}",
                            g.interpolate(
                                t["rawSql"], time_range=tr, interval_ms=60000, variables=variables
                            ),
                        )
                    )
    return out


async def test_no_dashboard_query_reads_events(database_url: str) -> None:
    await fill(database_url)
    conn = await asyncpg.connect(libpq_url(database_url))
    try:
        reading = []
        for name, sql in dashboard_sql():
            plan = json.dumps(json.loads(await conn.fetchval(f"EXPLAIN (FORMAT JSON) {sql}")))
            if '"Relation Name": "events"' in plan:
                reading.append(name)
        assert reading == []
        # the escalation panels read escalation_bins, not one row per conversation;
        # the list of missed escalations names conversations, so it still reads them
        per_row, checked = [], 0
        for name, sql in dashboard_sql():
            if (
                not name.startswith("escalation / ")
                or "escalation_bins" not in sql
                or name == "escalation / Missed escalations"
            ):
                continue
            plan = json.dumps(json.loads(await conn.fetchval(f"EXPLAIN (FORMAT JSON) {sql}")))
            assert '"Relation Name": "escalation_bins"' in plan, name
            checked += 1
            if '"Relation Name": "conversations"' in plan:
                per_row.append(name)
        assert per_row == [] and checked >= 8
        plan = await conn.fetchval(
            "EXPLAIN (FORMAT JSON) SELECT * FROM v_pipeline WHERE time >= now() - interval '1 hour'"
        )
        assert '"Relation Name": "event_minutes"' in json.dumps(json.loads(plan))
    finally:
        await conn.close()


async def test_event_minutes_view_shows_null_for_missing_segments(database_url: str) -> None:
    await fill(database_url)
    conn = await asyncpg.connect(libpq_url(database_url))
    try:
        got = await rows(
            conn, "SELECT time, type, agent_id, domain, tier, events FROM v_event_minutes"
        )
        direct = await rows(
            conn,
            "SELECT date_trunc('minute', ingested_at, 'UTC'), type,"
            " agent_id, domain, tier, count(*) FROM events GROUP BY 1, 2, 3, 4, 5",
        )
        assert got == direct
    finally:
        await conn.close()
