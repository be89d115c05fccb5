"""The firehose: a batched aiokafka consumer that writes agent events into Postgres.

Commit contract (arroyo-style): for each batch returned by ``getmany`` the loop
1. decodes every record (invalid -> dead letter with reason, never raises),
2. publishes the dead letters to the DLQ topic and waits for the broker's acks
   (:mod:`monitor.ingest.dlq_publish`: per record, a retry re-sends only the unacknowledged),
3. writes events + roll-ups + dead letters in ONE Postgres transaction (``EventWriter``),
4. only then commits the batch's offsets (last offset + 1 per partition).
A store error is classified (:mod:`monitor.store.store_errors`): a transient one is retried
with exponential backoff and jitter while the assigned partitions are paused (backpressure:
nothing more is fetched); any other one means the batch holds poison: the loop bisects it,
writes every event the store takes and dead-letters each event it refuses alone (reason
``store_rejected``, the database's message as detail), so no single event stops ingest. The
batch is never acknowledged before it is written. A crash at any point re-delivers at most the
uncommitted batch, which the writer absorbs idempotently. On a rebalance, revocation waits for
the batch in flight to commit.

Pipelining: steps 2-4 of batch k run in a task while the loop fetches and decodes batch k+1, so
the worker's CPU (decode) and Postgres' (the insert, roll-ups, items and bins) overlap. At most
one batch is being written: batch k+1's write starts only after batch k committed its offsets,
so offsets are committed in order and only after their batch is durably written. The loop
decodes k+1 only once k's rows reached Postgres (its COPY, which needs this process's CPU too,
is done), in chunks of ``DECODE_CHUNK`` records with a yield between chunks, so that k's
completion and commit are not held up; a decoded batch whose partitions were revoked meanwhile
is dropped, like the consumer's own prefetched records. At most two batches are held in memory;
while a write is retried (partitions paused), the next decoded batch waits.

An offset commit is bounded by ``commit_timeout_s`` (the Kafka client's own retry lines are cut
to one per minute per template, :mod:`monitor.ingest.log_dedupe`); a failed one is logged once
per run of failures (the batch is stored; it is re-delivered and absorbed if the worker
restarts) and counted for ``/health``. When the broker lost a partition's data (restarted
without persistent storage, topic recreated), the loop logs it once and resumes that partition
from its earliest offset (``auto_offset_reset=earliest``; :mod:`monitor.ingest.offsets` says
how the loss is told from a stale reported log end).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import TypeAlias

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, ConsumerRecord, TopicPartition
from aiokafka.errors import KafkaError

from monitor.core.clock import Clock, SystemClock
from monitor.ingest.config import IngestConfig as IngestConfig
from monitor.ingest.decoding import chunks, decode_records
from monitor.ingest.dlq_publish import DlqBatch
from monitor.ingest.dlq_publish import retriable as kafka_retriable
from monitor.ingest.health import IngestHealth
from monitor.ingest.log_dedupe import dedupe_kafka_client_logs
from monitor.ingest.offsets import OffsetTracking
from monitor.ingest.paused_retry import PausedRetry, _Stopping
from monitor.ingest.poison import write_isolating
from monitor.ingest.rebalance import WaitForBatch
from monitor.ingest.rows import PARTITION, DeadLetter, EventRow
from monitor.ingest.writer import EventWriter, WriteResult
from monitor.store.store_errors import is_transient
from monitor.worker.ops_metrics import OpsMetrics

log = logging.getLogger("monitor.ingest")

Record: TypeAlias = ConsumerRecord[bytes, bytes]


KAFKA_ERRORS: tuple[type[BaseException], ...] = (KafkaError, asyncio.TimeoutError)


DECODE_CHUNK = 100  # records decoded between two yields to the event loop


@dataclass
class _Decoded:
    """A fetched batch, decoded, waiting for (or in) its write."""

    batch: dict[TopicPartition, list[Record]]
    records: list[Record]
    rows: list[EventRow]
    dead: list[DeadLetter]
    seconds: float  # decode time
    copied: asyncio.Event = field(default_factory=asyncio.Event)

    def keep(self, assigned: set[TopicPartition]) -> None:
        """Drop the records of partitions not in ``assigned`` (revoked since the fetch)."""
        if set(self.batch) <= assigned:
            return
        self.batch = {tp: recs for tp, recs in self.batch.items() if tp in assigned}
        kept = {tp.partition for tp in self.batch}
        self.records = [r for r in self.records if r.partition in kept]
        self.rows = [r for r in self.rows if r[PARTITION] in kept]
        self.dead = [d for d in self.dead if d.partition in kept]


class IngestLoop(OffsetTracking, PausedRetry):
    """Consumes ``config.topic`` in batches until ``stop()``; see the module contract."""

    def __init__(
        self,
        config: IngestConfig,
        writer: EventWriter,
        metrics: OpsMetrics | None = None,
        clock: Clock | None = None,
    ) -> None:
        self.config = config
        self.writer = writer
        self.metrics = metrics or OpsMetrics()
        self.clock = clock or SystemClock()
        self.health = IngestHealth(self.clock.monotonic, config.stall_after_s)
        self.metrics.since_write.set_function(self.health.seconds_since_write)
        self._stopping = asyncio.Event()
        self._lock = asyncio.Lock()
        self._consumer: AIOKafkaConsumer | None = None
        self._producer: AIOKafkaProducer | None = None
        self._positions: dict[TopicPartition, int] = {}
        self._lost: set[TopicPartition] = set()
        self._arrived: dict[TopicPartition, float] = {}
        self._sought: dict[TopicPartition, int] = {}
        self.ready = asyncio.Event()

    async def run(self) -> None:
        cfg = self.config
        self._producer = AIOKafkaProducer(
            bootstrap_servers=cfg.bootstrap,
            acks="all",
            enable_idempotence=cfg.idempotent_producer,
            linger_ms=5,
        )
        self._consumer = AIOKafkaConsumer(
            bootstrap_servers=cfg.bootstrap,
            group_id=cfg.group_id,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            max_poll_records=cfg.batch_max_events,
            fetch_max_bytes=64 * 1024 * 1024,
            max_partition_fetch_bytes=16 * 1024 * 1024,
        )
        dedupe_kafka_client_logs(self.clock.monotonic)
        await self._producer.start()
        pending: asyncio.Task[None] | None = None  # the batch being written and committed
        try:
            await self._consumer.start()
            self._consumer.subscribe([cfg.topic], listener=WaitForBatch(self._lock))
            self.ready.set()
            self.health.ready = True
            while not self._stopping.is_set():
                batch = await self._consumer.getmany(
                    timeout_ms=cfg.batch_max_wait_ms, max_records=cfg.batch_max_events
                )
                if batch:
                    self._saw_records(batch, self.clock.monotonic())
                    decoded = await self._decode(batch)
                    if pending is not None:
                        await pending  # batches are written and committed one after the other
                    pending = asyncio.create_task(self._write_and_commit(decoded))
                    await self._until_copied(decoded, pending)
                await self._update_lag()
                if pending is not None and pending.done():
                    pending.result()  # a write that failed ends the loop, as unpipelined
                if not batch and (pending is None or pending.done()):
                    self.health.idle()
            if pending is not None:
                await pending
        finally:
            if pending is not None and not pending.done():
                pending.cancel()  # an error elsewhere: the batch stays uncommitted
                with contextlib.suppress(BaseException):
                    await pending
            self.ready.clear()  # /health must not report a loop that has ended
            self.health.ready = False
            await self._consumer.stop()
            await self._producer.stop()

    async def stop(self) -> None:
        """Ask the loop to finish; a batch not yet written is left uncommitted (re-delivered)."""
        self._stopping.set()

    async def _decode(self, batch: dict[TopicPartition, list[Record]]) -> _Decoded:
        """Decode ``batch`` in chunks of ``DECODE_CHUNK`` records, yielding to the event loop
        between chunks so that the write in flight completes and commits without waiting."""
        started = self.clock.monotonic()
        records = [rec for recs in batch.values() for rec in recs]
        self.metrics.events_in.inc(len(records))
        skew = self.config.max_future_skew_s
        now, max_skew = self.clock.now(), None if skew is None else timedelta(seconds=skew)
        rows: list[EventRow] = []
        dead: list[DeadLetter] = []
        for chunk in chunks(records, DECODE_CHUNK):
            chunk_rows, chunk_dead = decode_records(chunk, now, max_skew)
            rows += chunk_rows
            dead += chunk_dead
            await asyncio.sleep(0)
        return _Decoded(batch, records, rows, dead, self.clock.monotonic() - started)

    async def _until_copied(self, decoded: _Decoded, pending: asyncio.Task[None]) -> None:
        """Return once ``decoded``'s rows are in Postgres (its COPY finished; the rest of its
        write is the server's work) or its write ended, whichever comes first."""
        copied = asyncio.create_task(decoded.copied.wait())
        try:
            await asyncio.wait((copied, pending), return_when=asyncio.FIRST_COMPLETED)
        finally:
            copied.cancel()

    async def _write_and_commit(self, decoded: _Decoded) -> None:
        """Publish the dead letters, write the batch, then commit its offsets (module contract).

        Holds the rebalance lock throughout. Records of partitions revoked since they were
        fetched are dropped, as the consumer drops its own prefetched records: their new owner
        reads them from the last committed offset."""
        async with self._lock:
            started = self.clock.monotonic()
            assert self._consumer is not None
            decoded.keep(self._consumer.assignment())
            batch, rows, dead = decoded.batch, decoded.rows, decoded.dead
            if not batch:  # every partition of the batch was revoked
                decoded.copied.set()
                return
            partitions = list(batch)
            try:
                if dead:
                    await self._publish(dead, partitions)
                if rows or dead:
                    result = await self._store(rows, dead, decoded.records, partitions,
                                               decoded.copied.set)  # fmt: skip
                else:
                    result = WriteResult(0, 0, 0, 0)
            except _Stopping:
                return  # leave the batch uncommitted: it is re-delivered after a restart
            finally:
                decoded.copied.set()
            self.health.wrote()
            offsets = {tp: recs[-1].offset + 1 for tp, recs in batch.items()}
            for tp, recs in batch.items():
                self._delivered_below(tp, recs[0].offset)  # from a topic the broker recreated
            await self._commit(offsets)
            self._positions.update(offsets)
            self.metrics.events_written.inc(result.inserted)
            self.metrics.events_duplicate.inc(result.duplicates)
            self.metrics.events_conflicting.inc(result.conflicting)
            for d in dead:
                self.metrics.events_invalid.labels(d.reason).inc()
            self.metrics.batches.inc()
            self.metrics.batch_latency.observe(decoded.seconds + self.clock.monotonic() - started)

    async def _publish(self, dead: Sequence[DeadLetter], partitions: list[TopicPartition]) -> None:
        pending = DlqBatch(dead, self.config.dlq_topic)
        assert self._producer is not None
        producer = self._producer
        await self._retry(
            lambda: pending.publish(producer),
            "DLQ publish",
            kafka_retriable,
            self.metrics.dlq_errors,
            partitions,
        )

    async def _store(
        self,
        rows: list[EventRow],
        dead: list[DeadLetter],
        records: list[Record],
        partitions: list[TopicPartition],
        copied: Callable[[], None] | None = None,
    ) -> WriteResult:
        """Write the batch; on a non-transient error, isolate the poison (module contract).
        ``copied`` is called when the rows reached Postgres (``EventWriter.write``)."""

        async def publish(rejected: DeadLetter) -> None:
            await self._publish([rejected], partitions)
            self.metrics.events_invalid.labels(rejected.reason).inc()

        return await write_isolating(
            rows,
            dead,
            records,
            self.config.topic,
            lambda r, d: self._write(r, d, partitions, copied),
            publish,
            _Stopping,
        )

    async def _write(
        self,
        rows: list[EventRow],
        dead: Sequence[DeadLetter],
        partitions: list[TopicPartition],
        copied: Callable[[], None] | None = None,
    ) -> WriteResult:
        topic = self.config.topic
        return await self._retry(
            lambda: self.writer.write(rows, dead, source=topic, copied=copied),
            "store write",
            is_transient,
            self.metrics.store_errors,
            partitions,
        )
