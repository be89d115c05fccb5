"""Where one worker's batch time goes: decode, each statement of ``EventWriter.write``, commit.

In-process, no broker: N simulated events (the same ``Simulator`` as ``bench/ingest.py``) are
serialized as the SDK sends them, then, batch by batch, decoded with the worker's own
``decode_records`` and written with the real ``EventWriter`` into a freshly migrated scratch
database. Every SQL statement the writer sends is timed with asyncpg's query logger (client-side
elapsed time, which includes the server's work and the round trip), and grouped by what it does:
each COPY (the logger does not see them: timed around asyncpg's ``copy_records_to_table``, per
table: the direct path's id claim, events and narrow table, the staging table), what is left of
the write time (client-side work between statements), the direct path's roll-up statement
(``monitor.ingest.direct_sql``) or the staging path's event insert + roll-up, conversation
locks, sampling decisions, items + calibration bins, transaction begin/commit (and savepoint).
Prints one table (ms per batch, µs per event, share of the batch) and, when the Postgres backend
runs on this machine (its ``/proc/<pid>/schedstat`` is readable), the backend's CPU per step as
well: CPU time is what a loaded, shared machine distorts least (wall times move 2x between
identical runs).
Uses ``DATABASE_URL``'s server when set, else a private embedded Postgres::

    .venv/bin/python bench/ingest_profile.py                 # 50,000 events, batches of 5000
    .venv/bin/python bench/ingest_profile.py --events 20000 --batch 2000
"""

from __future__ import annotations

import argparse
import itertools
import sys
import time
from collections import defaultdict
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import asyncpg
from aiokafka import ConsumerRecord

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # runs as a script

from bench.harness import on_postgres, scratch_database
from monitor.ingest.decoding import decode_records
from monitor.ingest.writer import EventWriter
from monitor.sim.traffic import Simulator

STEPS = (  # (label, a fragment of the statement that identifies it), first match wins
    ("staging table", "CREATE TEMP TABLE"),
    ("event insert + roll-up", "INSERT INTO events"),
    ("roll-up (direct)", "FROM staging_rollup\n)"),
    ("conversation locks", "pg_advisory_xact_lock"),
    ("sampling decisions", "sample_rate IS NULL"),
    ("items + bins", "items"),
    ("conflict check", "conflicting_duplicate"),
    ("begin / commit", ""),
)


#: the COPYs the query logger does not see, timed by :func:`time_copies` per table
COPY_STEPS = {
    "event_ids": "claim ids (direct: COPY)",
    "events": "COPY events (direct)",
    "staging_rollup": "COPY narrow table (direct)",
    "staging_events": "COPY staging table",
}


def time_copies(timings: Timings) -> None:
    """Time every ``copy_records_to_table`` of this process per table (client-side elapsed,
    and the backend CPU since the last mark, as the logged statements are)."""
    original = asyncpg.connection.Connection.copy_records_to_table

    async def timed(self: Any, table_name: str, **kwargs: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return await original(self, table_name, **kwargs)
        finally:
            timings.copy_done(table_name, time.perf_counter() - t0)

    asyncpg.connection.Connection.copy_records_to_table = timed  # type: ignore[method-assign]


def step_of(query: str) -> str:
    for label, fragment in STEPS:
        if fragment in query:
            return label
    return "other"


def cpu_ns(pid: int) -> int | None:
    """CPU nanoseconds process ``pid`` has run so far, or None when that cannot be read."""
    try:
        return int(Path(f"/proc/{pid}/schedstat").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


class Timings:
    """Accumulates asyncpg query-logger records per step, and the backend's CPU per step.

    CPU is attributed by marks: :meth:`mark` at the start of a write, :meth:`copied` when the
    COPYs are done (CPU since the mark: claim, temporary table, COPYs), then each logged statement
    gets the CPU since the previous mark (its own work: statements run one at a time)."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)
        self.cpu: dict[str, float] = defaultdict(float)
        self.pid: int | None = None
        self._last: int | None = None

    def mark(self) -> None:
        self._last = cpu_ns(self.pid) if self.pid is not None else None

    def _charge(self, step: str) -> None:
        if self.pid is None or self._last is None:
            return
        now = cpu_ns(self.pid)
        if now is not None:
            self.cpu[step] += (now - self._last) / 1e9
        self._last = now

    def copied(self) -> None:
        self._charge("rest (client, between statements)")

    def copy_done(self, table: str, elapsed: float) -> None:
        step = COPY_STEPS.get(table, f"COPY {table}")
        self.seconds[step] += elapsed
        self._charge(step)

    def __call__(self, record: Any) -> None:
        step = step_of(record.query)
        self.seconds[step] += record.elapsed
        if step != "staging table":  # its CPU is charged with the COPY that follows it
            self._charge(step)


async def profile(
    dsn: str, n: int, batch: int, seed: int, direct: bool = True
) -> tuple[dict[str, float], int]:
    sim = Simulator(seed, datetime(2025, 1, 1, tzinfo=UTC))
    values = [e.to_json() for e in itertools.islice(sim.events(None), n)]
    records = [
        ConsumerRecord("t", i % 4, i // 4, 0, 0, None, v, None, 0, len(v), [])
        for i, v in enumerate(values)
    ]
    timings = Timings()
    time_copies(timings)
    writer = EventWriter(dsn, pool_size=1, direct=direct)
    await writer.start()
    assert writer._pool is not None
    async with writer._pool.acquire() as conn:  # the pool holds one connection: this one
        conn.add_query_logger(timings)
        timings.pid = int(await conn.fetchval("SELECT pg_backend_pid()"))
        if cpu_ns(timings.pid) is None:
            timings.pid = None
    seconds: dict[str, float] = defaultdict(float)
    batches = 0
    try:
        for i in range(0, n, batch):
            t0 = time.perf_counter()
            rows, dead = decode_records(records[i : i + batch])
            t1 = time.perf_counter()
            timings.mark()
            await writer.write(rows, dead, source="t", copied=timings.copied)
            seconds["decode (worker CPU)"] += t1 - t0
            seconds["write, total"] += time.perf_counter() - t1
            batches += 1
    finally:
        await writer.close()
    # the write time no logged statement nor timed COPY accounts for (client-side encoding)
    copy = seconds["write, total"] - sum(timings.seconds.values())
    cpu = {f"cpu:{k}": v for k, v in timings.cpu.items()}
    return {**seconds, "rest (client, between statements)": copy, **timings.seconds, **cpu}, batches


def table(seconds: dict[str, float], n: int, batches: int) -> str:
    batch_total = seconds["decode (worker CPU)"] + seconds["write, total"]
    has_cpu = any(k.startswith("cpu:") for k in seconds)
    head = "| step | ms per batch | µs per event | share of batch |"
    lines = [
        head + (" backend CPU µs per event |" if has_cpu else ""),
        "|---|---|---|---|" + ("---|" if has_cpu else ""),
    ]
    order = [
        "decode (worker CPU)",
        *COPY_STEPS.values(),
        "rest (client, between statements)",
        *[label for label, _ in STEPS],
        "other",
        "write, total",
    ]
    for step in order:
        if step not in seconds:
            continue
        s = seconds[step]
        cpu = ""
        if has_cpu:
            c = seconds.get(f"cpu:{step}")
            cpu = f" {c / n * 1e6:.1f} |" if c is not None else " |"
        lines.append(
            f"| {step} | {s / batches * 1000:.1f} | {s / n * 1e6:.1f} | "
            f"{s / batch_total:.0%} |{cpu}"
        )
    cpu_total = sum(v for k, v in seconds.items() if k.startswith("cpu:"))
    lines.append(
        f"| **batch (decode + write)** | {batch_total / batches * 1000:.1f} | "
        f"{batch_total / n * 1e6:.1f} | 100% |"
        + (f" {cpu_total / n * 1e6:.1f} |" if has_cpu else "")
    )
    return "\n".join(lines)


async def main_async(args: argparse.Namespace, admin_url: str) -> None:
    async with scratch_database(admin_url, "profile") as dsn:
        seconds, batches = await profile(
            dsn, args.events, args.batch, args.seed, direct=not args.staged
        )
        conn = await asyncpg.connect(dsn)
        try:
            size = await conn.fetch(
                "SELECT relname, coalesce((SELECT sum(pg_total_relation_size(t.relid))"
                " FROM pg_partition_tree(c.oid) t), pg_total_relation_size(c.oid)) AS bytes"
                " FROM pg_class c "
                "JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = 'public' "
                "AND c.relkind IN ('r', 'p') ORDER BY 2 DESC LIMIT 7"
            )  # a partitioned: its parts
            counts = {
                t: int(await conn.fetchval(f"SELECT count(*) FROM {t}"))
                for t in ("events", "conversations", "items")
            }
        finally:
            await conn.close()
    path = "staged (--staged)" if args.staged else "direct"
    print(f"{args.events:,} events in {batches} batches of <= {args.batch}, {path} write\n")
    print(table(seconds, args.events, batches))
    print("\nrows:", ", ".join(f"{t} {c:,}" for t, c in counts.items()))
    print(
        "largest tables (bytes per event):",
        ", ".join(f"{r['relname']} {r['bytes'] / args.events:,.0f}" for r in size),
    )


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="bench/ingest_profile.py", description=__doc__.split("\n")[0])
    p.add_argument("--events", type=int, default=50_000, help="events (50000)")
    p.add_argument("--batch", type=int, default=5000, help="events per batch (5000)")
    p.add_argument("--seed", type=int, default=7, help="simulator seed (7)")
    p.add_argument(
        "--staged",
        action="store_true",
        help="stage every batch (the path of replays) instead of the direct write",
    )
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    on_postgres("profile-", lambda url: main_async(args, url))
    return 0


if __name__ == "__main__":
    sys.exit(main())
