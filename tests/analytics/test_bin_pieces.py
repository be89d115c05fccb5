"""``repo.bin_sums`` reads a range as whole days, whole hours and edge minutes
(``repo.bin_pieces``): the pieces tile exactly the minute-widened range, and on real Postgres
the sums equal those of the range's 1-minute rows alone; so do the dashboards'
``calibration_bins_in(lo, hi)`` (migration 0020)."""

from __future__ import annotations

import itertools
import random
from datetime import UTC, datetime, timedelta, timezone

import asyncpg

from monitor.analytics import repo
from monitor.analytics.bins import BinSums
from monitor.ingest.rows import event_row
from monitor.ingest.writer import EventWriter
from monitor.sim.traffic import Simulator
from monitor.store.engine import libpq_url, make_engine

NOW = datetime(2026, 11, 20, 12, 0, tzinfo=UTC)
SUMS = "sum(weight), sum(sum_conf), sum(sum_y), sum(sum_sq_err), sum(sum_w2), sum(count) AS count"
STEP = {"1m": timedelta(minutes=1), "1h": timedelta(hours=1), "1d": timedelta(days=1)}


def ranges(rng: random.Random, n: int) -> list[tuple[datetime, datetime]]:
    out = [
        (NOW - timedelta(days=7, seconds=17), NOW - timedelta(seconds=3)),
        (NOW - timedelta(days=3), NOW),
        (NOW - timedelta(hours=2, minutes=5), NOW),
        (NOW - timedelta(minutes=50), NOW - timedelta(minutes=10)),
    ]
    for _ in range(n):
        a, b = sorted(rng.uniform(0, 4 * 86400) for _ in range(2))
        out.append((NOW - timedelta(seconds=b), NOW - timedelta(seconds=a) + timedelta(0, 1)))
    return out


def test_pieces_tile_the_range_with_aligned_windows() -> None:
    for start, end in ranges(random.Random(1), 300):
        res, lo, hi = repo.bin_range(start, end)
        pieces = repo.bin_pieces(start, end)
        assert pieces[0][1] == lo and pieces[-1][2] == hi
        for (_, _, b), (_, a, _) in itertools.pairwise(pieces):
            assert a == b  # contiguous, no overlap
        for r, a, b in pieces:
            assert a < b and repo._aligned(a, STEP[r]) and repo._aligned(b, STEP[r])
        minutes = sum((b - a for r, a, b in pieces if r == "1m"), timedelta())
        hours = sum((b - a for r, a, b in pieces if r == "1h"), timedelta())
        if res == "1m" and hi - lo >= timedelta(hours=2):
            assert minutes < timedelta(hours=2) and hours < timedelta(days=2)
    # a range given in another time zone is tiled with UTC's hours and days
    ist = timezone(timedelta(hours=5, minutes=30))
    pieces = repo.bin_pieces(
        datetime(2026, 11, 18, 3, 10, tzinfo=ist), datetime(2026, 11, 20, 9, 45, tzinfo=ist)
    )
    assert all(
        repo._aligned(a.astimezone(UTC), STEP[r]) and a.utcoffset() == timedelta(0)
        for r, a, _ in pieces
    )
    assert repo.whole_hours(
        datetime(2026, 11, 18, 3, 10, tzinfo=ist), datetime(2026, 11, 18, 5, 10, tzinfo=ist)
    ) == (datetime(2026, 11, 17, 22, 0, tzinfo=UTC), datetime(2026, 11, 17, 23, 0, tzinfo=UTC))
    seven = repo.bin_pieces(NOW - timedelta(days=7, seconds=17), NOW + timedelta(seconds=297))
    assert [r for r, _, _ in seven] == ["1m", "1h", "1d", "1h", "1m"]


async def test_sums_equal_the_minute_rows(database_url: str) -> None:
    sim = Simulator(seed=8, start=NOW - timedelta(days=4), interval=timedelta(minutes=9))
    writer = EventWriter(database_url)
    try:
        events = [event_row(e) for e in sim.events(640)]
        for i in range(0, len(events), 2000):
            await writer.write(events[i : i + 2000])
    finally:
        await writer.close()
    engine = make_engine(database_url)
    conn = await asyncpg.connect(libpq_url(database_url))
    try:
        compared = 0
        for start, end in ranges(random.Random(2), 30):
            _, lo, hi = repo.bin_range(start, end)
            rows = await conn.fetch(
                "SELECT agent_id, bin, sum(weight), sum(sum_conf), sum(sum_y), sum(sum_sq_err),"
                " sum(sum_w2), sum(count) FROM calibration_bins WHERE resolution = '1m'"
                " AND window_start >= $1 AND window_start < $2 GROUP BY 1, 2 ORDER BY 1, 2",
                lo,
                hi,
            )
            want: dict[tuple[object, ...], list[tuple[object, ...]]] = {}
            for r in rows:
                want.setdefault((r[0],), []).append(tuple(r[1:]))
            got = await repo.bin_sums(engine, repo.Segment(), start, end)
            assert got.keys() == want.keys()
            for key, sums in want.items():
                expected = BinSums.from_rows(sums)
                assert got[key].isclose(expected), (start, end, key)
                assert got[key].total_count == expected.total_count
            compared += len(want) * (len(repo.bin_pieces(start, end)) > 1)
            # the dashboards' calibration_bins_in(lo, hi): windows starting in [lo, hi]
            # ($__timeFilter), read as days, hours and edge minutes: the minute rows' sums
            minute = await conn.fetch(
                f"SELECT agent_id, bin, {SUMS} FROM calibration_bins WHERE resolution = '1m'"
                " AND window_start BETWEEN $1 AND $2 GROUP BY 1, 2 ORDER BY 1, 2",
                start,
                end,
            )
            mixed = await conn.fetch(
                f"SELECT agent_id, bin, {SUMS} FROM calibration_bins_in($1, $2)"
                " GROUP BY 1, 2 ORDER BY 1, 2",
                start,
                end,
            )
            assert [(r[0], r[1], r["count"]) for r in mixed] == [
                (r[0], r[1], r["count"]) for r in minute
            ]
            for a, b in zip(mixed, minute, strict=True):
                assert all(abs(a[k] - b[k]) <= 1e-9 * max(1.0, abs(b[k])) for k in range(2, 7))
        assert compared >= 40
    finally:
        await conn.close()
        await engine.dispose()
