"""The judge flags against outcomes (migration 0040) stay exact: after random sequences of
judgements (new, re-judged), verdicts moved between minutes (a conversation judged in several
minutes by one judge version), deleted verdicts, late, changed and removed outcomes,
conversation rows arriving after their verdicts or deleted, bulk writes and the retention job,
``verdict_truth`` and ``verdict_truth_minutes`` equal their recount from ``v_verdict_pairs``, and
the judges dashboard's "Precision of judge flags" and "Judges against ground truth" return the
rows of their SQL over ``v_verdict_pairs`` (the join they replaced) for ranges that cut the
verdicts and for each filter. The migration's downgrade removes the tables and its upgrade
rebuilds them from the stored pairs."""

from __future__ import annotations

import asyncio
import math
import random
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg

from monitor.core.retention_settings import RetentionSettings
from monitor.ingest.rows import event_row
from monitor.ingest.writer import EventWriter
from monitor.judges.base import Verdict
from monitor.judges.repo import Judgement, write_verdicts
from monitor.store.engine import downgrade, libpq_url, make_engine, upgrade
from monitor.store.retention import run_retention
from tests.dashboards.test_dashboards import dashboards
from tests.factories import event
from tests.test_deploy_files import all_panels

NOW = datetime.now(UTC).replace(second=0, microsecond=0)
SETTINGS = RetentionSettings(
    retention_verdicts_days=3, retention_conversations_days=3, partitions_ahead_days=1
)
CONVERSATIONS = [f"c{i}" for i in range(12)]
AGENTS = {c: ("a1", "a2")[i % 2] for i, c in enumerate(CONVERSATIONS)}
DOMAINS = ("airline", "retail", None)
JUDGES = (("det.a", "1"), ("det.a", "2"), ("llm.b", "1"))

FILTER = """  AND ('__all__' IN ($agent) OR agent_id IN ($agent))
  AND ('__all__' IN ($domain) OR domain IN ($domain))
  AND ('__all__' IN ($tier) OR tier::text IN ($tier))"""
PER_CONV = f"""SELECT judge, judge_version, conversation_id, bool_or(flagged > 0) AS flagged,
  bool_and(NOT outcome_success) AS failed
FROM v_verdict_pairs
WHERE labelled > 0 AND outcome_success IS NOT NULL
  AND $__timeFilter(time)
{FILTER}
GROUP BY judge, judge_version, conversation_id"""
#: the two panels' SQL before migration 0040: every labelled pair of the range joined with its
#: conversation's outcome
REFERENCE = {
    "Precision of judge flags": f"""WITH per_conv AS (
{PER_CONV})
SELECT (count(*) FILTER (WHERE flagged AND failed))::float
  / NULLIF(count(*) FILTER (WHERE flagged), 0) AS "precision"
FROM per_conv""",
    "Judges against ground truth": f"""WITH volume AS (
SELECT judge, judge_version, sum(verdicts)::bigint AS verdicts,
  coalesce(sum(verdicts) FILTER (WHERE status = 'error'), 0)::bigint AS errors,
  sum(latency_ms) / sum(verdicts) AS latency
FROM v_verdict_minutes
WHERE $__timeFilter(time)
{FILTER}
GROUP BY judge, judge_version
), per_conv AS (
{PER_CONV}
), per_judge AS (
SELECT judge, judge_version, count(*) AS with_outcome, count(*) FILTER (WHERE flagged) AS flagged,
  count(*) FILTER (WHERE flagged AND failed) AS flagged_failed,
  count(*) FILTER (WHERE failed) AS failed
FROM per_conv
GROUP BY judge, judge_version
)
SELECT v.judge, v.judge_version AS version, v.verdicts, v.errors,
  coalesce(p.with_outcome, 0) AS "with outcome", coalesce(p.flagged, 0) AS flagged,
  p.flagged_failed::float / NULLIF(p.flagged, 0) AS precision,
  p.flagged_failed::float / NULLIF(p.failed, 0) AS recall,
  v.latency AS "mean latency ms"
FROM volume v LEFT JOIN per_judge p USING (judge, judge_version)
ORDER BY v.judge, v.judge_version""",
}

#: the rows the two tables should hold, recounted from the view they replace: per labelled pair
#: with an outcome, its (conversation, judge, version)'s first and last minute, whether any of
#: its rows flags and whether all of them have one segment
TRIPLES = """
WITH p AS (SELECT * FROM v_verdict_pairs WHERE labelled > 0 AND outcome_success IS NOT NULL),
t AS (SELECT conversation_id, judge, judge_version, min(time) AS f, max(time) AS l,
        bool_or(flagged > 0) AS fa, count(DISTINCT (agent_id, domain, tier)) = 1 AS u
      FROM p GROUP BY 1, 2, 3)"""
RECOUNT_ROWS = f"""{TRIPLES}
SELECT conversation_id, judge, judge_version, p.time, agent_id, domain, tier, flagged > 0,
  NOT outcome_success, t.f, t.l, t.fa, t.u
FROM p JOIN t USING (conversation_id, judge, judge_version)"""
STORED_ROWS = """
SELECT conversation_id, judge, judge_version, minute, agent_id, domain, tier, flagged, failed,
  first_minute, last_minute, flagged_any, uniform FROM verdict_truth"""
RECOUNT_MINUTES = f"""{TRIPLES}
SELECT t.f, t.l, agent_id, domain, tier, judge, judge_version, t.fa, NOT outcome_success,
  count(*)
FROM p JOIN t USING (conversation_id, judge, judge_version)
WHERE t.u AND p.time = t.f
GROUP BY 1, 2, 3, 4, 5, 6, 7, 8, 9"""
STORED_MINUTES = """
SELECT minute, last_minute, agent_id, domain, tier, judge, judge_version, flagged, failed, pairs
FROM verdict_truth_minutes"""


def render(sql: str, lo: datetime, hi: datetime, agent: str, domain: str, tier: str) -> str:
    """Grafana's expansion of the panels' macros and variables (single values)."""
    return (
        sql.replace(
            "$__timeFilter(time)", f"time BETWEEN '{lo.isoformat()}' AND '{hi.isoformat()}'"
        )
        .replace("$__timeFrom()", f"'{lo.isoformat()}'")
        .replace("$__timeTo()", f"'{hi.isoformat()}'")
        .replace("$agent", f"'{agent}'")
        .replace("$domain", f"'{domain}'")
        .replace("$tier", f"'{tier}'")
    )


def same(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return math.isclose(a, b, rel_tol=1e-12, abs_tol=0)
    return bool(a == b)


async def rows(conn: asyncpg.Connection, sql: str) -> list[tuple[Any, ...]]:
    return sorted((tuple(r) for r in await conn.fetch(sql)), key=repr)


async def check(conn: asyncpg.Connection, rng: random.Random) -> int:
    """Tables equal their recount; both panels equal their reference on several ranges and
    filters. Returns the panels' nonempty results seen."""
    assert await rows(conn, STORED_ROWS) == await rows(conn, RECOUNT_ROWS)
    assert await rows(conn, STORED_MINUTES) == await rows(conn, RECOUNT_MINUTES)
    panels = {p["title"]: p for p in all_panels(dashboards()["monitor-judges"])}
    cut = NOW - timedelta(minutes=rng.randrange(0, 4 * 24 * 60))
    ranges = [
        (NOW - timedelta(days=30), NOW + timedelta(days=1)),
        (cut, NOW + timedelta(days=1)),
        (NOW - timedelta(days=30), cut),
    ]
    filters = [
        ("__all__", "__all__", "__all__"),
        ("a1", "__all__", "__all__"),
        ("__all__", "airline", "__all__"),
        ("__all__", "__all__", "2"),
    ]
    seen = 0
    for title, reference in REFERENCE.items():
        new = panels[title]["targets"][0]["rawSql"]
        assert "v_verdict_truth_minutes" in new and "v_verdict_pairs" not in new
        for lo, hi in ranges:
            for f in filters:
                want = await rows(conn, render(reference, lo, hi, *f))
                got = await rows(conn, render(new, lo, hi, *f))
                assert len(got) == len(want), (title, lo, hi, f)
                for a, b in zip(got, want, strict=True):
                    assert all(same(x, y) for x, y in zip(a, b, strict=True)), (title, f, a, b)
                seen += any(v not in (None, 0) for r in want for v in r)
    return seen


def judgement(rng: random.Random, cids: list[str]) -> list[Verdict]:
    out = []
    for cid in cids:
        judge, version = rng.choice(JUDGES)
        for i in range(rng.randrange(1, 4)):
            item = f"{cid}-{rng.randrange(6)}-{i}"
            if rng.random() < 0.15:
                out.append(Verdict(judge, version, cid, item, "error", error="x", latency_ms=5.0))
            else:
                label = rng.choice((0, 0, 1))
                out.append(
                    Verdict(judge, version, cid, item, "ok", label=label, score=1.0, latency_ms=2.0)
                )
    return out


async def add_conversation(conn: asyncpg.Connection, rng: random.Random, cid: str) -> None:
    await conn.execute(
        "INSERT INTO conversations (conversation_id, agent_id, domain, tier, first_ts, last_ts,"
        " outcome_success) VALUES ($1, $2, $3, $4, $5, $5, $6)"
        " ON CONFLICT (conversation_id) DO NOTHING",
        cid,
        AGENTS[cid],
        rng.choice(DOMAINS),
        rng.choice((1, 2, None)),
        NOW,
        rng.choice((True, False, None)),
    )


async def step(
    rng: random.Random, pool: asyncpg.Pool, conn: asyncpg.Connection, engine: Any
) -> str:
    """One random write; returns its name."""
    kind = rng.choice(
        ("judge", "judge", "rejudge", "move", "outcome", "outcome", "late", "drop", "delete",
         "bulk", "retention", "segment")
    )  # fmt: skip
    cids = rng.sample(CONVERSATIONS, rng.randrange(1, 5))
    if kind in ("judge", "rejudge"):
        replaces = kind == "rejudge"
        judged = [Judgement(c, events=1, replaces=replaces) for c in sorted(cids)]
        await write_verdicts(pool, {c: AGENTS[c] for c in cids}, judgement(rng, cids), judged)
    elif kind == "move":  # verdicts into other minutes, some past the retention horizon
        await conn.execute(
            "UPDATE verdicts SET created_at = $1::timestamptz - make_interval(mins => $2)"
            " WHERE id % $3 = $4",
            NOW,
            rng.choice((rng.randrange(0, 180), rng.randrange(0, 6 * 24 * 60))),
            rng.randrange(2, 5),
            rng.randrange(0, 2),
        )
    elif kind == "outcome":  # late or changed outcome (or withdrawn)
        await conn.execute(
            "UPDATE conversations SET outcome_success = $2 WHERE conversation_id = ANY($1)",
            cids,
            rng.choice((True, False, None)),
        )
    elif kind == "late":  # conversation rows arriving after their verdicts
        for c in cids:
            await add_conversation(conn, rng, c)
    elif kind == "segment":  # later pairs of these conversations get another segment
        await conn.execute(
            "UPDATE conversations SET domain = $2, tier = $3 WHERE conversation_id = ANY($1)",
            cids,
            rng.choice(DOMAINS),
            rng.choice((1, 2, None)),
        )
    elif kind == "drop":
        await conn.execute("DELETE FROM conversations WHERE conversation_id = ANY($1)", cids)
    elif kind == "delete":
        await conn.execute("DELETE FROM verdicts WHERE conversation_id = ANY($1)", cids[:1])
    elif kind == "bulk":  # a writer without the conversations' lock, as a bulk writer
        async with conn.transaction():
            await conn.execute("SET LOCAL monitor.verdict_truth_bulk = on")
            await conn.execute(
                "UPDATE conversations SET outcome_success = NOT outcome_success"
                " WHERE conversation_id = ANY($1)",
                cids,
            )
            await conn.execute(
                "INSERT INTO verdicts (conversation_id, item_id, agent_id, judge, judge_version,"
                " status, label, categories, latency_ms) SELECT c, c || '-bulk', 'a1', 'llm.b',"
                " '1', 'ok', 0, '[]', 1 FROM unnest($1::text[]) AS c"
                " ON CONFLICT ON CONSTRAINT uq_verdicts_item_judge DO NOTHING",
                cids,
            )
    else:  # old conversations and verdicts, then the retention job
        await conn.execute(
            "UPDATE conversations SET last_ts = $2, updated_at = $2"
            " WHERE conversation_id = ANY($1)",
            cids[:1],
            NOW - timedelta(days=5),
        )
        await run_retention(engine, SETTINGS, NOW)
    return kind


async def test_flags_against_outcomes_stay_exact_under_random_writes(database_url: str) -> None:
    dsn = libpq_url(database_url)
    pool = await asyncpg.create_pool(dsn, min_size=1, max_size=2)
    conn = await asyncpg.connect(dsn)
    engine = make_engine(database_url)
    kinds: set[str] = set()
    seen = shared = mixed_max = 0
    try:
        for seed in range(3):
            rng = random.Random(seed)
            await conn.execute("TRUNCATE verdicts, conversations")
            assert await conn.fetchval("SELECT count(*) FROM verdict_truth_minutes") == 0
            for c in CONVERSATIONS[:8]:
                await add_conversation(conn, rng, c)
            for _ in range(30):
                kinds.add(await step(rng, pool, conn, engine))
                seen += await check(conn, rng)
                spanning, mixed = await conn.fetchrow(
                    "SELECT count(*) FILTER (WHERE first_minute < last_minute),"
                    " count(*) FILTER (WHERE NOT uniform) FROM verdict_truth"
                )
                shared, mixed_max = max(shared, spanning), max(mixed_max, mixed)
    finally:
        await engine.dispose()
        await conn.close()
        await pool.close()
    assert len(kinds) == 10, kinds
    assert seen > 100  # not vacuous: the panels showed something
    assert shared > 0  # conversations judged in several minutes by one judge version
    assert mixed_max > 0  # and with pairs of several segments


async def test_a_concurrent_judgement_and_outcome_leave_the_counts_exact(
    database_url: str,
) -> None:
    """A verdict writer and an outcome writer of the same conversations at once (the outcome
    writer's transaction open across the verdict writer's statement): neither misses the
    other's write."""
    dsn = libpq_url(database_url)
    pool = await asyncpg.create_pool(dsn, min_size=2, max_size=3)
    conn = await asyncpg.connect(dsn)
    try:
        rng = random.Random(7)
        for c in CONVERSATIONS:
            await add_conversation(conn, rng, c)
        await conn.execute("UPDATE conversations SET outcome_success = NULL")
        for round_ in range(6):
            cids = CONVERSATIONS[round_ : round_ + 4]
            outcome = await pool.acquire()
            try:
                # neither writer takes the conversations' lock itself: the triggers do
                tx = outcome.transaction()
                await tx.start()
                await outcome.execute(
                    "UPDATE conversations SET outcome_success = $2 WHERE conversation_id = ANY($1)",
                    cids,
                    round_ % 2 == 0,
                )
                write = asyncio.create_task(
                    pool.execute(
                        "INSERT INTO verdicts (conversation_id, item_id, agent_id, judge,"
                        " judge_version, status, label, categories, latency_ms)"
                        " SELECT c, c || $2, 'a1', 'llm.b', '1', 'ok', $3, '[]', 1"
                        " FROM unnest($1::text[]) AS c",
                        cids,
                        f"-r{round_}",
                        round_ % 3 and 1,
                    )
                )
                await asyncio.sleep(0.3)
                assert not write.done()  # its trigger waits for the outcome writer's commit
                await tx.commit()
                await write
            finally:
                await pool.release(outcome)
            assert await rows(conn, STORED_ROWS) == await rows(conn, RECOUNT_ROWS)
            assert await rows(conn, STORED_MINUTES) == await rows(conn, RECOUNT_MINUTES)
        assert await conn.fetchval("SELECT count(*) FROM verdict_truth") > 0
    finally:
        await conn.close()
        await pool.close()


async def test_migration_builds_the_tables_from_stored_pairs_and_downgrades(
    database_url: str,
) -> None:
    dsn = libpq_url(database_url)
    pool = await asyncpg.create_pool(dsn, min_size=1, max_size=2)
    conn = await asyncpg.connect(dsn)
    try:
        rng = random.Random(3)
        for c in CONVERSATIONS:
            await add_conversation(conn, rng, c)
        await conn.execute("UPDATE conversations SET outcome_success = (random() < 0.5)")
        judged = [Judgement(c, events=1) for c in CONVERSATIONS]
        await write_verdicts(pool, AGENTS, judgement(rng, CONVERSATIONS), judged)
        before = await rows(conn, STORED_MINUTES)
        assert before
    finally:
        await conn.close()
        await pool.close()
    await asyncio.to_thread(downgrade, database_url, "0039")
    conn = await asyncpg.connect(dsn)
    try:
        assert (
            await conn.fetchval(
                "SELECT count(*) FROM pg_class WHERE relname LIKE '%verdict_truth%'"
                " OR relname = 'verdict_truth'"
            )
            == 0
        )
        assert (
            await conn.fetchval("SELECT count(*) FROM pg_proc WHERE proname LIKE 'verdict_truth%'")
            == 0
        )
        # outcomes changed without the triggers are read by the upgrade
        await conn.execute("UPDATE conversations SET outcome_success = NOT outcome_success")
    finally:
        await conn.close()
    await asyncio.to_thread(upgrade, database_url, "head")
    conn = await asyncpg.connect(dsn)
    try:
        assert await rows(conn, STORED_ROWS) == await rows(conn, RECOUNT_ROWS)
        after = await rows(conn, STORED_MINUTES)
        assert after == await rows(conn, RECOUNT_MINUTES)
        assert after != before
    finally:
        await conn.close()


async def test_outcomes_stored_by_the_ingest_writer_reach_the_counts(
    writer: EventWriter, database_url: str
) -> None:
    """The ingest writer's own statements (its batch upsert of ``conversations``) fire the
    outcome trigger: an outcome arriving after the verdicts, then one ranked above it."""
    dsn = libpq_url(database_url)
    pool = await asyncpg.create_pool(dsn, min_size=1, max_size=2)
    conn = await asyncpg.connect(dsn)
    try:
        await writer.write([event_row(event("e1", "c1", at=0, confidence=0.9, turn=1))])
        flags = [Verdict("det.a", "1", "c1", "c1-i", "ok", label=0, score=0.0, latency_ms=1.0)]
        await write_verdicts(pool, {"c1": "agent-a"}, flags, [Judgement("c1", events=1)])
        assert await conn.fetchval("SELECT count(*) FROM verdict_truth") == 0  # no outcome yet

        async def outcome(eid: str, at: int, success: bool, source: str) -> None:
            row = event(eid, "c1", "outcome", at=at, success=success, reward=None, source=source)
            await writer.write([event_row(row)])

        await outcome("o1", 100, False, "csat")
        assert await rows(conn, STORED_ROWS) == await rows(conn, RECOUNT_ROWS)
        assert await conn.fetchval("SELECT failed FROM verdict_truth") is True
        await outcome("o2", 200, True, "ground_truth")
        assert await rows(conn, STORED_ROWS) == await rows(conn, RECOUNT_ROWS)
        assert await rows(conn, STORED_MINUTES) == await rows(conn, RECOUNT_MINUTES)
        assert await conn.fetchval("SELECT failed FROM verdict_truth") is False
        assert await conn.fetchval("SELECT sum(pairs) FROM verdict_truth_minutes") == 1
    finally:
        await conn.close()
        await pool.close()
