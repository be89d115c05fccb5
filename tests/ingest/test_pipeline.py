"""The ingest loop decodes the next batch while the previous one is being written, and writes
up to ``writes_in_flight`` batches at once, and still commits every batch's offsets
only after its rows are stored, in batch order, and never past a batch that did not commit."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field

import asyncpg
import pytest
from aiokafka import AIOKafkaConsumer, ConsumerRecord, TopicPartition

from monitor.ingest.decoded import Decoded
from monitor.ingest.decoding import decode_records
from monitor.ingest.loop import IngestConfig, IngestLoop
from monitor.ingest.rows import OFFSET, DeadLetter, EventRow
from monitor.ingest.writer import EventWriter, WriteResult
from monitor.store.engine import libpq_url
from tests.factories import event_dict
from tests.ingest.test_ingest_loop import produce, produce_keyed, wait_count
from tests.servers.worker import create_topic

N, BATCH, PARTITIONS = 2000, 250, 4
HOLD_S = 0.15  # the writer keeps each write open this long after its transaction committed


@dataclass
class Timeline:
    """(what, monotonic start, monotonic end) of every decode and write, in start order."""

    spans: list[tuple[str, float, float]] = field(default_factory=list)


class HoldingWriter(EventWriter):
    """The real writer, holding each write open a little after it committed (a slow server),
    and recording when each write ran."""

    def __init__(self, url: str, timeline: Timeline) -> None:
        super().__init__(url)
        self.timeline = timeline

    async def write(
        self,
        rows: Sequence[EventRow],
        dead: Sequence[DeadLetter] = (),
        source: str = "kafka",
        copied: Callable[[], None] | None = None,
    ) -> WriteResult:
        start = time.monotonic()
        result = await super().write(rows, dead, source, copied)
        await asyncio.sleep(HOLD_S)
        self.timeline.spans.append(("write", start, time.monotonic()))
        return result


class RecordingLoop(IngestLoop):
    """The real loop; records its decodes and checks every commit against the store."""

    timeline: Timeline
    dsn: str
    commits: list[dict[TopicPartition, int]]
    violations: list[str]

    async def _decode(self, batch):  # type: ignore[no-untyped-def]
        start = time.monotonic()
        decoded = await super()._decode(batch)
        self.timeline.spans.append(("decode", start, time.monotonic()))
        return decoded

    async def _commit(self, offsets: dict[TopicPartition, int]) -> None:
        conn = await asyncpg.connect(self.dsn)  # another session: sees committed rows only
        try:
            for tp, offset in offsets.items():
                stored = await conn.fetchval(
                    "SELECT max(kafka_offset) FROM events WHERE kafka_partition = $1", tp.partition
                )
                if stored is None or stored < offset - 1:
                    self.violations.append(f"{tp.partition}@{offset} committed, {stored} stored")
        finally:
            await conn.close()
        self.commits.append(dict(offsets))
        await super()._commit(offsets)


def latest(commits: list[dict[TopicPartition, int]]) -> dict[TopicPartition, int]:
    """The last committed offset per partition."""
    out: dict[TopicPartition, int] = {}
    for commit in commits:
        out.update(commit)
    return out


@pytest.mark.parametrize("in_flight", [1, 2])
async def test_decode_overlaps_the_write_and_commits_stay_ordered(
    broker, topic_name: str, database_url: str, in_flight: int
) -> None:
    await create_topic(broker.bootstrap, topic_name, partitions=PARTITIONS)
    events = [event_dict(f"e-{i}", f"c-{i % 50}", at=i, turn=i // 50) for i in range(N)]
    await produce_keyed(broker.bootstrap, topic_name, events)
    timeline = Timeline()
    writer = HoldingWriter(database_url, timeline)
    config = IngestConfig(
        broker.bootstrap,
        topic_name,
        f"{topic_name}.dlq",
        f"g-{topic_name}",
        batch_max_events=BATCH,
        idempotent_producer=False,
        writes_in_flight=in_flight,
    )
    loop = RecordingLoop(config, writer)
    loop.timeline, loop.dsn = timeline, libpq_url(database_url)
    loop.commits, loop.violations = [], []
    task = asyncio.create_task(loop.run())
    try:
        assert await wait_count(database_url, "SELECT count(*) FROM events", N) == N
        deadline = time.monotonic() + 15
        while sum(latest(loop.commits).values()) < N and time.monotonic() < deadline:
            await asyncio.sleep(0.1)  # the last batch commits
    finally:
        await loop.stop()
        await task
        await writer.close()

    assert loop.violations == []  # no offset committed before its rows were stored
    last: dict[TopicPartition, int] = {}
    for commit in loop.commits:  # offsets only move forward, partition by partition
        for tp, offset in commit.items():
            assert offset > last.get(tp, -1)
            last[tp] = offset
    assert sum(last.values()) == N  # every record's offset is committed (offsets start at 0)
    writes = [(s, e) for what, s, e in timeline.spans if what == "write"]
    decodes = [(s, e) for what, s, e in timeline.spans if what == "decode"]
    assert len(writes) >= N // BATCH and len(decodes) >= N // BATCH
    # the pipeline: some batch was decoded while the previous write was still in progress
    overlapping = [d for d in decodes if any(ws < d[0] and d[1] < we for ws, we in writes)]
    assert len(overlapping) >= 3
    # writes overlap each other up to in_flight at once (each is held open HOLD_S after it
    # committed, so with two in flight the next one starts meanwhile)
    at_once = [sum(ws <= s < we for ws, we in writes) for s, _ in writes]
    assert max(at_once) == in_flight
    if in_flight == 2:
        assert sum(n == 2 for n in at_once) >= 3


def test_a_decoded_batch_keeps_only_the_partitions_still_assigned() -> None:
    """Records of partitions revoked between the fetch and the write are dropped (their new
    owner reads them again from the last committed offset); the others are kept, in order."""
    good = [json.dumps(event_dict(f"k-{i}", "c", at=i)).encode() for i in range(4)]
    values = [*good, b"{nope"]
    parts = [0, 1, 0, 1, 1]
    records = [
        ConsumerRecord("t", p, i, 0, 0, None, v, None, 0, len(v), [])
        for i, (p, v) in enumerate(zip(parts, values, strict=True))
    ]
    tp0, tp1 = TopicPartition("t", 0), TopicPartition("t", 1)
    batch = {
        tp0: [r for r in records if r.partition == 0],
        tp1: [r for r in records if r.partition == 1],
    }
    rows, dead = decode_records(records)
    decoded = Decoded(batch, records, rows, dead, 0.0)
    decoded.keep({tp0, tp1})
    assert (len(decoded.rows), len(decoded.dead)) == (4, 1)
    decoded.keep({tp0})
    assert list(decoded.batch) == [tp0]
    assert [r.offset for r in decoded.records] == [0, 2]
    assert [row[OFFSET] for row in decoded.rows] == [0, 2]  # in order
    assert decoded.dead == []


class StallingWriter(EventWriter):
    """The real writer whose first batch reaches Postgres and then fails like a lost server,
    at every attempt; every other batch is written."""

    def __init__(self, url: str) -> None:
        super().__init__(url)
        self.stalled: Sequence[EventRow] | None = None
        self.stored = 0
        self.second_stored = asyncio.Event()

    async def write(
        self,
        rows: Sequence[EventRow],
        dead: Sequence[DeadLetter] = (),
        source: str = "kafka",
        copied: Callable[[], None] | None = None,
    ) -> WriteResult:
        if self.stalled is None:
            self.stalled = rows  # the loop retries with the same list
        if rows is self.stalled:
            if copied is not None:
                copied()  # the next batch may start its write
            await asyncio.sleep(1.0)  # batch 2 is fetched, decoded and written meanwhile
            raise ConnectionResetError("server closed the connection")
        result = await super().write(rows, dead, source, copied)
        self.stored += result.inserted
        self.second_stored.set()
        return result


async def test_no_offset_is_committed_past_a_batch_that_did_not_commit(
    broker, topic_name: str, database_url: str
) -> None:
    """Batch 1 reaches Postgres, then fails transiently at every attempt; batch 2, in flight
    beside it, is stored, but when the loop stops (batch 1 still unwritten) batch 2's offsets
    are not committed: committing them would skip batch 1's records for good."""
    await create_topic(broker.bootstrap, topic_name, partitions=1)
    events = [event_dict(f"s-{i}", f"c-{i % 5}", at=i) for i in range(2 * BATCH)]
    await produce(broker.bootstrap, topic_name, [(b"k", json.dumps(e).encode()) for e in events])
    writer = StallingWriter(database_url)
    config = IngestConfig(
        broker.bootstrap,
        topic_name,
        f"{topic_name}.dlq",
        f"g-{topic_name}",
        batch_max_events=BATCH,
        idempotent_producer=False,
        retry_initial_s=0.05,
        retry_max_s=0.1,
    )
    loop = RecordingLoop(config, writer)
    loop.timeline, loop.dsn = Timeline(), libpq_url(database_url)
    loop.commits, loop.violations = [], []
    task = asyncio.create_task(loop.run())
    try:
        await asyncio.wait_for(writer.second_stored.wait(), 30)
        await asyncio.sleep(1.5)  # batch 2 is stored; batch 1 keeps failing
        assert loop.health.paused
    finally:
        await loop.stop()
        await task
        await writer.close()
    assert writer.stored > 0
    assert loop.commits == []  # batch 2 is stored, its offsets are not committed
    count = await wait_count(database_url, "SELECT count(*) FROM events", writer.stored)
    assert count == writer.stored


def decoded_batch(tp: TopicPartition, first: int, n: int = 3) -> Decoded:
    """``n`` valid events at offsets ``first``.. of ``tp``, decoded as the loop decodes them."""
    values = [
        json.dumps(event_dict(f"r-{tp.partition}-{i}", "c", at=i)).encode()
        for i in range(first, first + n)
    ]
    records = [
        ConsumerRecord(tp.topic, tp.partition, first + i, 0, 0, None, v, None, 0, len(v), [])
        for i, v in enumerate(values)
    ]
    rows, dead = decode_records(records)
    return Decoded({tp: records}, records, rows, dead, 0.0)


@contextlib.asynccontextmanager
async def loop_owning(
    broker, topic_name: str, database_url: str, owned: TopicPartition
) -> AsyncIterator[tuple[IngestLoop, AIOKafkaConsumer]]:
    """An ``IngestLoop`` on a 2-partition topic whose real consumer is assigned ``owned`` only
    (the other partition counts as lost); the consumer and the writer are closed after."""
    await create_topic(broker.bootstrap, topic_name, partitions=2)
    config = IngestConfig(
        broker.bootstrap,
        topic_name,
        f"{topic_name}.dlq",
        f"g-{topic_name}",
        idempotent_producer=False,
    )
    writer = EventWriter(database_url)
    loop = IngestLoop(config, writer)
    consumer = AIOKafkaConsumer(
        bootstrap_servers=broker.bootstrap, group_id=config.group_id, enable_auto_commit=False
    )
    await consumer.start()
    try:
        consumer.assign([owned])
        loop._consumer = consumer
        yield loop, consumer
    finally:
        await consumer.stop()
        await writer.close()


async def test_a_batch_whose_partitions_were_all_revoked_does_not_hold_back_later_commits(
    broker, topic_name: str, database_url: str
) -> None:
    """Batch k was fetched from a partition the worker lost before k's write started: k writes
    and commits nothing (the new owner reads it), and batch k+1, of a partition still owned,
    is written and committed as usual; so is every batch after it."""
    tp0, tp1 = TopicPartition(topic_name, 0), TopicPartition(topic_name, 1)
    async with loop_owning(broker, topic_name, database_url, tp0) as (loop, consumer):
        revoked = asyncio.create_task(loop._write_and_commit(decoded_batch(tp1, 0)))
        kept = asyncio.create_task(loop._write_and_commit(decoded_batch(tp0, 0), revoked))
        after = asyncio.create_task(loop._write_and_commit(decoded_batch(tp0, 3), kept))
        assert list(await asyncio.gather(revoked, kept, after)) == [True, True, True]
        assert await consumer.committed(tp0) == 6
        assert await consumer.committed(tp1) is None  # tp1 is no longer ours
    assert await wait_count(database_url, "SELECT count(*) FROM events", 6) == 6


async def test_the_next_batch_is_fetched_only_after_the_last_one_was_checked(
    broker, topic_name: str, database_url: str
) -> None:
    """While a revocation drains the batches in flight, a batch created meanwhile waits at the
    gate, and the loop does not fetch the next one (``_until_set(decoded.kept, ...)`` does not
    return) until that batch was checked against the assignment: at most one fetched batch waits
    through it."""
    tp0 = TopicPartition(topic_name, 0)
    release = asyncio.Event()
    async with loop_owning(broker, topic_name, database_url, tp0) as (loop, consumer):

        async def in_flight() -> None:
            async with loop._in_flight.batch():
                await release.wait()

        decoded = decoded_batch(tp0, 0)
        holder = asyncio.create_task(in_flight())
        await asyncio.sleep(0.01)
        drain = asyncio.create_task(loop._in_flight.drain())
        await asyncio.sleep(0.01)
        task = asyncio.create_task(loop._write_and_commit(decoded))
        waiting = asyncio.create_task(loop._until_set(decoded.kept, task))
        await asyncio.sleep(0.2)
        assert not waiting.done() and not decoded.kept.is_set()  # held behind the revocation
        release.set()
        await asyncio.wait_for(waiting, 10)
        assert decoded.kept.is_set() and drain.done()
        assert await task is True
        await holder
        assert await consumer.committed(tp0) == 3
