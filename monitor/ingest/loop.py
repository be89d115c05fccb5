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

An offset commit is bounded by ``commit_timeout_s`` (the Kafka client's own retry lines are cut
to one per minute per template, :mod:`monitor.ingest.log_dedupe`); a failed one is logged once
per run of failures (the batch is stored; it is re-delivered and absorbed if the worker
restarts) and counted for ``/health``. When a partition's log end falls below the loop's
position (the broker lost its data: restarted without persistent storage, topic recreated), the
loop logs it once and resumes that partition from its earliest offset
(``auto_offset_reset=earliest``).
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Awaitable, Callable, Iterable, Sequence
from datetime import datetime, timedelta
from typing import TypeAlias, TypeVar

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, ConsumerRecord, TopicPartition
from aiokafka.abc import ConsumerRebalanceListener
from aiokafka.errors import KafkaError
from prometheus_client import Counter

from monitor.contract.events import decode_event
from monitor.core.clock import Clock, SystemClock
from monitor.core.errors import InvalidEvent
from monitor.ingest.config import IngestConfig as IngestConfig
from monitor.ingest.dlq_publish import DlqBatch
from monitor.ingest.dlq_publish import retriable as kafka_retriable
from monitor.ingest.health import IngestHealth
from monitor.ingest.log_dedupe import dedupe_kafka_client_logs
from monitor.ingest.offsets import OffsetTracking
from monitor.ingest.poison import write_isolating
from monitor.ingest.rows import DeadLetter, EventRow, event_row
from monitor.ingest.writer import EventWriter, WriteResult
from monitor.store.store_errors import describe, is_transient
from monitor.worker.ops_metrics import OpsMetrics

log = logging.getLogger("monitor.ingest")

Record: TypeAlias = ConsumerRecord[bytes, bytes]
T = TypeVar("T")


class _Stopping(Exception):
    """``stop()`` was called while an operation was being retried."""


KAFKA_ERRORS: tuple[type[BaseException], ...] = (KafkaError, asyncio.TimeoutError)


def decode_records(
    records: Iterable[ConsumerRecord[bytes, bytes]],
    now: datetime | None = None,
    max_future_skew: timedelta | None = None,
) -> tuple[list[EventRow], list[DeadLetter]]:
    """Split Kafka records into ``events`` rows and dead letters (pure, never raises).

    With ``now`` and ``max_future_skew``, events too far in the future are dead letters too."""
    rows: list[EventRow] = []
    dead: list[DeadLetter] = []
    for rec in records:
        raw = rec.value if rec.value is not None else b""
        try:
            event = decode_event(raw, now=now, max_future_skew=max_future_skew)
        except InvalidEvent as exc:
            dead.append(
                DeadLetter(
                    rec.topic,
                    rec.partition,
                    rec.offset,
                    exc.reason,
                    exc.field,
                    exc.detail,
                    raw,
                    rec.key,
                )
            )
            continue
        rows.append(event_row(event, rec.partition, rec.offset))
    return rows, dead


class _WaitForBatch(ConsumerRebalanceListener):  # type: ignore[misc]
    def __init__(self, lock: asyncio.Lock) -> None:
        self._lock = lock

    async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        async with self._lock:  # the batch in flight commits before partitions move
            pass

    async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        log.info("assigned partitions: %s", sorted(tp.partition for tp in assigned))


class IngestLoop(OffsetTracking):
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
        try:
            await self._consumer.start()
            self._consumer.subscribe([cfg.topic], listener=_WaitForBatch(self._lock))
            self.ready.set()
            self.health.ready = True
            while not self._stopping.is_set():
                batch = await self._consumer.getmany(
                    timeout_ms=cfg.batch_max_wait_ms, max_records=cfg.batch_max_events
                )
                if batch:
                    async with self._lock:
                        await self._handle(batch)
                await self._update_lag()
                if not batch:
                    self.health.idle()
        finally:
            self.ready.clear()  # /health must not report a loop that has ended
            self.health.ready = False
            await self._consumer.stop()
            await self._producer.stop()

    async def stop(self) -> None:
        """Ask the loop to finish; a batch not yet written is left uncommitted (re-delivered)."""
        self._stopping.set()

    async def _handle(
        self, batch: dict[TopicPartition, list[ConsumerRecord[bytes, bytes]]]
    ) -> None:
        started = self.clock.monotonic()
        records = [rec for recs in batch.values() for rec in recs]
        self.metrics.events_in.inc(len(records))
        skew = self.config.max_future_skew_s
        rows, dead = decode_records(
            records, self.clock.now(), None if skew is None else timedelta(seconds=skew)
        )
        partitions = list(batch)
        try:
            if dead:
                await self._publish(dead, partitions)
            result = await self._store(rows, dead, records, partitions)
        except _Stopping:
            return  # leave the batch uncommitted: it is re-delivered after a restart
        self.health.wrote()
        offsets = {tp: recs[-1].offset + 1 for tp, recs in batch.items()}
        for tp in offsets:
            self._lost_data(tp)  # the batch may come from a topic the broker recreated
        await self._commit(offsets)
        self._positions.update(offsets)
        self.metrics.events_written.inc(result.inserted)
        self.metrics.events_duplicate.inc(result.duplicates)
        self.metrics.events_conflicting.inc(result.conflicting)
        for d in dead:
            self.metrics.events_invalid.labels(d.reason).inc()
        self.metrics.batches.inc()
        self.metrics.batch_latency.observe(self.clock.monotonic() - started)

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
    ) -> WriteResult:
        """Write the batch; on a non-transient error, isolate the poison (module contract)."""

        async def publish(rejected: DeadLetter) -> None:
            await self._publish([rejected], partitions)
            self.metrics.events_invalid.labels(rejected.reason).inc()

        return await write_isolating(
            rows,
            dead,
            records,
            self.config.topic,
            lambda r, d: self._write(r, d, partitions),
            publish,
            _Stopping,
        )

    async def _write(
        self, rows: list[EventRow], dead: Sequence[DeadLetter], partitions: list[TopicPartition]
    ) -> WriteResult:
        topic = self.config.topic
        return await self._retry(
            lambda: self.writer.write(rows, dead, source=topic),
            "store write",
            is_transient,
            self.metrics.store_errors,
            partitions,
        )

    async def _retry(
        self,
        op: Callable[[], Awaitable[T]],
        what: str,
        transient: Callable[[BaseException], bool],
        failures: Counter,
        partitions: list[TopicPartition],
    ) -> T:
        """Run ``op`` until it succeeds, pausing ``partitions`` while it fails transiently.

        An error ``transient`` does not accept propagates at once. Backoff is exponential with
        jitter, capped at ``retry_max_s``. Raises ``_Stopping`` when ``stop()`` is called
        meanwhile, so the caller leaves the batch uncommitted.
        """
        delay = self.config.retry_initial_s
        paused = False
        try:
            while True:
                try:
                    return await op()
                except Exception as exc:
                    if not transient(exc):
                        raise
                    failures.inc()
                    self.health.last_error = f"{what}: {describe(exc)}"[:300]
                    if not paused and self._consumer is not None:
                        self._consumer.pause(*partitions)
                        self.metrics.paused.set(1)
                        self.health.paused = paused = True
                    log.warning("%s failed (%s); retrying in %.1fs", what, exc, delay)
                    try:
                        pause_s = delay * random.uniform(0.5, 1.0)
                        await asyncio.wait_for(self._stopping.wait(), pause_s)
                        raise _Stopping from None
                    except TimeoutError:
                        pass
                    delay = min(delay * 2, self.config.retry_max_s)
        finally:
            if paused and self._consumer is not None:
                self._consumer.resume(*partitions)
                self.metrics.paused.set(0)
                self.health.paused = False
                self.health.last_error = ""
