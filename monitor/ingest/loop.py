"""The firehose: a batched aiokafka consumer that writes agent events into Postgres.

Commit contract (arroyo-style): for each batch returned by ``getmany`` the loop
1. decodes every record (invalid -> dead letter with reason, never raises); a record batch
   the consumer cannot decode is one dead letter, its offsets committed past
   (:mod:`monitor.consume.guarded_fetch`),
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
uncommitted batches, which the writer absorbs idempotently. On a rebalance, revocation waits
for the batches in flight to commit (:mod:`monitor.ingest.rebalance`).

Pipelining: steps 2-4 of batch k run in a task while the loop fetches and decodes batch k+1, so
the worker's CPU (decode) and Postgres' (the insert, roll-ups, items and bins) overlap. Up to
``writes_in_flight`` batches (default 2) are written at once, each on its own connection: batch
k+1's write starts as soon as it is decoded, so its COPY and id claim run while k does its
roll-ups (two batches sharing a conversation still serialize on its lock, in the writer).
Offsets are committed in batch order all the same: k+1 commits only after k committed, and not
at all if k did not (k's records would be skipped). Decoding runs in chunks (``DECODE_CHUNK``
records, :mod:`monitor.ingest.decoded`) with a yield between chunks, so the writes in flight
progress and commit meanwhile; a decoded batch whose partitions were revoked meanwhile is
dropped, like the consumer's own prefetched records, and the next batch is fetched only once the
last one was checked so (as its write starts: at once, or after a revocation drained). At most
``writes_in_flight`` + 1 batches are held in memory; while a write is retried (partitions
paused), no further batch starts.

Start-up and idle: the writer's connections are opened and its statements prepared before the
consumer starts (``EventWriter.warm``, best effort). With no write in flight, Postgres has
nothing to do until a batch is decoded and sent. So a batch fetched then holds at most
``batch_max_events // FIRST_BATCH_DIVISOR`` records, and the next one is fetched only once its
rows are sent to Postgres (its COPYs done, its write ended, or at most ``batch_max_wait_ms``
later, so that a write retried through an outage does not hold the loop): Postgres starts after
a fraction of a batch's decode, on a COPY not slowed by decoding the next batch. With a write in
flight, batches are full-size and decoded while the writes run, as above.

An offset commit is bounded by ``commit_timeout_s`` (the Kafka client's own retry lines are cut
to one per minute per template, :mod:`monitor.ingest.log_dedupe`); a failed one is logged once
per run of failures (the batch is stored; it is re-delivered and absorbed if the worker
restarts) and counted for ``/health``. When the broker lost a partition's data (restarted
without persistent storage, topic recreated), the loop logs it once and resumes that partition
from its earliest offset (``auto_offset_reset=earliest``; :mod:`monitor.ingest.offsets` says
how the loss is told from a stale reported log end).

Collaborators: :class:`IngestLoop` runs the steps above and holds one object per concern, each
owning its own state and receiving the consumer with each call:
:class:`~monitor.consume.guarded_fetch.GuardedFetch` (the fetch, and the offset after the last
record fetched per partition), :class:`~monitor.ingest.offsets.OffsetTracker` (the committed
positions, lag and broker data loss), :class:`~monitor.ingest.paused_retry.PausedRetry` (which
partitions are paused by failing retries) and :class:`~monitor.ingest.rebalance.InFlight` (the
batches a revocation waits for).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Sequence
from datetime import timedelta

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.errors import KafkaError

from monitor.consume.guarded_fetch import GuardedFetch
from monitor.core.clock import Clock, SystemClock
from monitor.ingest.config import IngestConfig as IngestConfig
from monitor.ingest.decoded import Decoded, Record
from monitor.ingest.dlq_publish import DlqBatch
from monitor.ingest.dlq_publish import retriable as kafka_retriable
from monitor.ingest.health import IngestHealth
from monitor.ingest.log_dedupe import dedupe_kafka_client_logs
from monitor.ingest.offsets import OffsetTracker
from monitor.ingest.paused_retry import PausedRetry, _Stopping
from monitor.ingest.poison import write_isolating
from monitor.ingest.rebalance import InFlight, WaitForBatch
from monitor.ingest.rows import DeadLetter, EventRow
from monitor.ingest.writer import EventWriter, WriteResult
from monitor.store.store_errors import is_transient
from monitor.telemetry.ops_metrics import OpsMetrics

log = logging.getLogger("monitor.ingest")

KAFKA_ERRORS: tuple[type[BaseException], ...] = (KafkaError, asyncio.TimeoutError)
FIRST_BATCH_DIVISOR = 8  # a batch fetched with no write in flight: this fraction of a full one


class IngestLoop:
    """Consumes ``config.topic`` in batches until ``stop()``; see the module contract.

    Owns the consumer and the DLQ producer (created by :meth:`run`), the stop request, the
    batches in flight (:class:`InFlight`) and its collaborators, each owning its own state:
    ``_fetcher`` (:class:`GuardedFetch`), ``_offsets`` (:class:`OffsetTracker`) and
    ``_retrier`` (:class:`PausedRetry`)."""

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
        self._in_flight = InFlight()
        self._consumer: AIOKafkaConsumer | None = None
        self._producer: AIOKafkaProducer | None = None
        self._fetcher = GuardedFetch(config.consumer_settings())
        self._offsets = OffsetTracker(
            self.metrics, self.health, config.commit_timeout_s, self._fetcher.from_start
        )
        self._retrier = PausedRetry(
            self.metrics, self.health, self._stopping, config.retry_initial_s, config.retry_max_s
        )
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
            bootstrap_servers=cfg.bootstrap, group_id=cfg.group_id, **cfg.consumer_settings()
        )
        dedupe_kafka_client_logs(self.clock.monotonic)
        await self._producer.start()
        pending: list[asyncio.Task[bool]] = []  # batches being written and committed, in order
        try:
            if (why := await self.writer.warm()) is not None:  # before the first batch
                log.warning("store connections not warmed up (%s); the first write opens them", why)
            await self._consumer.start()
            listener = WaitForBatch(self._in_flight, self._fetcher.forget)
            self._consumer.subscribe([cfg.topic], listener=listener)
            self.ready.set()
            self.health.ready = True
            while not self._stopping.is_set():
                first = not pending  # nothing in flight: start Postgres soon (module contract)
                most = max(1, cfg.batch_max_events // FIRST_BATCH_DIVISOR) if first else None
                batch, bad = await self._fetcher.fetch(
                    self._consumer, cfg.batch_max_wait_ms, most or cfg.batch_max_events
                )
                if batch or bad:
                    arrived = [*batch, *(b.tp for b in bad)]
                    self._offsets.saw_records(arrived, self.clock.monotonic())
                    decoded = await self._decode(batch)
                    decoded.skip(bad)
                    cap = max(1, cfg.writes_in_flight)
                    while pending and (len(pending) >= cap or self._retrier.paused):
                        await pending[0]  # a write that failed ends the loop
                        pending.pop(0)
                    previous = pending[-1] if pending else None
                    pending.append(asyncio.create_task(self._write_and_commit(decoded, previous)))
                    await self._until_set(decoded.kept, pending[-1])
                    if first:  # bounded: a write retried through an outage must not hold us
                        await self._until_set(decoded.copied, pending[-1], cfg.batch_max_wait_ms)
                await self._update_lag()
                while pending and pending[0].done():
                    pending.pop(0).result()  # a write that failed ends the loop
                if not batch and not pending:
                    self.health.idle()
            while pending:
                await pending[0]
                pending.pop(0)
        finally:
            for task in pending:  # an error elsewhere: these batches stay uncommitted
                task.cancel()
                with contextlib.suppress(BaseException):
                    await task
            self.ready.clear()  # /health must not report a loop that has ended
            self.health.ready = False
            await self._consumer.stop()
            await self._producer.stop()

    async def stop(self) -> None:
        """Ask the loop to finish; a batch not yet written is left uncommitted (re-delivered)."""
        self._stopping.set()

    async def _decode(self, batch: dict[TopicPartition, list[Record]]) -> Decoded:
        """``batch`` decoded (:meth:`Decoded.of`), its records counted in ``events_in``."""
        self.metrics.events_in.inc(sum(len(recs) for recs in batch.values()))
        skew = self.config.max_future_skew_s
        max_skew = None if skew is None else timedelta(seconds=skew)
        return await Decoded.of(
            batch, self.clock.now(), max_skew, self.clock.monotonic, self.config.origin_key
        )

    @staticmethod
    async def _until_set(event: asyncio.Event, task: asyncio.Task[bool], ms: int = 0) -> None:
        """Return once ``event`` of the batch ``task`` writes is set, ``task`` ended, or ``ms``
        milliseconds passed (``ms`` > 0).

        With ``Decoded.kept`` the next batch is fetched only once the write checked its batch
        against the assignment (at once, unless a revocation is draining), so at most one
        fetched batch at a time has not been checked (two could drop and keep the records of a
        partition revoked and assigned back in between, and the later commit skip the earlier
        batch's records). With ``Decoded.copied``: its rows sent (start-up, module contract)."""
        waiting = asyncio.create_task(event.wait())
        try:
            done = (waiting, task)
            await asyncio.wait(done, timeout=ms / 1000 or None, return_when=asyncio.FIRST_COMPLETED)
        finally:
            waiting.cancel()

    async def _write_and_commit(
        self, decoded: Decoded, previous: asyncio.Task[bool] | None = None
    ) -> bool:
        """Publish the dead letters, write the batch, then, once ``previous`` (the batch before,
        if still in flight) committed, commit its offsets (module contract). Returns False when
        records of the batch were left uncommitted (the loop stopped first, or ``previous`` left
        some): no later batch may commit then; True otherwise, also when every partition of
        the batch was revoked (nothing of it is ours to commit, so nothing to skip past).

        Counts as in flight throughout (a revocation waits for it). Records of partitions
        revoked since they were fetched are dropped, as the consumer drops its own prefetched
        records: their new owner reads them from the last committed offset."""
        async with self._in_flight.batch():
            started = self.clock.monotonic()
            assert self._consumer is not None
            decoded.keep(self._consumer.assignment())
            decoded.kept.set()
            batch, rows, dead = decoded.batch, decoded.rows, decoded.dead
            offsets = decoded.ends()
            if not offsets:  # every partition of the batch was revoked: the new owner reads it
                return True
            partitions = list(offsets)
            try:
                if dead:
                    await self._publish(dead, partitions)
                if rows or dead:
                    result = await self._store(
                        rows, dead, decoded.records, partitions, decoded.copied.set
                    )
                else:
                    result = WriteResult(0, 0, 0, 0)
            except _Stopping:
                return False  # leave the batch uncommitted: it is re-delivered after a restart
            self.health.wrote()
            if previous is not None and not await previous:
                return False  # committing past an uncommitted batch would skip its records
            for tp, recs in batch.items():
                self._offsets.delivered_below(tp, recs[0].offset)  # a topic the broker recreated
            await self._commit(offsets)
            self.metrics.events_written.inc(result.inserted)
            self.metrics.events_duplicate.inc(result.duplicates)
            self.metrics.events_conflicting.inc(result.conflicting)
            self.metrics.batches_staged.inc(result.staged)
            for d in dead:
                self.metrics.events_invalid.labels(d.reason).inc()
            for b in decoded.bad:
                self.metrics.undecodable_batches.labels(b.codec).inc()
            if result.mismatched:  # dead-lettered by the write (monitor.ingest.owner_sql)
                self.metrics.events_invalid.labels("agent_mismatch").inc(result.mismatched)
            self.metrics.batches.inc()
            self.metrics.batch_latency.observe(decoded.seconds + self.clock.monotonic() - started)
            return True

    async def _publish(self, dead: Sequence[DeadLetter], partitions: list[TopicPartition]) -> None:
        pending = DlqBatch(dead, self.config.dlq_topic)
        assert self._producer is not None
        producer = self._producer
        await self._retrier.retry(
            self._consumer,
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
        ``copied`` is called when a write sent its rows (``EventWriter.write``)."""

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
        return await self._retrier.retry(
            self._consumer,
            lambda: self.writer.write(rows, dead, source=topic, copied=copied),
            "store write",
            is_transient,
            self.metrics.store_errors,
            partitions,
        )

    async def _commit(self, offsets: dict[TopicPartition, int]) -> None:
        """Commit a written batch's offsets (:meth:`OffsetTracker.commit`)."""
        assert self._consumer is not None
        await self._offsets.commit(self._consumer, offsets)

    async def _update_lag(self) -> None:
        """Update the lag; re-read lost partitions (:meth:`OffsetTracker.update_lag`)."""
        if self._consumer is None:
            return
        await self._offsets.update_lag(self._consumer, self.clock.monotonic())
