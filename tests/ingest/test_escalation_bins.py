"""``escalation_bins`` against the per-conversation answers on the same data.

The store is filled through the real write path (``EventWriter``) with traffic over 50 hours,
two sampling policies (weights 2 and 4, and unsampled conversations), a replayed batch, late
outcomes (half of them replayed), an escalation that arrives long after its conversation and
an early event that arrives late (it moves the conversation's ``first_ts``). Then:

- the roll-up equals the migration's back-fill computed from ``conversations`` now;
- the escalation read from the roll-up returns the same conversations as the per-row read
  (confidence, escalated, outcome, weight, turns exactly; seconds within the documented
  2^(1/16) bucket bound) for aligned, unaligned and sub-hour ranges and a segment filter, and
  the CLI analytics (threshold table, advisor, escalation summary) give the same answers;
- downgrade + upgrade back-fills the same table, and a replay afterwards changes nothing.
"""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from monitor.analytics.advisor import advise
from monitor.analytics.escalation import (
    ConversationEscalation,
    escalation_by_bin,
    inversion_test,
    missed_escalations,
    time_to_escalation,
)
from monitor.analytics.repo import Segment
from monitor.analytics.repo_escalation import (
    escalation_conversations,
    escalation_conversations_per_row,
    split_range,
)
from monitor.analytics.thresholds import threshold_table
from monitor.ingest.rows import event_row
from monitor.ingest.writer import EventWriter
from monitor.sampling.policy import SamplingPolicy
from monitor.sim.traffic import Simulator
from monitor.store.engine import downgrade, libpq_url, make_engine, upgrade
from tests.dashboards import grafana_sql
from tests.migrations import load_migration

REPO = Path(__file__).resolve().parents[2]
# A fixed time of day (yesterday 13:41:17 UTC): the range assertions below need the 7-day range
# to start inside an hour that is not the day's last (CI once ran at 23:xx and failed).
NOW = (datetime.now(UTC) - timedelta(days=1)).replace(hour=13, minute=41, second=17, microsecond=0)
BUCKET = 2 ** (1 / 16)


M = load_migration("0014_escalation_bins")
DIRECT = f"""
SELECT r.resolution, date_trunc(r.unit, k.first_ts, 'UTC'), {", ".join(M.KEY_COLUMNS)}, count(*)
FROM (SELECT c.first_ts, {M.KEY0} FROM conversations c WHERE c.sample_weight > 0
      UNION ALL
      SELECT c.first_ts, {M.KEY1} FROM conversations c WHERE c.sample_weight > 0 AND c.escalated
     ) AS k(first_ts, {", ".join(M.KEY_COLUMNS)})
CROSS JOIN (VALUES ('1h', 'hour'), ('1d', 'day')) AS r(resolution, unit)
GROUP BY {", ".join(str(i) for i in range(1, len(M.KEY_COLUMNS) + 3))}"""
STORED = f"""SELECT resolution, window_start, {", ".join(M.KEY_COLUMNS)}, conversations
FROM escalation_bins WHERE conversations <> 0"""


async def fill(database_url: str, before_outcomes: Any = None) -> None:
    """The traffic of the module docstring; ``before_outcomes(database_url)`` (when given) is
    awaited after every other event is written and before the (late) outcomes."""
    sim = Simulator(seed=11, start=NOW - timedelta(hours=50), interval=timedelta(minutes=10))
    events = [e for e in sim.events(300) if e.ts <= NOW]
    outcomes = [e for e in events if e.type == "outcome"]
    rest = [e for e in events if e.type != "outcome"]
    late_esc = next(e for e in rest if e.type == "escalation" and e.turn)
    late_first = next(
        e
        for e in rest
        if e.conversation_id != late_esc.conversation_id and e.type == "message" and e.turn == 0
    )
    rest = [e for e in rest if e is not late_esc and e is not late_first]
    writers = [
        EventWriter(database_url, policy=SamplingPolicy(default_rate=r)) for r in (0.5, 0.25)
    ]
    try:
        batches = [rest[i : i + 250] for i in range(0, len(rest), 250)]
        for i, batch in enumerate(batches):
            await writers[i % 2].write([event_row(e) for e in batch])
            if i == 2:  # a replayed batch changes nothing
                assert (await writers[1].write([event_row(e) for e in batch])).inserted == 0
        if before_outcomes is not None:
            await before_outcomes(database_url)
        await writers[0].write([event_row(e) for e in outcomes[: len(outcomes) // 2]])
        await writers[1].write([event_row(e) for e in outcomes])  # half of it replayed
        await writers[0].write([event_row(late_esc), event_row(late_first)])
    finally:
        for w in writers:
            await w.close()


async def stored_and_direct(database_url: str) -> tuple[Counter[Any], Counter[Any]]:
    conn = await asyncpg.connect(libpq_url(database_url))
    try:
        stored = Counter({tuple(r[:-1]): r[-1] for r in await conn.fetch(STORED)})
        direct = Counter({tuple(r[:-1]): r[-1] for r in await conn.fetch(DIRECT)})
    finally:
        await conn.close()
    return stored, with_marginals(direct)


def with_marginals(rows: Counter[Any]) -> Counter[Any]:
    """``rows`` (kinds 0 and 1, keyed as STORED) plus kind 1's two marginals (migration 0021):
    kind 2 without turns, kind 3 without seconds buckets."""
    out = Counter(rows)
    for key, n in rows.items():
        if key[2] == 1:
            out[(*key[:2], 2, *key[3:11], -1, key[12])] += n
            out[(*key[:2], 3, *key[3:12], -1)] += n
    return out


def body(c: ConversationEscalation) -> tuple[Any, ...]:
    return (c.min_confidence, c.escalated, c.success, c.weight)


def timing(cs: list[ConversationEscalation]) -> tuple[list[Any], list[Any]]:
    esc = [c for c in cs if c.escalated]
    turns = sorted((c.weight, c.escalation_turn) for c in esc if c.escalation_turn is not None)
    secs = sorted((c.weight, c.escalation_seconds) for c in esc if c.escalation_seconds is not None)
    return turns, secs


def assert_same(got: list[ConversationEscalation], want: list[ConversationEscalation]) -> None:
    assert Counter(map(body, got)) == Counter(map(body, want))
    (g_turns, g_secs), (w_turns, w_secs) = timing(got), timing(want)
    assert g_turns == w_turns
    assert [w for w, _ in g_secs] == [w for w, _ in w_secs]
    # per weight, the k-th smallest read-back value is within the bucket of the k-th exact one
    for (_, g), (_, w) in zip(g_secs, w_secs, strict=True):
        assert w - 1e-9 <= g <= w * BUCKET + 0.001 + 1e-9
    exact, rolled = time_to_escalation(want), time_to_escalation(got)
    assert (rolled.n_turns, rolled.median_turns, rolled.p90_turns) == (
        exact.n_turns,
        exact.median_turns,
        exact.p90_turns,
    )
    for q in ("median_seconds", "p90_seconds"):
        e, r = getattr(exact, q), getattr(rolled, q)
        assert (e is None) == (r is None)
        if e is not None:
            assert e - 1e-9 <= r <= e * BUCKET + 0.001 + 1e-9
    assert threshold_table(got) == threshold_table(want)
    assert advise(got, budget=0.3) == advise(want, budget=0.3)
    assert inversion_test(got) == inversion_test(want)
    for a, b in zip(escalation_by_bin(got), escalation_by_bin(want), strict=True):
        assert (a.n, a.rate is None) == (b.n, b.rate is None)
        assert a.weight == pytest.approx(b.weight) and a.rate == pytest.approx(b.rate)
    assert missed_escalations(got, 0.5) == missed_escalations(want, 0.5)


async def outcomes_unknown(database_url: str) -> None:
    stored, direct = await stored_and_direct(database_url)
    assert stored == direct
    assert -1 in {k[9] for k in stored if k[2] == 0}  # outcome not known yet


async def test_rollup_equals_per_conversation_answers(database_url: str) -> None:
    await fill(database_url, outcomes_unknown)
    stored, direct = await stored_and_direct(database_url)
    assert stored == direct
    assert {k[2] for k in stored} == {0, 1, 2, 3}  # every kind of row
    assert {k[10] for k in stored} >= {2.0, 4.0}  # both sampling weights
    assert {k[9] for k in stored if k[2] == 0} >= {0, 1}  # failed, succeeded
    hour = NOW.replace(minute=0, second=0)
    ranges = [
        (NOW - timedelta(days=7), NOW + timedelta(hours=1)),  # whole store, days and hours
        (NOW - timedelta(hours=37, minutes=13), NOW - timedelta(hours=2, minutes=7)),
        (hour - timedelta(hours=5, minutes=50), hour - timedelta(hours=5, minutes=10)),
    ]
    parts = split_range(*ranges[0])
    assert parts["d_lo"] < parts["d_hi"] and parts["h_lo"] < parts["d_lo"]
    engine = make_engine(database_url)
    try:
        seen = 0
        for lo, hi in ranges:
            for seg in (Segment(), Segment(agent="*")):
                got = await escalation_conversations(engine, seg, lo, hi)
                want = await escalation_conversations_per_row(engine, seg, lo, hi)
                assert sorted(got) == sorted(want)
                for agent in want:
                    assert_same(got[agent], want[agent])
                    seen += len(want[agent])
        assert seen > 100
        agent = sorted(await escalation_conversations_per_row(engine, Segment(), *ranges[0]))[0]
        one = Segment(agent=agent)
        got = await escalation_conversations(engine, one, *ranges[0])
        want = await escalation_conversations_per_row(engine, one, *ranges[0])
        assert list(got) == [agent] and list(want) == [agent]
        assert_same(got[agent], want[agent])
    finally:
        await engine.dispose()


async def test_migration_backfills_escalation_bins(database_url: str) -> None:
    await fill(database_url)
    before, _ = await stored_and_direct(database_url)
    await asyncio.to_thread(downgrade, database_url, "0013")  # drops the roll-up
    await asyncio.to_thread(upgrade, database_url, "head")  # back-fills it
    after, direct = await stored_and_direct(database_url)
    assert after == before == direct and sum(after.values()) > 0
    await fill(database_url)  # everything replayed after the back-fill: no double count
    again, _ = await stored_and_direct(database_url)
    assert again == before
    await asyncio.to_thread(downgrade, database_url, "0020")  # kinds 2 and 3 deleted
    two_kinds, _ = await stored_and_direct(database_url)
    assert with_marginals(two_kinds) == before and {k[2] for k in two_kinds} == {0, 1}
    await asyncio.to_thread(upgrade, database_url, "head")  # kinds 2, 3 from kind 1
    assert (await stored_and_direct(database_url))[0] == before


# the escalation panels before escalation_bins (one row per conversation), as they were
OLD_PANELS = {
    "Escalation rate": """SELECT sum(weight * escalated::int) / NULLIF(sum(weight), 0)
FROM v_escalation_conversations WHERE time >= $1 AND time < $2""",
    "Missed escalations (min confidence < 0.5)": """SELECT count(*)
FROM v_escalation_conversations
WHERE failed AND NOT escalated AND min_confidence < 0.5 AND time >= $1 AND time < $2""",
    "Escalation rate by confidence bin": """SELECT confidence_bin,
  sum(weight * escalated::int) / NULLIF(sum(weight), 0),
  sum(weight * failed::int) FILTER (WHERE outcome_known)
    / NULLIF(sum(weight) FILTER (WHERE outcome_known), 0)
FROM v_escalation_conversations
WHERE confidence_bin IS NOT NULL AND time >= $1 AND time < $2
GROUP BY confidence_bin ORDER BY confidence_bin""",
    "Threshold curve": """SELECT t.t,
  sum(c.weight) FILTER (WHERE c.min_confidence < t.t) / NULLIF(sum(c.weight), 0),
  sum(c.weight) FILTER (WHERE c.min_confidence >= t.t AND c.failed)
    / NULLIF(sum(c.weight) FILTER (WHERE c.min_confidence >= t.t AND c.outcome_known), 0)
FROM generate_series(1, 10) AS g(i) CROSS JOIN LATERAL (SELECT g.i / 10.0 AS t) AS t
JOIN v_escalation_conversations AS c ON c.min_confidence IS NOT NULL
WHERE c.time >= $1 AND c.time < $2 GROUP BY t.t ORDER BY t.t""",
    "Median time to escalation": """SELECT
  percentile_cont(0.5) WITHIN GROUP (ORDER BY seconds_to_escalation),
  percentile_cont(0.5) WITHIN GROUP (ORDER BY turns_to_escalation)
FROM v_escalation_conversations WHERE escalated AND time >= $1 AND time < $2""",
}


def new_panel(title: str) -> str:
    board = json.loads((REPO / "dashboards/escalation.json").read_text())
    (sql,) = [p["targets"][0]["rawSql"] for p in board["panels"] if p.get("title") == title]
    sql = sql.replace("$__timeFilter(c.time)", "c.time >= $1 AND c.time < $2")
    sql = sql.replace("$__timeFilter(time)", "time >= $1 AND time < $2")
    sql = sql.replace("$__timeFrom()", "$1").replace("$__timeTo()", "$2")
    for var in ("agent", "domain", "tier"):
        sql = sql.replace(f"${var}", "'__all__'")
    return sql


def close(a: Any, b: Any, rel: float = 1e-9) -> bool:
    if isinstance(a, int | float) and isinstance(b, int | float):
        return bool(abs(float(a) - float(b)) <= rel * max(1.0, abs(float(b))))
    return bool(a == b)


async def test_escalation_panels_equal_the_per_conversation_panels(database_url: str) -> None:
    """On a range aligned to hours (over whole days: escalation_bins_in reads 1d rows there)
    the panels' answers are those of the per-conversation panels (seconds: within the bucket
    bound; rows of equal weight sum in another order)."""
    await fill(database_url)
    hour = NOW.replace(minute=0, second=0)
    lo, hi = hour - timedelta(hours=49), hour + timedelta(hours=1)  # holds a whole UTC day
    conn = await asyncpg.connect(libpq_url(database_url))
    try:
        for title, old_sql in OLD_PANELS.items():
            old = [tuple(r) for r in await conn.fetch(old_sql, lo, hi)]
            new = [tuple(r) for r in await conn.fetch(new_panel(title), lo, hi)]
            assert len(old) == len(new) > 0, title
            for o, n in zip(old, new, strict=True):
                if title == "Median time to escalation":
                    assert o[0] - 1e-9 <= n[0] <= o[0] * BUCKET + 0.001 and o[1] == n[1]
                    continue
                if title in ("Escalation rate by confidence bin", "Threshold curve"):
                    o, n = o[1:], n[1:]
                assert all(close(x, y) for x, y in zip(n, o, strict=True)), (title, o, n)
            if title == "Escalation rate by confidence bin":
                assert len({r[0] for r in old}) >= 5  # several bins compared
    finally:
        await conn.close()


PERCENTILE_CONT_PANEL = """SELECT
  $__timeGroupAlias(time, $__interval),
  agent_id AS metric,
  percentile_cont(0.5) WITHIN GROUP (ORDER BY seconds_to_escalation) AS "median s",
  percentile_cont(0.9) WITHIN GROUP (ORDER BY seconds_to_escalation) AS "p90 s"
FROM v_escalation_bins
CROSS JOIN LATERAL generate_series(1, conversations) AS n
WHERE resolution = '1h' AND kind = 1 AND $__timeFilter(time)
GROUP BY 1, 2
ORDER BY 1, 2"""


async def test_time_to_escalation_panel_equals_percentile_cont(database_url: str) -> None:
    """ "Time to escalation per agent" computes percentile_cont from running counts of the
    bucket values; the answers are those of percentile_cont over the values repeated by their
    counts (the panel's earlier SQL), at several bucket widths."""
    await fill(database_url)
    board = json.loads((REPO / "dashboards/escalation.json").read_text())
    (sql,) = [
        p["targets"][0]["rawSql"]
        for p in board["panels"]
        if p.get("title") == "Time to escalation per agent"
    ]
    variables = [
        grafana_sql.Variable(
            v,
            multi=True,
            include_all=True,
            all_value="'__all__'",
            options=("x",),
            selected=(grafana_sql.ALL,),
        )
        for v in ("agent", "domain", "tier")
    ]
    tr = grafana_sql.TimeRange(NOW - timedelta(hours=60), NOW)
    conn = await asyncpg.connect(libpq_url(database_url))
    try:
        compared = 0
        for ms in (60_000, 600_000, 3_600_000, 86_400_000):
            want = await conn.fetch(
                grafana_sql.interpolate(PERCENTILE_CONT_PANEL, time_range=tr, interval_ms=ms)
            )
            got = await conn.fetch(
                grafana_sql.interpolate(sql, time_range=tr, interval_ms=ms, variables=variables)
                + ", 2"
            )
            # the panel's time is a timestamptz (date_bin), the earlier SQL's epoch seconds
            assert [(r[0].timestamp(), r[1]) for r in got] == [(float(r[0]), r[1]) for r in want]
            for a, b in zip(got, want, strict=True):
                assert close(a[2], b[2]) and close(a[3], b[3]), (ms, tuple(a), tuple(b))
            compared += len(want)
        assert compared >= 20
    finally:
        await conn.close()


async def test_median_time_to_escalation_equals_percentile_cont(database_url: str) -> None:
    """ "Median time to escalation" computes percentile_cont from running counts of the values
    (its earlier SQL expanded every row into one row per conversation: 9x slower at 10 times
    the traffic); the answers are those of that earlier SQL, for several ranges."""
    await fill(database_url)
    expanded = """SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY seconds_to_escalation),
  percentile_cont(0.5) WITHIN GROUP (ORDER BY turns_to_escalation)
FROM escalation_bins_in($1, $2) CROSS JOIN LATERAL generate_series(1, conversations) AS n
WHERE kind = 1"""
    conn = await asyncpg.connect(libpq_url(database_url))
    try:
        compared = 0
        for hours in (1, 3, 7, 20, 49, 60):
            lo, hi = NOW - timedelta(hours=hours), NOW + timedelta(minutes=1)
            (want,) = await conn.fetch(expanded, lo, hi)
            (got,) = await conn.fetch(new_panel("Median time to escalation"), lo, hi)
            assert (got[0] is None) == (want[0] is None) and (got[1] is None) == (want[1] is None)
            if want[0] is not None:
                assert close(got[0], want[0]) and close(got[1], want[1]), (hours, got, want)
                compared += 1
        assert compared >= 4
    finally:
        await conn.close()
