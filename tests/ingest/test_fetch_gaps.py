"""Gaps in a partition's offsets (``monitor.consume.guarded_fetch``, "Gaps"): the rule (pure),
and the embedded Tansu broker's out-of-order visibility of concurrently written batches, which
made a plain consumer skip acknowledged records for good."""

from __future__ import annotations

import asyncio
import time

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from monitor.consume.guarded_fetch import GAP_CONFIRM_S, Gap, GuardedFetch, Held, held_at
from monitor.stack.broker import EmbeddedBroker
from tests.servers.worker import create_topics

PRODUCERS = 4
# The race showed within 20 s on a 2-core machine in 4 runs of 4, and never in 120 s (871,273
# records) on another: the broker does not always race, so the read-everything assertion is the
# contract and the gap count is reported, not required. The pure tests above pin the gap rule.
RACE_DEADLINE_S = 30.0


def test_contiguous_offsets_are_returned_whole() -> None:
    assert held_at(10, [10, 11, 12], None, 0.0) == Held()
    assert held_at(None, [40, 41], None, 0.0) == Held()  # nothing returned before: unchecked
    assert held_at(12, [5, 6], None, 0.0) == Held()  # below: a re-read (broker data loss)


def test_a_gap_cuts_the_records_after_it_and_is_held_until_confirmed() -> None:
    first = held_at(10, [10, 11, 15, 16], None, 100.0)
    assert first == Held(cut=2, gap=Gap(12, 100.0))
    at_start = held_at(12, [15, 16], first.gap, 100.5)
    assert at_start == Held(cut=0, gap=Gap(12, 100.0))  # the same gap, held since it was seen
    assert held_at(12, [12, 13, 14, 15], first.gap, 100.6) == Held()  # filled
    later = held_at(12, [15, 16, 20], first.gap, 100.0 + GAP_CONFIRM_S)
    assert later == Held(cut=2, gap=Gap(17, 100.0 + GAP_CONFIRM_S), passed=12)
    assert held_at(12, [15, 16], Gap(9, 0.0), 200.0) == Held(cut=0, gap=Gap(12, 200.0))


async def _produce(
    bootstrap: str, topic: str, i: int, stop: asyncio.Event, acked: set[bytes]
) -> None:
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap, acks="all", enable_idempotence=False, linger_ms=2
    )
    await producer.start()
    pending: set[asyncio.Task[None]] = set()

    async def one(value: bytes) -> None:
        await (await producer.send(topic, value, partition=0))
        acked.add(value)

    try:
        for n in range(10**9):
            if stop.is_set():
                break
            task = asyncio.create_task(one(f"p{i}-{n}".encode()))
            pending.add(task)
            task.add_done_callback(pending.discard)
            await asyncio.sleep(0.001 if len(pending) > 50 else 0)
        await asyncio.gather(*pending)
    finally:
        await producer.stop()


@pytest.mark.slow
async def test_records_written_concurrently_by_producers_are_all_read(
    broker: EmbeddedBroker, topic_name: str
) -> None:
    """Four producers write one partition as fast as they can while a consumer reads it through
    ``GuardedFetch``: every acknowledged record is read, in offset order, even where the broker
    showed a gap (a later batch readable before an earlier one) that a plain fetch would have
    moved past. Whether the broker races in the time given varies by machine; the gaps held are
    printed (``-s``) so a run shows whether the guard was exercised."""
    await create_topics(broker.bootstrap, (topic_name, 1))
    tp = TopicPartition(topic_name, 0)
    consumer = AIOKafkaConsumer(
        bootstrap_servers=broker.bootstrap, enable_auto_commit=False, auto_offset_reset="earliest"
    )
    await consumer.start()
    consumer.assign([tp])
    fetch = GuardedFetch()
    acked: set[bytes] = set()
    read: list[int] = []
    values: set[bytes] = set()
    stop = asyncio.Event()
    producers = [
        asyncio.create_task(_produce(broker.bootstrap, topic_name, i, stop, acked))
        for i in range(PRODUCERS)
    ]
    try:
        deadline = time.monotonic() + RACE_DEADLINE_S
        quiet_since: float | None = None
        while True:
            batch, bad = await fetch.fetch(consumer, 200, 10_000)
            assert not bad
            for record in batch.get(tp, []):
                read.append(record.offset)
                values.add(record.value or b"")
            if not stop.is_set() and (fetch.gaps_held or time.monotonic() > deadline):
                stop.set()
                await asyncio.gather(*producers)
            if stop.is_set():  # read on until the partition is quiet
                if batch:
                    quiet_since = None
                elif quiet_since is None:
                    quiet_since = time.monotonic()
                elif time.monotonic() - quiet_since > 2 * GAP_CONFIRM_S:
                    break
    finally:
        stop.set()
        await asyncio.gather(*producers, return_exceptions=True)
        await consumer.stop()
    print(f"{fetch.gaps_held} gap(s) held in {len(acked):,} acknowledged records")
    assert acked, "the producers wrote nothing"
    assert len(acked - values) == 0, f"{len(acked - values)} acknowledged records never read"
    assert read == list(range(len(read))), "offsets read out of order or with a hole"
    assert fetch.gaps_passed == 0  # every gap was filled, none taken as control records
