"""What the cross-agent truth check costs the batch write (:mod:`monitor.ingest.owner_sql`).

Writes the same pre-decoded batches of simulated events (every conversation has outcome and
feedback events, about one event in seven) into fresh scratch databases with the real
``EventWriter``, serially, alternating two statements: the writer's own, and the same statement
with the check's ``stray`` relation replaced by an empty one (the baseline: what the write cost
before the check). Prints events/s per run and the ratio checked / baseline of the medians, for
the direct path and, with ``--staged``, the staging path. The order alternates (ABBA), so a
drift of the machine's speed favours neither. Uses ``DATABASE_URL``'s server when
set, else a private embedded Postgres::

    .venv/bin/python bench/owner_check.py --repeat 3 [--staged]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # runs as a script

from bench.harness import scratch_database
from bench.write_overlap import batches, run_write_bench
from monitor.ingest import owner_sql, writer
from monitor.ingest.direct_sql import ROLLUP_TABLE
from monitor.ingest.rows import EventRow
from monitor.ingest.writer import EventWriter

CHECKED = {"DIRECT_BATCH": writer.DIRECT_BATCH, "WRITE_BATCH": writer.WRITE_BATCH}
EMPTY = (
    "stray AS (SELECT NULL::text AS event_id, NULL::text AS conversation_id, "
    "NULL::timestamptz AS ts, NULL::text AS agent_id, NULL::text AS owner WHERE false)"
)
STRAY_DIRECT = owner_sql.direct_stray(ROLLUP_TABLE)
BASELINE = {
    "DIRECT_BATCH": writer.DIRECT_BATCH.replace(
        STRAY_DIRECT, STRAY_DIRECT.replace(STRAY_DIRECT.split(", refused AS")[0], EMPTY)
    ),
    "WRITE_BATCH": writer.WRITE_BATCH.replace(
        owner_sql.STAGED_STRAY,
        owner_sql.STAGED_STRAY.replace(owner_sql.STAGED_STRAY.split(", refused AS")[0], EMPTY),
    ),
}


async def one_run(admin_url: str, rows: list[list[EventRow]], checked: bool, direct: bool) -> float:
    statements = CHECKED if checked else BASELINE
    for name, sql in statements.items():
        setattr(writer, name, sql)
    async with scratch_database(admin_url, "owner") as dsn:
        w = EventWriter(dsn, pool_size=2, direct=direct)
        await w.start()
        try:
            started = time.perf_counter()
            for batch in rows:
                result = await w.write(batch)
                assert result.mismatched == 0 and result.staged == int(not direct)
            return sum(map(len, rows)) / (time.perf_counter() - started)
        finally:
            await w.close()


async def main_async(args: argparse.Namespace, admin_url: str) -> None:
    assert all(BASELINE[n] != CHECKED[n] for n in CHECKED), "the baseline must drop the check"
    rows = batches(args.events, args.batch, args.seed)
    rates: dict[str, list[float]] = {"baseline": [], "checked": []}
    for i in range(args.repeat):
        for mode in ("baseline", "checked")[:: 1 if i % 2 == 0 else -1]:  # ABBA: no order bias
            rate = await one_run(admin_url, rows, mode == "checked", not args.staged)
            rates[mode].append(rate)
            print(f"repeat {i + 1}/{args.repeat}: {mode:8} {rate:,.0f} events/s", flush=True)
    base, checked = (statistics.median(rates[m]) for m in ("baseline", "checked"))
    path = "staged" if args.staged else "direct"
    print(
        f"\n{path}: median baseline {base:,.0f} events/s, checked {checked:,.0f} events/s, "
        f"checked / baseline = {checked / base:.2f}"
    )


def main() -> int:
    return run_write_bench(
        "bench/owner_check.py", __doc__.split("\n")[0], "the staging path (replays)", main_async
    )


if __name__ == "__main__":
    raise SystemExit(main())
