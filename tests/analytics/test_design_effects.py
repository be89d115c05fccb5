"""The design effect against real Postgres: labelled items (weight > 0) per conversation, per
group and over all groups, equal to the same figure counted in Python from the items' rows;
and the hourly roll-up path (``item_hours`` / ``design_hours``; ``label_hours`` for the labels
by source) equal to the scan of ``items`` on windows with and without whole hours, after
out-of-order batches, late outcomes, replays and conversations that span segments."""

from __future__ import annotations

import asyncio
import random
from collections import defaultdict
from datetime import UTC, datetime, timedelta

import asyncpg

from monitor.analytics import design_effect, repo
from monitor.ingest.rows import event_row
from monitor.ingest.writer import EventWriter
from monitor.judges.judge_noise import label_sources
from monitor.sim.traffic import Simulator
from monitor.store.engine import downgrade, libpq_url, make_engine, upgrade
from tests.analytics.design_tables import assert_design_tables_match_items
from tests.factories import T0, event

NOW = datetime(2026, 11, 20, 12, 0, tzinfo=UTC)
KEYS = (("agent_id",), ("agent_id", "domain"), ("agent_id", "agent_version", "domain", "tier"), ())


def expected(rows: list[asyncpg.Record], keys: tuple[str, ...]) -> dict[tuple[object, ...], float]:
    items: dict[tuple[object, ...], int] = defaultdict(int)
    convs: dict[tuple[object, ...], set[str]] = defaultdict(set)
    for r in rows:
        for key in (tuple(r[k] for k in keys), ()):
            items[key] += 1
            convs[key].add(r["conversation_id"])
    return {k: max(1.0, items[k] / len(convs[k])) for k in items}


async def test_design_effects_equal_the_items_counted_in_python(database_url: str) -> None:
    sim = Simulator(seed=5, start=NOW - timedelta(hours=6), interval=timedelta(seconds=90))
    writer = EventWriter(database_url)
    try:
        await writer.write([event_row(e) for e in sim.events(200)])
    finally:
        await writer.close()
    engine = make_engine(database_url)
    conn = await asyncpg.connect(libpq_url(database_url))
    try:
        assert await assert_design_tables_match_items(conn) >= 200
        for lo, hi in (
            (NOW - timedelta(hours=7), NOW + timedelta(days=1)),
            (NOW - timedelta(hours=3, minutes=7), NOW - timedelta(hours=1)),
        ):
            assert repo.whole_hours(lo, hi) is not None  # the roll-up path
            rows = await conn.fetch(
                "SELECT agent_id, domain, conversation_id FROM items WHERE label IS NOT NULL"
                " AND weight > 0 AND ts >= $1 AND ts < $2",
                lo,
                hi,
            )
            assert len({r["conversation_id"] for r in rows}) >= 20
            for keys in (("agent_id",), ("agent_id", "domain")):
                want = expected(rows, keys)
                assert max(want.values()) > 1.0  # several items per conversation
                for scan in (False, True):
                    total = await design_effect.design_effects(
                        engine, repo.Segment(), lo, hi, group_by=keys, with_total=True, scan=scan
                    )
                    assert total == want
                    groups = await design_effect.design_effects(
                        engine, repo.Segment(), lo, hi, group_by=keys, scan=scan
                    )
                    assert groups == {k: v for k, v in want.items() if k != ()}
            alone = await design_effect.design_effects(engine, repo.Segment(), lo, hi, group_by=())
            assert alone == {(): want[()]}
    finally:
        await conn.close()
        await engine.dispose()


def windows(
    rng: random.Random, lo: datetime, hi: datetime, n: int
) -> list[tuple[datetime, datetime]]:
    """``n`` random windows inside ``[lo, hi]``: on whole hours, on minutes, on microseconds."""
    span = (hi - lo).total_seconds()
    out = []
    for k in range(n):
        a, b = sorted(rng.uniform(0, span) for _ in range(2))
        start, end = lo + timedelta(seconds=a), lo + timedelta(seconds=b)
        if k % 3 == 0:
            start = start.replace(minute=0, second=0, microsecond=0)
        elif k % 3 == 1:
            start, end = (t.replace(second=0, microsecond=0) for t in (start, end))
        if end > start:
            out.append((start, end))
    return out


async def test_roll_up_equals_the_scan_of_items(database_url: str) -> None:
    sim = Simulator(seed=11, start=NOW - timedelta(hours=9), interval=timedelta(seconds=100))
    events = list(sim.events(300))
    rng = random.Random(3)
    late = [e for e in events if e.type == "outcome" and rng.random() < 0.4]
    early = [e for e in events if e not in late]
    # conversations whose items span two hours, two segments (another agent mid-conversation)
    # or both: their rows are flagged multi and counted once per group (the simulator's
    # conversations last minutes and rarely cross an hour)
    spanning = []
    for k in range(24):
        cid, at = f"span-{k}", 1800.0 * k + (3500 if k % 2 else 1000)
        other = f"other-{k % 2}" if k % 3 else "agent-a"
        spanning += [
            event(f"{cid}-a0", cid, at=at, confidence=0.6),
            event(f"{cid}-a1", cid, at=at + 200, confidence=0.7, agent=other),
            event(f"{cid}-a2", cid, at=at + 250, confidence=0.9),
            event(
                f"{cid}-o",
                cid,
                "outcome",
                at=at + 300,
                success=k % 4 < 2,
                source="csat" if k % 4 == 3 else "ground_truth",
            ),
        ]
        if k % 8 == 3:  # a later ground truth relabels some of the csat-labelled items
            late.append(event(f"{cid}-gt", cid, "outcome", at=at + 900, success=True))
    writer = EventWriter(database_url)
    engine = make_engine(database_url)
    conn = await asyncpg.connect(libpq_url(database_url))
    try:
        batch = [event_row(e) for e in early + spanning]
        rng.shuffle(batch)
        # each outcome comes with or after its conversation's opening message (the handoff
        # message may come before both, in an earlier batch or the same one): an outcome that
        # comes first, when only another agent's message is known, cannot be told from that
        # agent's conversation labelled by a stranger and is refused (agent_mismatch)
        pos = {r[0]: i for i, r in enumerate(batch)}
        for k in range(24):
            i, j = pos[f"span-{k}-a0"], pos[f"span-{k}-o"]
            if i > j:
                batch[i], batch[j] = batch[j], batch[i]
        for i in range(0, len(batch), 97):
            await writer.write(batch[i : i + 97])
        await writer.write([event_row(e) for e in late])  # relabels stored items
        await writer.write(batch[:500])  # a replay changes nothing
        assert await assert_design_tables_match_items(conn) >= 300
        multi = await conn.fetchval(
            "SELECT count(DISTINCT conversation_id) FROM item_hours WHERE multi AND n > 0"
        )
        assert multi >= 16  # the correction for conversations across hours is exercised
        want_total = await design_effect.design_effects(
            engine,
            repo.Segment(),
            NOW - timedelta(hours=8, minutes=13),
            NOW - timedelta(minutes=21),
            with_total=True,
            scan=True,
        )
        assert len(want_total) >= 2
        checked = sources = 0
        for lo, hi in [
            (NOW - timedelta(hours=10), NOW + timedelta(hours=1)),
            (T0, T0 + timedelta(hours=13)),
            *windows(rng, NOW - timedelta(hours=10), NOW, 24),
            *windows(rng, T0, T0 + timedelta(hours=13), 16),
        ]:
            want_sources = [
                tuple(r)
                for r in await conn.fetch(
                    "SELECT agent_id, label_source, count(*) FROM items WHERE label IS NOT NULL"
                    " AND ts >= $1 AND ts < $2 GROUP BY 1, 2 ORDER BY 1, 2",
                    lo,
                    hi,
                )
            ]
            async with engine.connect() as c:
                assert await label_sources(c, repo.Segment(), lo, hi) == want_sources
            sources += len({s for _, s, _ in want_sources}) > 1
            for keys in KEYS:
                for seg in (repo.Segment(), repo.Segment(agent="other-*")):
                    for total in (False, True):
                        want = await design_effect.design_effects(
                            engine, seg, lo, hi, group_by=keys, with_total=total, scan=True
                        )
                        got = await design_effect.design_effects(
                            engine, seg, lo, hi, group_by=keys, with_total=total
                        )
                        assert got == want, (lo, hi, keys, seg, total)
                        checked += bool(want) and repo.whole_hours(lo, hi) is not None
        assert checked >= 200 and sources >= 10  # windows with outcome sources of two kinds
        # migration 0019's back-fill gives the tables the items statement kept
        await asyncio.to_thread(downgrade, database_url, "0018")
        assert not await conn.fetchval("SELECT to_regclass('item_hours') IS NOT NULL")
        await asyncio.to_thread(upgrade, database_url)
        assert await assert_design_tables_match_items(conn) >= 300
        lo, hi = NOW - timedelta(hours=8, minutes=13), NOW - timedelta(minutes=21)
        assert (
            await design_effect.design_effects(engine, repo.Segment(), lo, hi, with_total=True)
            == want_total
        )
    finally:
        await conn.close()
        await engine.dispose()
        await writer.close()
