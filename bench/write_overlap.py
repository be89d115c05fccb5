"""Two batch writes in flight against one: what overlapping consecutive batches gains.

The ingest loop writes up to ``writes_in_flight`` batches at once (:mod:`monitor.ingest.loop`).
This measures, in-process and without a broker or decoding, the real ``EventWriter`` writing
the same pre-decoded batches of simulated events into a fresh scratch database either
*serially* (each write awaited) or *overlapped* (batch k+1's write starts once batch k's rows
are copied to Postgres; at most two in flight, on the writer's two connections), alternating
the two modes; prints events/s per run and the ratio overlapped / serial of the medians. The
writes of two batches that share conversations still serialize on the conversations' advisory
locks (taken after the COPY, before the batch statement): on the direct path (default) the id
claim and the COPYs of batch k+1 overlap batch k's roll-ups; with ``--staged`` (every batch
through the staging table, as replays go) only the staging COPY does.
Uses ``DATABASE_URL``'s server when set, else a private embedded Postgres::

    .venv/bin/python bench/write_overlap.py --repeat 3 [--staged]
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path

from aiokafka import ConsumerRecord

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # runs as a script

from bench.harness import on_postgres, scratch_database
from monitor.ingest.decoding import decode_records
from monitor.ingest.rows import EventRow
from monitor.ingest.writer import EventWriter
from monitor.sim.traffic import Simulator


def batches(n: int, size: int, seed: int) -> list[list[EventRow]]:
    sim = Simulator(seed, datetime(2025, 1, 1, tzinfo=UTC))
    values = [e.to_json() for e in itertools.islice(sim.events(None), n)]
    records = [
        ConsumerRecord("t", i % 4, i // 4, 0, 0, None, v, None, 0, len(v), [])
        for i, v in enumerate(values)
    ]
    return [decode_records(records[i : i + size])[0] for i in range(0, n, size)]


async def write_all(writer: EventWriter, rows: list[list[EventRow]], overlapped: bool) -> None:
    previous: asyncio.Task[object] | None = None
    for batch in rows:
        if not overlapped:
            await writer.write(batch)
            continue
        copied = asyncio.Event()
        task = asyncio.create_task(writer.write(batch, copied=copied.set))
        waiting = asyncio.create_task(copied.wait())
        await asyncio.wait((waiting, task), return_when=asyncio.FIRST_COMPLETED)
        waiting.cancel()
        if task.done():
            task.result()  # a failed write ends the run
        if previous is not None:
            await previous  # at most two in flight
        previous = task
    if previous is not None:
        await previous


async def one_run(
    admin_url: str, rows: list[list[EventRow]], overlapped: bool, direct: bool
) -> float:
    async with scratch_database(admin_url, "overlap") as dsn:
        writer = EventWriter(dsn, pool_size=2, direct=direct)
        await writer.start()
        try:
            started = time.perf_counter()
            await write_all(writer, rows, overlapped)
            return sum(map(len, rows)) / (time.perf_counter() - started)
        finally:
            await writer.close()


async def main_async(args: argparse.Namespace, admin_url: str) -> None:
    rows = batches(args.events, args.batch, args.seed)
    rates: dict[str, list[float]] = {"serial": [], "overlapped": []}
    for i in range(args.repeat):
        for mode in ("serial", "overlapped"):
            rate = await one_run(admin_url, rows, mode == "overlapped", not args.staged)
            rates[mode].append(rate)
            print(f"repeat {i + 1}/{args.repeat}: {mode:10} {rate:,.0f} events/s", flush=True)
    serial, overlapped = (statistics.median(rates[m]) for m in ("serial", "overlapped"))
    print(
        f"\nmedian: serial {serial:,.0f} events/s, overlapped {overlapped:,.0f} events/s, "
        f"overlapped / serial = {overlapped / serial:.2f}"
    )


def run_write_bench(
    prog: str,
    description: str,
    staged_help: str,
    bench: Callable[[argparse.Namespace, str], Awaitable[None]],
) -> int:
    """Parse the options the write benchmarks share (events, batch, repeat, seed, staged) and
    run ``bench(args, admin_url)`` on :func:`postgres_server`'s server."""
    p = argparse.ArgumentParser(prog=prog, description=description)
    p.add_argument("--events", type=int, default=50_000, help="events per run (50000)")
    p.add_argument("--batch", type=int, default=5000, help="events per batch (5000)")
    p.add_argument("--repeat", type=int, default=3, help="runs of each mode (3)")
    p.add_argument("--seed", type=int, default=7, help="simulator seed (7)")
    p.add_argument("--staged", action="store_true", help=staged_help)
    args = p.parse_args()
    on_postgres("write-bench-", lambda url: bench(args, url))
    return 0


def main() -> int:
    return run_write_bench(
        "bench/write_overlap.py",
        __doc__.split("\n")[0],
        "stage every batch (the path of replays) instead of the direct write",
        main_async,
    )


if __name__ == "__main__":
    raise SystemExit(main())
