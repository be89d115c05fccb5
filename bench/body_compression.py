"""Bytes and write CPU per event with event bodies compressed by pglz vs lz4 (migration 0026).

The same events are written with the real ``EventWriter`` (direct path, batches of ``--batch``)
into two freshly migrated scratch databases on one server, one with ``events.body`` (parent and
partitions) set back to pglz, the other as migrated (lz4), arms alternating ``--reps`` times.
Two workloads: the simulator's events as they are (about 480 bytes of JSON each: under the TOAST
threshold, so never compressed) and the same events with every tool result's content replaced by
a JSON document of about ``--body-bytes`` (records from a seeded generator: realistic, partly
repetitive API output). Prints per workload and arm: stored bytes per event (the events
partitions with their TOAST tables and indexes), body bytes per event (``pg_column_size``), the
Postgres backend's CPU per event while writing (``/proc/<pid>/schedstat``, when the server runs
on this machine) and the lz4/pglz ratios of the same run. Uses ``DATABASE_URL``'s server when
set, else a private embedded Postgres::

    .venv/bin/python bench/body_compression.py                  # 20,000 events, 2 reps
    .venv/bin/python bench/body_compression.py --events 50000 --body-bytes 16000
"""

from __future__ import annotations

import argparse
import itertools
import json
import random
import sys
from collections import defaultdict
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import asyncpg

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.harness import on_postgres, scratch_database
from bench.ingest_profile import cpu_ns
from monitor.contract.events import validate_event
from monitor.ingest.rows import EventRow, event_row
from monitor.ingest.writer import EventWriter
from monitor.sim.traffic import Simulator
from monitor.store.engine import libpq_url

PARTITIONS = """
SELECT format('%I.%I', n.nspname, c.relname) FROM pg_inherits i
JOIN pg_class c ON c.oid = i.inhrelid JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE i.inhparent = 'public.events'::regclass"""
SIZE = "SELECT sum(pg_total_relation_size(relid)) FROM pg_partition_tree('events')"
BODY = "SELECT sum(pg_column_size(body)), count(*) FROM events"
WORDS = (
    "order",
    "shipped",
    "pending",
    "refund",
    "plan",
    "premium",
    "basic",
    "roaming",
    "invoice",
    "credit",
    "store",
    "warehouse",
    "delivered",
    "cancelled",
    "backorder",
)


def tool_output(rng: random.Random, size: int) -> str:
    """A JSON document of about ``size`` characters, like a tool's API answer."""
    records: list[dict[str, Any]] = []
    text = "[]"
    while len(text) < size:
        records.append(
            {
                "id": f"{rng.choice(WORDS)}-{rng.randrange(10**8):08d}",
                "status": rng.choice(WORDS),
                "amount": round(rng.uniform(1, 2000), 2),
                "items": [
                    {"sku": f"SKU{rng.randrange(10**5):05d}", "qty": rng.randrange(1, 9)}
                    for _ in range(rng.randrange(1, 4))
                ],
                "note": " ".join(rng.choice(WORDS) for _ in range(rng.randrange(3, 12))),
            }
        )
        text = json.dumps(records)
    return text


def workload(n: int, seed: int, body_bytes: int | None) -> list[EventRow]:
    sim = Simulator(seed, datetime(2025, 1, 1, tzinfo=UTC))
    rng = random.Random(seed)
    rows = []
    for e in itertools.islice(sim.events(None), n):
        d = json.loads(e.to_json())
        if body_bytes and d["type"] == "tool_result":
            d["tool_result"]["content"] = tool_output(rng, body_bytes)
        rows.append(event_row(validate_event(d)))
    return rows


async def write_arm(dsn: str, method: str, rows: list[EventRow], batch: int) -> dict[str, float]:
    conn = await asyncpg.connect(dsn)
    try:
        for table in ["public.events", *[r[0] for r in await conn.fetch(PARTITIONS)]]:
            await conn.execute(f"ALTER TABLE {table} ALTER COLUMN body SET COMPRESSION {method}")
    finally:
        await conn.close()
    writer = EventWriter(dsn, pool_size=1)
    await writer.start()
    assert writer._pool is not None
    async with writer._pool.acquire() as c:  # the pool's only connection: the one that writes
        pid = int(await c.fetchval("SELECT pg_backend_pid()"))
    before = cpu_ns(pid)
    try:
        for i in range(0, len(rows), batch):
            await writer.write(rows[i : i + batch])
        after = cpu_ns(pid)
    finally:
        await writer.close()
    conn = await asyncpg.connect(dsn)
    try:
        size = float(await conn.fetchval(SIZE))
        body, count = await conn.fetchrow(BODY)
        kinds = await conn.fetch("SELECT DISTINCT pg_column_compression(body) FROM events")
    finally:
        await conn.close()
    assert count == len(rows), (count, len(rows))
    used = {k[0] for k in kinds} - {None}
    assert used <= {method}, f"{method} arm stored {used}"
    cpu = (after - before) / 1e9 if before is not None and after is not None else float("nan")
    return {"bytes": size / count, "body": float(body) / count, "cpu_us": cpu / count * 1e6}


async def main_async(args: argparse.Namespace, admin_url: str) -> None:
    conn = await asyncpg.connect(libpq_url(admin_url))
    try:
        lz4 = await conn.fetchval(
            "SELECT 'lz4' = ANY(enumvals) FROM pg_settings WHERE name = 'default_toast_compression'"
        )
    finally:
        await conn.close()
    if not lz4:
        raise SystemExit(
            "this Postgres has no lz4 (the embedded wheel's lacks it): set DATABASE_URL"
        )
    loads = {"simulator": None, f"tool results ~{args.body_bytes // 1000} kB": args.body_bytes}
    print(f"{args.events:,} events per arm, batches of {args.batch}, {args.reps} reps\n")
    head = ("workload", "arm", "bytes/event", "body/event", "pg CPU µs/ev")
    print(f"{head[0]:<22} {head[1]:<5} {head[2]:>12} {head[3]:>11} {head[4]:>13}")
    for name, size in loads.items():
        rows = workload(args.events, args.seed, size)
        got: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
        for _ in range(args.reps):
            for method in ("pglz", "lz4"):
                async with scratch_database(admin_url, f"bc_{method}") as dsn:
                    for k, v in (await write_arm(dsn, method, rows, args.batch)).items():
                        got[method][k] += v / args.reps
        for method in ("pglz", "lz4"):
            g = got[method]
            print(
                f"{name:<22} {method:<5} {g['bytes']:>12,.0f} {g['body']:>11,.0f} "
                f"{g['cpu_us']:>13,.1f}"
            )
        lz, pg = got["lz4"], got["pglz"]
        print(
            f"{name:<22} {'ratio':<5} {lz['bytes'] / pg['bytes']:>12.2f} "
            f"{lz['body'] / pg['body']:>11.2f} {lz['cpu_us'] / pg['cpu_us']:>13.2f}"
        )


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="bench/body_compression.py", description=__doc__.split("\n")[0]
    )
    p.add_argument("--events", type=int, default=20_000, help="events per arm (20000)")
    p.add_argument("--batch", type=int, default=2000, help="events per write batch (2000)")
    p.add_argument("--body-bytes", type=int, default=8000, help="tool result size (8000)")
    p.add_argument("--reps", type=int, default=2, help="times each arm is written (2)")
    p.add_argument("--seed", type=int, default=7, help="simulator seed (7)")
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    on_postgres("bodycomp-", lambda url: main_async(args, url))
    return 0


if __name__ == "__main__":
    sys.exit(main())
