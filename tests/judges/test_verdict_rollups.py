"""The verdict roll-ups (migration 0039) equal a recount of ``verdicts`` after every kind of
write: the judges' ``write_verdicts``, a re-judging that replaces a conversation's verdicts, an
UPDATE of their time, the retention job (which keeps an exemplar's verdicts), a conversation
whose domain changed before its verdicts were deleted, and TRUNCATE; and the migration's
downgrade removes them and its upgrade rebuilds them from the stored verdicts."""

from __future__ import annotations

import asyncio
import json
import math
from collections import Counter
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg

from monitor.core.retention_settings import RetentionSettings
from monitor.judges import latency_buckets as lb
from monitor.judges.base import Verdict
from monitor.judges.repo import Judgement, write_verdicts
from monitor.store.engine import downgrade, libpq_url, make_engine, upgrade
from monitor.store.retention import run_retention

ROLLUPS = (
    "verdict_minutes",
    "verdict_category_minutes",
    "verdict_pairs",
    "v_verdict_minutes",
    "v_verdict_categories",
    "v_verdict_pairs",
)
NOW = datetime.now(UTC).replace(microsecond=0)
SETTINGS = RetentionSettings(retention_verdicts_days=3, partitions_ahead_days=1)

#: conversation -> (agent, domain, tier, outcome_success)
CONVERSATIONS: dict[str, tuple[str, str | None, int | None, bool | None]] = {
    "c1": ("a1", "airline", 1, False),
    "c2": ("a1", "retail", 2, True),
    "c3": ("a2", None, None, None),
    "c4": ("a2", "airline", 1, False),
}


async def add_conversations(conn: asyncpg.Connection) -> None:
    for cid, (agent, domain, tier, outcome) in CONVERSATIONS.items():
        await conn.execute(
            "INSERT INTO conversations (conversation_id, agent_id, domain, tier, first_ts,"
            " last_ts, outcome_success) VALUES ($1, $2, $3, $4, $5, $5, $6)",
            cid,
            agent,
            domain,
            tier,
            NOW,
            outcome,
        )


def verdicts(cid: str, judge: str, n: int, seed: int) -> list[Verdict]:
    """``n`` item verdicts of ``judge`` on ``cid``: labels, errors, categories and latencies
    across the histogram (under 1 ms to seconds)."""
    out = []
    for i in range(n):
        k = seed * 7 + i
        if k % 5 == 4:
            out.append(
                Verdict(
                    judge, "1", cid, f"{cid}-{i}", "error", error="timeout", latency_ms=k * 90.5
                )
            )
            continue
        label = 0 if k % 3 == 0 else 1
        cats: tuple[str, ...] = ()
        if label == 0:
            cats = ("wrong_information", "fabrication:pricing") if k % 2 else ("policy_violation",)
        out.append(
            Verdict(
                judge,
                "1",
                cid,
                f"{cid}-{i}",
                "ok",
                label=label,
                score=float(label),
                categories=cats,
                latency_ms=[0.0, 0.4, 3.7, 250.0, 1900.25, 12.5][k % 6] + k,
            )
        )
    return out


async def write(
    pool: asyncpg.Pool, vs: list[Verdict], replaces: frozenset[str] = frozenset()
) -> None:
    cids = {v.conversation_id for v in vs} | set(replaces)
    agents = {c: CONVERSATIONS[c][0] for c in cids}
    judged = [Judgement(c, events=1, replaces=c in replaces) for c in sorted(cids)]
    await write_verdicts(pool, agents, vs, judged)


async def recount(conn: asyncpg.Connection, segments: dict[str, tuple[str, int]]) -> dict[str, Any]:
    """The three roll-ups recounted from ``verdicts`` (``segments``: each conversation's domain
    and tier as its verdicts were written), with the buckets computed in Python."""
    rows = await conn.fetch(
        "SELECT conversation_id, agent_id, judge, judge_version, status, label, latency_ms,"
        " categories, date_trunc('minute', created_at, 'UTC') AS minute FROM verdicts"
    )
    minutes: Counter[tuple[Any, ...]] = Counter()
    latency: dict[tuple[Any, ...], float] = {}
    cats: Counter[tuple[Any, ...]] = Counter()
    pairs: dict[tuple[Any, ...], list[int]] = {}
    for r in rows:
        domain, tier = segments[r["conversation_id"]]
        seg = (r["minute"], r["agent_id"], domain, tier)
        k = (*seg, r["judge"], r["judge_version"], r["status"], lb.bucket(r["latency_ms"]))
        minutes[k] += 1
        latency[k] = latency.get(k, 0.0) + r["latency_ms"]
        for c in json.loads(r["categories"]):
            cats[(*seg, c)] += 1
        pk = (r["conversation_id"], r["judge"], r["judge_version"], r["minute"], r["agent_id"])
        p = pairs.setdefault((*pk, domain, tier), [0, 0, 0])
        p[0] += 1
        p[1] += r["status"] == "ok" and r["label"] is not None
        p[2] += r["status"] == "ok" and r["label"] == 0
    return {
        "minutes": dict(minutes),
        "latency": latency,
        "categories": dict(cats),
        "pairs": {k: tuple(v) for k, v in pairs.items()},
    }


async def stored(conn: asyncpg.Connection) -> dict[str, Any]:
    m = await conn.fetch("SELECT * FROM verdict_minutes")
    key = ("minute", "agent_id", "domain", "tier", "judge", "judge_version", "status", "bucket")
    c = await conn.fetch("SELECT * FROM verdict_category_minutes")
    p = await conn.fetch("SELECT * FROM verdict_pairs")
    pk = ("conversation_id", "judge", "judge_version", "minute", "agent_id", "domain", "tier")
    return {
        "minutes": {tuple(r[x] for x in key): r["verdicts"] for r in m},
        "latency": {tuple(r[x] for x in key): r["latency_ms"] for r in m},
        "categories": {
            (r["minute"], r["agent_id"], r["domain"], r["tier"], r["category"]): r["verdicts"]
            for r in c
        },
        "pairs": {tuple(r[x] for x in pk): (r["verdicts"], r["labelled"], r["flagged"]) for r in p},
    }


async def assert_equal(conn: asyncpg.Connection, segments: dict[str, tuple[str, int]]) -> int:
    want, got = await recount(conn, segments), await stored(conn)
    for name in ("minutes", "categories", "pairs"):
        assert got[name] == want[name], name
    assert got["latency"].keys() == want["latency"].keys()
    for k, v in want["latency"].items():  # sums in another order: equal up to rounding
        assert math.isclose(got["latency"][k], v, rel_tol=1e-9, abs_tol=1e-6), k
    return sum(want["minutes"].values())


def written_segments() -> dict[str, tuple[str, int]]:
    return {c: (d or "", t or 0) for c, (_, d, t, _) in CONVERSATIONS.items()}


async def test_rollups_equal_the_recount_after_writes_replacements_and_retention(
    database_url: str,
) -> None:
    dsn = libpq_url(database_url)
    pool = await asyncpg.create_pool(dsn, min_size=1, max_size=2)
    conn = await asyncpg.connect(dsn)
    engine = make_engine(database_url)
    try:
        await add_conversations(conn)
        seg = written_segments()
        await write(pool, verdicts("c1", "det.a", 7, 1) + verdicts("c2", "det.a", 5, 2))
        await write(pool, verdicts("c1", "llm.b", 4, 3) + verdicts("c3", "det.a", 6, 4))
        assert await assert_equal(conn, seg) == 22
        # spread over days and minutes (the UPDATE trigger moves them between keys)
        await conn.execute(
            "UPDATE verdicts SET created_at = $1::timestamptz"
            " - make_interval(days => (id % 6)::int, mins => (id % 4)::int)",
            NOW,
        )
        assert len({k[0] for k in (await stored(conn))["minutes"]}) > 6
        assert await assert_equal(conn, seg) == 22
        # a verdict added to an existing pair in the same minute, then ON CONFLICT: nothing
        await write(pool, verdicts("c4", "det.a", 3, 5))
        await write(pool, verdicts("c4", "det.a", 3, 5))
        assert await assert_equal(conn, seg) == 25
        # re-judging c1 replaces its 11 verdicts (in two minutes of old days) with 2 new ones
        await write(pool, verdicts("c1", "det.a", 2, 6), replaces=frozenset({"c1"}))
        assert await conn.fetchval("SELECT count(*) FROM verdicts WHERE conversation_id = 'c1'")
        assert await assert_equal(conn, seg) == 16
        # retention keeps an exemplar's verdicts past the horizon; the roll-ups follow
        await conn.execute(
            "INSERT INTO alert_exemplars (fingerprint, fired_at, rank, rule, conversation_id,"
            " reason) VALUES ('f', $1, 1, 'r', 'c3', 'x')",
            NOW,
        )
        report = await run_retention(engine, SETTINGS, NOW)
        assert report.deleted["verdicts"] > 0, report
        old = await conn.fetchval(
            "SELECT count(*) FROM verdicts WHERE created_at < $1", NOW - timedelta(days=3)
        )
        assert old > 0  # c3's, kept with its exemplar
        assert await assert_equal(conn, seg) == 16 - report.deleted["verdicts"]
        # a conversation's domain changes after its verdicts: their deletion still subtracts
        # them from the segment they were counted in
        await conn.execute("UPDATE conversations SET domain = 'retail', tier = 3")
        await conn.execute("DELETE FROM verdicts WHERE conversation_id = 'c2'")
        left = await assert_equal(conn, seg)
        assert left > 0
        # a new verdict of c2 takes the conversation's current segment
        await write(pool, verdicts("c2", "det.a", 2, 7))
        assert await assert_equal(conn, seg | {"c2": ("retail", 3)}) == left + 2
        await conn.execute("TRUNCATE verdicts")
        assert await assert_equal(conn, seg) == 0
    finally:
        await engine.dispose()
        await conn.close()
        await pool.close()


async def test_migration_builds_the_rollups_from_stored_verdicts_and_downgrades(
    database_url: str,
) -> None:
    dsn = libpq_url(database_url)
    pool = await asyncpg.create_pool(dsn, min_size=1, max_size=2)
    try:
        async with pool.acquire() as conn:
            await add_conversations(conn)
        await write(pool, verdicts("c1", "det.a", 9, 1) + verdicts("c3", "llm.b", 4, 2))
    finally:
        await pool.close()
    conn = await asyncpg.connect(dsn)
    try:
        before = await stored(conn)
        assert sum(before["minutes"].values()) == 13
    finally:
        await conn.close()
    await asyncio.to_thread(downgrade, database_url, "0038")
    conn = await asyncpg.connect(dsn)
    try:
        tables = await conn.fetchval(
            "SELECT count(*) FROM pg_class WHERE relname = ANY($1::text[])", list(ROLLUPS)
        )
        assert tables == 0  # the roll-ups and their views are gone
        assert (
            await conn.fetchval("SELECT count(*) FROM pg_proc WHERE proname = 'verdict_rollups'")
            == 0
        )
        # verdicts written without the triggers are counted by the upgrade
        await conn.execute("DELETE FROM verdicts WHERE judge = 'llm.b'")
    finally:
        await conn.close()
    await asyncio.to_thread(upgrade, database_url, "head")
    conn = await asyncpg.connect(dsn)
    try:
        assert await assert_equal(conn, written_segments()) == 9
        got = await stored(conn)
        assert got["pairs"] == {k: v for k, v in before["pairs"].items() if k[1] == "det.a"}
    finally:
        await conn.close()
