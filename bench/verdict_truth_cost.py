"""What the triggers of migration 0040 (judge flags against outcomes) cost their writers.

On a store kept by ``bench/metrics.py --keep --judged``, three statements over ``--conversations``
conversations that have labelled verdicts and an outcome, each timed with the 0040 trigger of
its table enabled and disabled (``ALTER TABLE ... DISABLE TRIGGER`` inside the transaction;
every run rolled back, so the store is unchanged), alternating, ``--repeat`` times; prints the
medians and the extra time per row:

- an INSERT of 2 verdicts per conversation (as the judges' writer does; migration 0039's
  triggers run in both);
- an UPDATE changing their ``outcome_success`` (a late or changed outcome);
- an UPDATE of ``conversations`` leaving the outcome alone (the ingest writer's common case:
  the trigger only compares the transition tables).

Up to 1000 conversations (``BULK`` of the migration) the refresh takes a lock per conversation,
above it one table lock::

    .venv/bin/python bench/verdict_truth_cost.py postgresql://.../bench_metrics_<id> \\
        --conversations 500
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time

import asyncpg

INSERT = """
INSERT INTO verdicts (conversation_id, item_id, agent_id, judge, judge_version, status, label,
                      categories, latency_ms)
SELECT c, c || '-cost-' || i, 'bench', 'bench-judge', '1', 'ok', (i % 2)::smallint, '[]', 3
FROM unnest($1::text[]) AS c, generate_series(1, 2) AS i"""
OUTCOME = (
    "UPDATE conversations SET outcome_success = NOT outcome_success WHERE conversation_id = ANY($1)"
)
UNCHANGED = "UPDATE conversations SET updated_at = updated_at WHERE conversation_id = ANY($1)"

#: (name, statement, table, trigger, rows per conversation)
CASES = (
    ("INSERT verdicts (2 per conversation)", INSERT, "verdicts", "verdict_truth_insert", 2),
    ("UPDATE outcome_success (changed)", OUTCOME, "conversations", "conversation_truth_update", 1),
    (
        "UPDATE conversations (outcome unchanged)",
        UNCHANGED,
        "conversations",
        "conversation_truth_update",
        1,
    ),
)


async def timed(
    conn: asyncpg.Connection, sql: str, cids: list[str], table: str, trigger: str | None
) -> float:
    """ms of ``sql`` in a transaction rolled back, ``trigger`` disabled when given."""
    tx = conn.transaction()
    await tx.start()
    try:
        if trigger is not None:
            await conn.execute(f"ALTER TABLE {table} DISABLE TRIGGER {trigger}")
        t0 = time.perf_counter()
        await conn.execute(sql, cids)
        return (time.perf_counter() - t0) * 1000
    finally:
        await tx.rollback()


async def main(url: str, conversations: int, repeat: int) -> None:
    conn = await asyncpg.connect(url)
    try:
        cids = [
            r[0]
            for r in await conn.fetch(
                "SELECT DISTINCT conversation_id FROM verdict_truth ORDER BY 1 LIMIT $1",
                conversations,
            )
        ]
        print(f"{len(cids)} conversations, medians of {repeat}")
        print("| statement | rows | without ms | with ms | extra us per row |")
        print("| --- | ---: | ---: | ---: | ---: |")
        for name, sql, table, trigger, per in CASES:
            without, with_ = [], []
            for _ in range(repeat):
                without.append(await timed(conn, sql, cids, table, trigger))
                with_.append(await timed(conn, sql, cids, table, None))
            a, b = statistics.median(without), statistics.median(with_)
            rows = per * len(cids)
            print(f"| {name} | {rows} | {a:.1f} | {b:.1f} | {(b - a) * 1000 / rows:.0f} |")
    finally:
        await conn.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("url", help="a store filled by bench/metrics.py --keep --judged")
    parser.add_argument("--conversations", type=int, default=500)
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    asyncio.run(main(args.url, args.conversations, args.repeat))
