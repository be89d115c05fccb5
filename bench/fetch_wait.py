"""Draining a backlog with the consumer's fetch wait at Kafka's 500 ms against the worker's 100 ms.

On the embedded Tansu broker, a fetch is sometimes held for the whole ``fetch_max_wait_ms``
although a partition in it still has records, so a consumer draining a backlog stalls for up to
that long at a time (found in ``bench/ingest.py``'s traces: the last few thousand records of a
phase arrived 0.25-0.5 s after the rest). This fills a 4-partition topic with N records of
about an event's size, then drains it with the ingest loop's consumer settings and a getmany
loop that spends ``--work-ms`` per batch (standing in for decode and write), alternating the two
waits; prints each drain's seconds, the largest gap between two batches, and the medians'
ratio. Run from the repository root::

    .venv/bin/python bench/fetch_wait.py                # 50,000 records, 4 drains per wait
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # runs as a script

from bench.harness import scratch_topic
from monitor.ingest.config import IngestConfig
from monitor.stack.broker import EmbeddedBroker

PARTITIONS, RECORD_BYTES = 4, 900
WAITS = (500, IngestConfig.fetch_max_wait_ms)


async def fill(bootstrap: str, topic: str, n: int) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=5)
    await producer.start()
    try:
        payload = b"x" * RECORD_BYTES
        for i in range(n):
            await producer.send(topic, key=str(i % 997).encode(), value=payload)
        await producer.flush()
    finally:
        await producer.stop()


async def drain(
    bootstrap: str, topic: str, n: int, wait_ms: int, work_s: float, group: str
) -> tuple[float, float]:
    """Seconds from the first batch to the last record, and the largest gap between batches."""
    config = IngestConfig(bootstrap, fetch_max_wait_ms=wait_ms)
    batch = config.batch_max_events
    consumer = AIOKafkaConsumer(  # the ingest loop's settings but the wait
        topic, bootstrap_servers=bootstrap, group_id=group, **config.consumer_settings()
    )
    await consumer.start()
    try:
        got, first, last, gap = 0, 0.0, 0.0, 0.0
        while got < n:
            records = await consumer.getmany(timeout_ms=200, max_records=batch)
            count = sum(len(r) for r in records.values())
            if not count:
                continue
            now = time.perf_counter()
            first = first or now
            gap = max(gap, now - last) if last else 0.0
            last = now
            got += count
            await asyncio.sleep(work_s)
        return last - first, gap
    finally:
        await consumer.stop()


async def bench(bootstrap: str, args: argparse.Namespace) -> None:
    async with scratch_topic(bootstrap, "fetch-wait", PARTITIONS) as topic:
        await fill(bootstrap, topic, args.records)
        seconds = await drains(bootstrap, topic, args)
    old, new = (statistics.median(seconds[w]) for w in WAITS)
    print(
        f"\nmedian drain: {WAITS[0]} ms {old:.2f} s, {WAITS[1]} ms {new:.2f} s; "
        f"{WAITS[1]} ms / {WAITS[0]} ms = {new / old:.2f}"
    )


async def drains(bootstrap: str, topic: str, args: argparse.Namespace) -> dict[int, list[float]]:
    """Drain seconds per wait, the waits alternated ``args.repeat`` times."""
    seconds: dict[int, list[float]] = {w: [] for w in WAITS}
    work_s = args.work_ms / 1000
    for i in range(args.repeat):
        for wait in WAITS:
            s, gap = await drain(bootstrap, topic, args.records, wait, work_s, f"g{i}-{wait}")
            seconds[wait].append(s)
            print(
                f"repeat {i + 1}/{args.repeat}: fetch_max_wait_ms={wait:3d}  drain {s:.2f} s, "
                f"largest gap between batches {gap:.2f} s"
            )
    return seconds


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="bench/fetch_wait.py", description=__doc__.split("\n")[0])
    p.add_argument("--records", type=int, default=50_000, help="records in the backlog (50000)")
    p.add_argument("--repeat", type=int, default=4, help="drains per wait, alternated (4)")
    p.add_argument(
        "--work-ms",
        type=float,
        default=100.0,
        help="time spent per batch, standing in for decode and write (100)",
    )
    args = p.parse_args(argv)
    with EmbeddedBroker() as broker:
        asyncio.run(bench(broker.bootstrap, args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
