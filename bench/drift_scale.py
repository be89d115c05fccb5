"""How drift checks scale with the number of segments: ``monitor drift`` and the worker's drift
round over S domains of one agent, for each S of ``--segments`` (default 50 and 5,000).

Per S, one scratch database on ``DATABASE_URL``'s server (migrated, dropped at the end) is filled
through the worker's own write path (``EventWriter.write``: events, conversations, items,
calibration bins, the design-effect roll-ups) with conversations of the agent, each a user
message, an assistant message with a confidence and a ground-truth outcome (a labelled item),
in the last hour (the recent window) and in the 24 hours before it (the reference):
``--total`` conversations per window split evenly over the S domains (the same traffic in more
segments: what grows is the work per segment), or ``--per-domain`` conversations per domain and
window (the traffic grows with S too). Once every store is filled it times, on each store in
turn (``--repeat`` rounds of all stores: a shared machine's load then weighs on every S alike):

- ``monitor drift --agent AGENT --json`` as a subprocess (wall time, its start-up included, the
  checks stored), ``--repeat`` times (median);
- the worker's drift round (:func:`monitor.analytics.periodic.drift_once`, as
  ``monitor.worker.services.AnalyticsService`` runs it, default settings, scipy imported before:
  a worker imports it once; the worker's collector settings,
  :func:`monitor.core.gc_tuning.tune_gc`, without which full collections walking every
  imported object ran in each round over thousands of segments): the first round (no segment
  has a reference yet: each gets one) and a second five minutes later (every segment has one),
  ``--repeat`` pairs, each from no stored drift check or state (medians).

It checks that each timed run checked every one of the S segments (the load it claims) and
prints one row per S, the ratio of the largest S to the smallest against the goal (at most
3x) and the load average (a shared machine's figures are upper bounds). Run from the repository
root::

    DATABASE_URL=postgresql://postgres@127.0.0.1:5432/postgres .venv/bin/python bench/drift_scale.py
    ... bench/drift_scale.py --segments 50 500 5000 --per-domain 20 --repeat 3
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

import asyncpg

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from bench.harness import given_postgres, scratch_database  # noqa: E402
from monitor.analytics.periodic import drift_once  # noqa: E402
from monitor.config import Settings  # noqa: E402
from monitor.contract.events import AgentEvent, validate_event  # noqa: E402
from monitor.core.clock import FixedClock  # noqa: E402
from monitor.core.gc_tuning import tune_gc  # noqa: E402
from monitor.core.lazy import lazy_module  # noqa: E402
from monitor.ingest.rows import event_row  # noqa: E402
from monitor.ingest.writer import EventWriter  # noqa: E402
from monitor.store.engine import make_engine  # noqa: E402

stats = lazy_module("scipy.stats")

AGENT = "agent-drift"
BATCH = 5000
GOAL = 3.0  # the largest S within this many times the smallest S's time


def _events(segments: int, per_window: int, now: datetime, seed: int) -> Iterator[AgentEvent]:
    """``per_window`` conversations per domain in the recent hour and in the 24 h before it;
    the reference's confidence slightly higher than its accuracy, the recent one as it."""
    rng = random.Random(seed)
    recent = now.replace(second=0, microsecond=0)
    windows = (
        (recent - timedelta(hours=25), timedelta(hours=24), 0.05),
        (recent - timedelta(minutes=58), timedelta(minutes=57), 0.0),
    )
    n = 0
    for d in range(segments):
        domain = f"d{d:05d}"
        for start, span, skew in windows:
            for _ in range(per_window):
                n += 1
                cid = f"c{n:08d}"
                at = start + span * rng.random()
                conf = rng.uniform(0.3, 0.95)
                ok = rng.random() < conf - skew
                base = {"schema": "agent-event/v1", "conversation_id": cid, "agent": {"id": AGENT}}
                base["context"] = {"domain": domain}
                yield from (
                    validate_event(
                        {
                            **base,
                            "event_id": f"{cid}:{i}",
                            "type": kind,
                            "ts": (at + timedelta(seconds=i)).isoformat(),
                            kind: payload,
                        }
                    )
                    for i, (kind, payload) in enumerate(
                        [
                            ("message", {"role": "user", "content": "where is my order?"}),
                            ("message", {"role": "assistant", "content": "ok", "confidence": conf}),
                            ("outcome", {"success": ok, "source": "ground_truth"}),
                        ]
                    )
                )


async def fill(dsn: str, segments: int, per_window: int, now: datetime) -> tuple[int, int]:
    """Write the traffic; (events, labelled items)."""
    writer = EventWriter(dsn)
    await writer.start()
    written, rows = 0, []
    try:
        for e in _events(segments, per_window, now, seed=segments):
            rows.append(event_row(e))
            if len(rows) >= BATCH:
                written += (await writer.write(rows)).inserted
                rows = []
        if rows:
            written += (await writer.write(rows)).inserted
    finally:
        await writer.close()
    conn = await asyncpg.connect(dsn)
    try:
        items = int(await conn.fetchval("SELECT count(*) FROM items WHERE label IS NOT NULL"))
        await conn.execute("VACUUM ANALYZE")
    finally:
        await conn.close()
    return written, items


def cli_drift(dsn: str, now: datetime) -> tuple[float, int]:
    """``monitor drift --agent AGENT --json`` at ``now``: (wall seconds, segments checked)."""
    env = {**os.environ, "MONITOR_DATABASE_URL": dsn, "PYTHONPATH": str(REPO)}
    env.pop("DATABASE_URL", None)
    argv = [sys.executable, "-m", "monitor.cli", "drift", "--agent", AGENT, "--json"]
    argv += ["--at", now.isoformat()]
    t0 = time.perf_counter()
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=3600)
    seconds = time.perf_counter() - t0
    if done.returncode != 0:
        raise RuntimeError(f"monitor drift failed ({done.returncode}): {done.stderr[-2000:]}")
    return seconds, len(json.loads(done.stdout)["checks"])


async def worker_round(dsn: str, now: datetime) -> tuple[float, int]:
    """One drift round as the worker runs it: (seconds, segments whose stored state this
    round advanced: their recent window ends at or after ``now``)."""
    s = Settings()
    engine = make_engine(dsn, pool_size=2)
    try:
        t0 = time.perf_counter()
        await drift_once(
            engine,
            FixedClock(now),
            timedelta(seconds=s.drift_recent_s),
            s.drift_alpha,
            s.drift_min_samples,
            timedelta(seconds=s.drift_reference_s),
            s.drift_min_reference,
        )
        seconds = time.perf_counter() - t0
    finally:
        await engine.dispose()
    conn = await asyncpg.connect(dsn)
    try:
        states = int(
            await conn.fetchval(
                "SELECT count(*) FROM drift_references WHERE last_recent_to >= $1", now
            )
        )
    finally:
        await conn.close()
    return seconds, states


async def clear_drift(dsn: str) -> None:
    """No stored drift check or state: the next round is a first round again."""
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute("DELETE FROM drift_checks; DELETE FROM drift_references")
    finally:
        await conn.close()


@dataclass
class Row:
    segments: int
    per_domain: int
    events: int
    items: int
    fill_s: float
    cli_s: float
    round1_s: float
    round2_s: float


@dataclass
class Store:
    segments: int
    per_domain: int
    dsn: str
    now: datetime
    events: int
    items: int
    fill_s: float
    cli: list[float] = field(default_factory=list)
    firsts: list[float] = field(default_factory=list)
    seconds: list[float] = field(default_factory=list)


async def time_once(st: Store) -> None:
    """One ``monitor drift`` run and one pair of worker rounds from no drift state on ``st``."""
    seconds, checked = await asyncio.to_thread(cli_drift, st.dsn, st.now)
    assert checked == st.segments, f"monitor drift checked {checked} of {st.segments}"
    st.cli.append(seconds)
    await clear_drift(st.dsn)
    first, states = await worker_round(st.dsn, st.now)
    assert states == st.segments, f"the first round tracked {states} of {st.segments} segments"
    later = st.now + timedelta(minutes=5)  # the next round, as the worker's interval
    second, states = await worker_round(st.dsn, later)
    assert states == st.segments, f"the second round tracked {states} of {st.segments} segments"
    st.firsts.append(first)
    st.seconds.append(second)


async def main(args: argparse.Namespace) -> None:
    admin = given_postgres()
    if not admin:
        raise SystemExit("set DATABASE_URL to a Postgres server (the admin database)")
    stats.kstwo.sf(0.5, 10)  # scipy imported (the worker's first round imports it, once)
    tune_gc()  # as the worker does once started (monitor.worker.app.run_worker)
    async with contextlib.AsyncExitStack() as stack:
        stores = []
        for s in args.segments:  # every store filled first, then the timings interleaved
            per_domain = args.per_domain or max(1, args.total // s)
            dsn = await stack.enter_async_context(scratch_database(admin, f"drift{s}"))
            now = datetime.now(UTC).replace(second=0, microsecond=0) + timedelta(seconds=1)
            t0 = time.perf_counter()
            events, items = await fill(dsn, s, per_domain, now)
            fill_s = time.perf_counter() - t0
            stores.append(Store(s, per_domain, dsn, now, events, items, fill_s))
        # round-robin: a shared machine's load changes as much between S as within one S
        for _ in range(args.repeat):
            for st in stores:
                await time_once(st)
    rows = [
        Row(
            st.segments,
            st.per_domain,
            st.events,
            st.items,
            st.fill_s,
            statistics.median(st.cli),
            statistics.median(st.firsts),
            statistics.median(st.seconds),
        )
        for st in stores
    ]
    for row in rows:
        print(
            f"{row.segments:>6} segments x {row.per_domain:>4} conversations per window"
            f"  {row.events:>9,} events  {row.items:>8,} items"
            f"  (fill {row.fill_s:.0f} s)   monitor drift {row.cli_s:6.2f} s"
            f"   worker round: first {row.round1_s:6.2f} s, next {row.round2_s:6.2f} s",
            flush=True,
        )
    lo, hi = rows[0], rows[-1]
    ratios = {
        "monitor drift": hi.cli_s / lo.cli_s,
        "worker round, first": hi.round1_s / lo.round1_s,
        "worker round, next": hi.round2_s / lo.round2_s,
    }
    print(f"ratio {hi.segments} / {lo.segments} segments (goal: at most {GOAL:g}x):")
    for name, ratio in ratios.items():
        print(f"  {name:<20} {ratio:5.2f}x  {'met' if ratio <= GOAL else 'NOT met'}")
    print(f"load average at the end: {' '.join(f'{x:.1f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--segments", type=int, nargs="+", default=[50, 5000])
    parser.add_argument(
        "--total",
        type=int,
        default=20_000,
        help="conversations per window (recent, reference), split over the domains",
    )
    parser.add_argument(
        "--per-domain",
        type=int,
        default=0,
        help="conversations per domain and window instead of --total (traffic grows with S)",
    )
    parser.add_argument(
        "--repeat",
        type=int,
        default=1,
        help="monitor drift runs and worker round pairs, each pair from no drift state (medians)",
    )
    asyncio.run(main(parser.parse_args()))
