"""PROTOTYPE, not the product: the ingest worker with decode overlapped with the write.

``monitor.ingest.loop.IngestLoop`` handles one batch at a time: fetch, decode (CPU in the worker),
write (CPU in Postgres), commit; so the worker and Postgres take turns and one of them is
always idle. This loop decodes batch k+1 while batch k is being written: it keeps at most one
write in flight, starts the next write only after the previous one committed its offsets
(commit order and the commit-after-write contract are unchanged), and decodes in chunks with
``await asyncio.sleep(0)`` between them so the write in flight can progress. Rebalances: the
in-flight write holds the loop's lock as before; a batch decoded for partitions revoked
meanwhile is still written (idempotent) and its offset commit fails harmlessly.

It reads the same MONITOR_* settings and serves the same ``/health`` and ``/metrics`` as
``monitor worker`` (without faust and without HTTP ingest), so ``bench/ingest.py --worker
pipelined`` can measure it in place of the real worker::

    MONITOR_KAFKA_BOOTSTRAP=... DATABASE_URL=... python bench/pipelined_worker.py
"""

from __future__ import annotations

import asyncio
import logging
import signal
import sys
from collections.abc import Sequence
from pathlib import Path

from aiohttp import web
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, ConsumerRecord, TopicPartition

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # runs as a script

from monitor.config import Settings, load_settings
from monitor.ingest.loop import IngestConfig, IngestLoop, _WaitForBatch, decode_records
from monitor.ingest.rollup_sql import CREATE_STAGING, INSERT_DEAD_LETTER, STAGING_TABLE, WRITE_BATCH
from monitor.ingest.rows import EVENT_COLUMNS, DeadLetter, EventRow
from monitor.ingest.writer import EventWriter, WriteResult
from monitor.worker.ops_metrics import CONTENT_TYPE, OpsMetrics

CHUNK = 100  # records decoded between two yields to the event loop

Batch = dict[TopicPartition, list[ConsumerRecord[bytes, bytes]]]


class SignallingWriter(EventWriter):
    """``EventWriter.write`` (same statements, same transaction) that sets ``copied`` once the
    COPY into staging is done, i.e. when only Postgres has work left for this batch."""

    def __init__(self, database_url: str, pool_size: int = 2) -> None:
        super().__init__(database_url, pool_size)
        self.copied = asyncio.Event()

    async def write(self, rows: Sequence[EventRow], dead: Sequence[DeadLetter] = ()) -> WriteResult:
        if self._pool is None:
            await self.start()
        assert self._pool is not None
        inserted = conversations = 0
        try:
            async with self._pool.acquire() as conn, conn.transaction():
                if rows:
                    await conn.execute(CREATE_STAGING)
                    await conn.copy_records_to_table(
                        STAGING_TABLE, records=rows, columns=list(EVENT_COLUMNS)
                    )
                    self.copied.set()
                    record = await conn.fetchrow(WRITE_BATCH)
                    assert record is not None
                    inserted, conversations = int(record["inserted"]), int(record["conversations"])
                if dead:
                    await conn.executemany(
                        INSERT_DEAD_LETTER,
                        [(d.source, d.partition, d.offset, d.reason, d.field, d.detail, d.raw)
                         for d in dead],
                    )
        finally:
            self.copied.set()
        return WriteResult(inserted, len(rows) - inserted, conversations, len(dead))


class PipelinedIngestLoop(IngestLoop):
    """``IngestLoop`` with one write in flight while the next batch is decoded."""

    @property
    def copied(self) -> asyncio.Event:
        assert isinstance(self.writer, SignallingWriter)
        return self.writer.copied

    async def run(self) -> None:
        cfg = self.config
        self._producer = AIOKafkaProducer(
            bootstrap_servers=cfg.bootstrap, acks="all",
            enable_idempotence=cfg.idempotent_producer, linger_ms=5,
        )
        self._consumer = AIOKafkaConsumer(
            bootstrap_servers=cfg.bootstrap, group_id=cfg.group_id,
            enable_auto_commit=False, auto_offset_reset="earliest",
            max_poll_records=cfg.batch_max_events, fetch_max_bytes=64 * 1024 * 1024,
            max_partition_fetch_bytes=16 * 1024 * 1024,
        )
        await self._producer.start()
        pending: asyncio.Task[None] | None = None
        try:
            await self._consumer.start()
            self._consumer.subscribe([cfg.topic], listener=_WaitForBatch(self._lock))
            self.ready.set()
            while not self._stopping.is_set():
                batch = await self._consumer.getmany(
                    timeout_ms=cfg.batch_max_wait_ms, max_records=cfg.batch_max_events
                )
                if batch:
                    rows, dead = await self._decode(batch)
                    if pending is not None:
                        await pending
                    self.copied.clear()
                    pending = asyncio.create_task(self._write_and_commit(batch, rows, dead))
                    # the COPY needs this process too: let it finish at full speed, then decode
                    # the next batch while Postgres runs the insert + roll-up statement
                    await self.copied.wait()
                await self._update_lag()
            if pending is not None:
                await pending
        finally:
            if pending is not None and not pending.done():
                pending.cancel()
            await self._consumer.stop()
            await self._producer.stop()

    async def _decode(self, batch: Batch) -> tuple[list[EventRow], list[DeadLetter]]:
        records = [rec for recs in batch.values() for rec in recs]
        self.metrics.events_in.inc(len(records))
        rows: list[EventRow] = []
        dead: list[DeadLetter] = []
        for i in range(0, len(records), CHUNK):
            chunk_rows, chunk_dead = decode_records(records[i : i + CHUNK])
            rows += chunk_rows
            dead += chunk_dead
            await asyncio.sleep(0)
        return rows, dead

    async def _write_and_commit(
        self, batch: Batch, rows: list[EventRow], dead: list[DeadLetter]
    ) -> None:
        async with self._lock:
            started = self.clock.monotonic()
            if dead:
                await self._publish(dead, list(batch))
            result = await self._write_with_retry(rows, dead, list(batch))
            if result is None:
                return
            offsets = {tp: recs[-1].offset + 1 for tp, recs in batch.items()}
            assert self._consumer is not None
            try:
                await self._consumer.commit(offsets)
            except Exception as exc:  # CommitFailedError after a rebalance: re-delivered
                logging.getLogger("monitor.ingest").warning("offset commit failed: %s", exc)
            self._positions.update(offsets)
            self.metrics.events_written.inc(result.inserted)
            self.metrics.events_duplicate.inc(result.duplicates)
            for d in dead:
                self.metrics.events_invalid.labels(d.reason).inc()
            self.metrics.batches.inc()
            self.metrics.batch_latency.observe(self.clock.monotonic() - started)


async def serve(settings: Settings) -> None:
    assert settings.kafka_bootstrap and settings.database_url
    metrics = OpsMetrics()
    writer = SignallingWriter(settings.database_url)
    loop = PipelinedIngestLoop(
        IngestConfig(
            bootstrap=settings.kafka_bootstrap, topic=settings.topic_events,
            dlq_topic=settings.topic_dlq, group_id=settings.consumer_group,
            batch_max_events=settings.batch_max_events,
            batch_max_wait_ms=settings.batch_max_wait_ms,
            idempotent_producer=settings.kafka_idempotent,
        ),
        writer, metrics,
    )

    async def health(_: web.Request) -> web.Response:
        ok = loop.ready.is_set()
        return web.json_response({"status": "ok" if ok else "starting"}, status=200 if ok else 503)

    async def prometheus(_: web.Request) -> web.Response:
        return web.Response(body=metrics.render(), content_type=CONTENT_TYPE.split(";")[0])

    app = web.Application()
    app.add_routes([web.get("/health", health), web.get("/metrics", prometheus)])
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, settings.web_host, settings.web_port).start()
    task = asyncio.create_task(loop.run())
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        asyncio.get_running_loop().add_signal_handler(sig, stop.set)
    try:
        await asyncio.wait([task, asyncio.create_task(stop.wait())],
                           return_when=asyncio.FIRST_COMPLETED)
    finally:
        await loop.stop()
        await task
        await writer.close()
        await runner.cleanup()


def main() -> None:
    logging.basicConfig(  # the same line format as the faust worker (bench/harness.py reads it)
        level=logging.INFO, format="[%(asctime)s] [%(process)d] [%(levelname)s] %(message)s"
    )
    asyncio.run(serve(load_settings()))


if __name__ == "__main__":
    main()
