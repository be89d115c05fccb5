"""The firehose: a batched aiokafka consumer that writes agent events into Postgres.

Commit contract (arroyo-style): for each batch returned by ``getmany`` the loop
1. decodes every record (invalid -> dead letter with reason, never raises),
2. publishes the dead letters to the DLQ topic and waits for the broker's acks,
3. writes events + roll-ups + dead letters in ONE Postgres transaction (``EventWriter``),
4. only then commits the batch's offsets (last offset + 1 per partition).
A failing store is retried with exponential backoff and jitter while the assigned partitions
are paused (backpressure: nothing more is fetched); the batch is never acknowledged before it
is written. A crash at any point re-delivers at most the uncommitted batch, which the writer
absorbs idempotently. On a rebalance, revocation waits for the batch in flight to commit.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TypeVar

import asyncpg
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, ConsumerRecord, TopicPartition
from aiokafka.abc import ConsumerRebalanceListener
from aiokafka.errors import CommitFailedError, KafkaError
from prometheus_client import Counter

from monitor.clock import Clock, SystemClock
from monitor.errors import InvalidEvent
from monitor.events import decode_event
from monitor.ops_metrics import OpsMetrics
from monitor.store.event_writer import EventWriter
from monitor.store.rows import DeadLetter, EventRow, event_row

log = logging.getLogger("monitor.ingest")

Record = ConsumerRecord[bytes, bytes]
T = TypeVar("T")


class _Stopping(Exception):
    """``stop()`` was called while an operation was being retried."""


KAFKA_ERRORS: tuple[type[BaseException], ...] = (KafkaError, asyncio.TimeoutError)
STORE_ERRORS: tuple[type[BaseException], ...] = (
    OSError,
    asyncpg.PostgresError,
    asyncpg.InterfaceError,
    asyncio.TimeoutError,
)


def decode_records(
    records: Iterable[ConsumerRecord[bytes, bytes]],
) -> tuple[list[EventRow], list[DeadLetter]]:
    """Split Kafka records into ``events`` rows and dead letters (pure, never raises)."""
    rows: list[EventRow] = []
    dead: list[DeadLetter] = []
    for rec in records:
        raw = rec.value if rec.value is not None else b""
        try:
            event = decode_event(raw)
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


@dataclass
class IngestConfig:
    bootstrap: str
    topic: str = "agent-events"
    dlq_topic: str = "agent-events.dlq"
    group_id: str = "monitor-ingest"
    batch_max_events: int = 5000
    batch_max_wait_ms: int = 200
    retry_initial_s: float = 0.5
    retry_max_s: float = 10.0
    idempotent_producer: bool = True


class _WaitForBatch(ConsumerRebalanceListener):  # type: ignore[misc]
    def __init__(self, lock: asyncio.Lock) -> None:
        self._lock = lock

    async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        async with self._lock:  # the batch in flight commits before partitions move
            pass

    async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        log.info("assigned partitions: %s", sorted(tp.partition for tp in assigned))


class IngestLoop:
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
        self._stopping = asyncio.Event()
        self._lock = asyncio.Lock()
        self._consumer: AIOKafkaConsumer | None = None
        self._producer: AIOKafkaProducer | None = None
        self._positions: dict[TopicPartition, int] = {}
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
        await self._producer.start()
        try:
            await self._consumer.start()
            self._consumer.subscribe([cfg.topic], listener=_WaitForBatch(self._lock))
            self.ready.set()
            while not self._stopping.is_set():
                batch = await self._consumer.getmany(
                    timeout_ms=cfg.batch_max_wait_ms, max_records=cfg.batch_max_events
                )
                if batch:
                    async with self._lock:
                        await self._handle(batch)
                self._update_lag()
        finally:
            self.ready.clear()  # /health must not report a loop that has ended
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
        rows, dead = decode_records(records)
        partitions = list(batch)
        try:
            if dead:
                await self._retry(
                    lambda: self._publish_dead(dead),
                    "DLQ publish",
                    KAFKA_ERRORS,
                    self.metrics.dlq_errors,
                    partitions,
                )
            result = await self._retry(
                lambda: self.writer.write(rows, dead),
                "store write",
                STORE_ERRORS,
                self.metrics.store_errors,
                partitions,
            )
        except _Stopping:
            return  # leave the batch uncommitted: it is re-delivered after a restart
        offsets = {tp: recs[-1].offset + 1 for tp, recs in batch.items()}
        try:
            assert self._consumer is not None
            await self._consumer.commit(offsets)
        except CommitFailedError:
            # the group rebalanced while we wrote; the new owner re-reads the batch and the
            # writer absorbs it idempotently
            log.warning("offset commit failed after a rebalance; batch will be re-delivered")
        self._positions.update(offsets)
        self.metrics.events_written.inc(result.inserted)
        self.metrics.events_duplicate.inc(result.duplicates)
        for d in dead:
            self.metrics.events_invalid.labels(d.reason).inc()
        self.metrics.batches.inc()
        self.metrics.batch_latency.observe(self.clock.monotonic() - started)

    async def _publish_dead(self, dead: Sequence[DeadLetter]) -> None:
        assert self._producer is not None
        futures = [
            await self._producer.send(
                self.config.dlq_topic, value=d.raw, key=d.key, headers=d.headers()
            )
            for d in dead
        ]
        await asyncio.gather(*futures)

    async def _retry(
        self,
        op: Callable[[], Awaitable[T]],
        what: str,
        errors: tuple[type[BaseException], ...],
        failures: Counter,
        partitions: list[TopicPartition],
    ) -> T:
        """Run ``op`` until it succeeds, pausing ``partitions`` while it fails.

        Backoff is exponential with jitter, capped at ``retry_max_s``. Raises ``_Stopping`` when
        ``stop()`` is called meanwhile, so the caller leaves the batch uncommitted.
        """
        delay = self.config.retry_initial_s
        paused = False
        try:
            while True:
                try:
                    return await op()
                except errors as exc:
                    failures.inc()
                    if not paused and self._consumer is not None:
                        self._consumer.pause(*partitions)
                        self.metrics.paused.set(1)
                        paused = True
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

    def _update_lag(self) -> None:
        """Consumer lag per assigned partition: high watermark minus next offset to process."""
        consumer = self._consumer
        if consumer is None:
            return
        for tp in consumer.assignment():
            high = consumer.highwater(tp)
            pos = self._positions.get(tp)
            if high is not None and pos is not None:
                self.metrics.consumer_lag.labels(str(tp.partition)).set(max(0, high - pos))
