"""Check that ``bench/metrics.py --order conversation`` fills the same store as the default
time-ordered fill: the same simulated traffic written both ways into two scratch databases,
then every table the reads use compared row by row.

Allowed differences, printed: floating sums equal to 9 significant decimals (summation order),
and ``escalation_bins`` rows whose ``conversations`` count went back to 0 (a conversation moved
from one key to another across two batches leaves a zero row; a row of zeros adds nothing).
Columns holding write times (``ingested_at``, ``updated_at``, ``labelled_at``,
``created_at``) and the ingest-time tables (``event_minutes``, ``ingest_delay_bins``) are
skipped: they record when the fill ran. Run from the repository root (``DATABASE_URL``: a
server where scratch databases may be created)::

    .venv/bin/python bench/fill_order_check.py [--items 20000]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from datetime import UTC, datetime
from pathlib import Path

import asyncpg

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # runs as a script

from bench.harness import scratch_database
from bench.metrics import fill

SKIP = {"ingested_at", "updated_at", "labelled_at", "created_at"}
TABLES = (
    "events",
    "event_ids",
    "conversations",
    "items",
    "calibration_bins",
    "escalation_bins",
    "conversation_minutes",
    "segment_values",
)
Row = tuple[object, ...]


def _norm(value: object) -> object:
    return float(f"{value:.9g}") if isinstance(value, float) else value


async def dump(dsn: str) -> dict[str, list[Row]]:
    """Every row of :data:`TABLES`, write-time columns left out, floats to 9 digits, sorted."""
    conn = await asyncpg.connect(dsn)
    try:
        out: dict[str, list[Row]] = {}
        for table in TABLES:
            cols = [
                r[0]
                for r in await conn.fetch(
                    "SELECT column_name FROM information_schema.columns WHERE table_name = $1"
                    " AND table_schema = 'public' ORDER BY ordinal_position",
                    table,
                )
            ]
            kept = [c for c in cols if c not in SKIP]
            rows = [
                tuple(_norm(v) for v in r)
                for r in await conn.fetch(f"SELECT {', '.join(kept)} FROM {table}")
            ]
            if table == "escalation_bins":
                rows = [r for r in rows if r[kept.index("conversations")] != 0]
            out[table] = sorted(rows, key=repr)
        return out
    finally:
        await conn.close()


async def main(args: argparse.Namespace) -> int:
    now = datetime.now(UTC).replace(microsecond=0)
    dumps = []
    for order in ("time", "conversation"):
        async with scratch_database(args.database_url, "fillorder") as dsn:
            events, items, secs = await fill(dsn, args.items, args.batch, now, order)
            print(f"{order:>12} order: {events} events, {items} items, {secs:.1f} s")
            dumps.append(await dump(dsn))
    failed = 0
    for table in TABLES:
        a, b = dumps[0][table], dumps[1][table]
        same = a == b
        failed += not same
        print(f"{table:>22}: {len(a)} / {len(b)} rows, {'same' if same else 'DIFFERENT'}")
    return 1 if failed else 0


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--items", type=int, default=20_000)
    p.add_argument("--batch", type=int, default=5000)
    p.add_argument(
        "--database-url",
        default=os.environ.get("DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/postgres"),
    )
    sys.exit(asyncio.run(main(p.parse_args())))
