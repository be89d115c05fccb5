"""Start-up and idle in the ingest loop: with no write in flight, the loop fetches a
small batch and sends it to Postgres before it fetches the next, so Postgres starts on the
first events without waiting for a whole batch's decode; with writes in flight, batches are
full-size again."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence

from aiokafka import TopicPartition

from monitor.ingest.decoded import Decoded
from monitor.ingest.loop import FIRST_BATCH_DIVISOR, IngestConfig, IngestLoop
from monitor.ingest.rows import DeadLetter, EventRow
from monitor.ingest.writer import EventWriter, WriteResult
from tests.factories import event_dict
from tests.ingest.test_ingest_loop import produce_keyed, wait_count
from tests.servers.worker import create_topic

N, BATCH = 1200, 240
LATE_COPY_S = 0.4  # the first write sends its rows this long after it started


class ScriptedWriter(EventWriter):
    """The real writer, recording when each write sent its rows. ``late_first_s``: the first
    write waits that long before it sends them (a slow link); while ``up`` is not set, every
    write fails like an unreachable server (a transient error: the loop retries it)."""

    def __init__(self, url: str, late_first_s: float = 0.0, up: bool = True) -> None:
        super().__init__(url)
        self.late_first_s = late_first_s
        self.up = asyncio.Event()
        if up:
            self.up.set()
        self.failed = 0
        self.copied_at: list[float] = []

    async def write(
        self,
        rows: Sequence[EventRow],
        dead: Sequence[DeadLetter] = (),
        source: str = "kafka",
        copied: Callable[[], None] | None = None,
    ) -> WriteResult:
        if not self.up.is_set():
            self.failed += 1
            raise ConnectionRefusedError("the server is down")
        if not self.copied_at:
            await asyncio.sleep(self.late_first_s)

        def sent() -> None:
            self.copied_at.append(time.monotonic())
            if copied is not None:
                copied()

        return await super().write(rows, dead, source, sent)


class SizingLoop(IngestLoop):
    """The real loop; records when each batch's decode started and how many records it had."""

    decodes: list[tuple[float, int]]

    async def _decode(self, batch: dict[TopicPartition, list]) -> Decoded:  # type: ignore[type-arg]
        self.decodes.append((time.monotonic(), sum(len(r) for r in batch.values())))
        return await super()._decode(batch)


async def test_a_small_first_batch_is_sent_before_the_next_is_fetched(
    broker, topic_name: str, database_url: str
) -> None:
    await create_topic(broker.bootstrap, topic_name, partitions=2)
    events = [event_dict(f"e-{i}", f"c-{i % 40}", at=i, turn=i // 40) for i in range(N)]
    await produce_keyed(broker.bootstrap, topic_name, events)
    writer = ScriptedWriter(database_url, late_first_s=LATE_COPY_S)
    config = IngestConfig(
        broker.bootstrap,
        topic_name,
        f"{topic_name}.dlq",
        f"g-{topic_name}",
        batch_max_events=BATCH,
        batch_max_wait_ms=2000,
        idempotent_producer=False,
    )
    loop = SizingLoop(config, writer)
    loop.decodes = []
    task = asyncio.create_task(loop.run())
    try:
        assert await wait_count(database_url, "SELECT count(*) FROM events", N) == N
    finally:
        await loop.stop()
        await task
        await writer.close()

    sizes = [n for _, n in loop.decodes]
    assert sum(sizes) == N
    assert 0 < sizes[0] <= BATCH // FIRST_BATCH_DIVISOR  # nothing in flight: a small batch
    # the next fetch waited for the first batch's rows to reach Postgres (sent >= 0.4 s late)
    assert loop.decodes[1][0] >= writer.copied_at[0]
    # with writes in flight the batches are full-size again
    assert max(sizes) == BATCH


async def test_the_worker_fetches_with_the_configured_wait(
    broker, topic_name: str, database_url: str, monkeypatch
) -> None:
    """The worker's ingest consumer lets the broker hold a fetch at most
    ``MONITOR_FETCH_MAX_WAIT_MS`` (default 100 ms, not Kafka's 500: Tansu sometimes holds a
    fetch that long while a partition in it still has records, which stalled draining a
    backlog; docs/benchmarks.md)."""
    from monitor.config import Settings
    from monitor.telemetry.ops_metrics import OpsMetrics
    from monitor.worker.services import IngestService

    assert Settings.model_fields["fetch_max_wait_ms"].default == 100
    await create_topic(broker.bootstrap, topic_name, partitions=1)
    monkeypatch.setenv("MONITOR_FETCH_MAX_WAIT_MS", "123")
    settings = Settings(
        kafka_bootstrap=broker.bootstrap,
        topic_events=topic_name,
        database_url=database_url,
        kafka_idempotent=False,
    )
    service = IngestService(settings, OpsMetrics())
    loop = service.loop_
    task = asyncio.create_task(loop.run())
    try:
        await asyncio.wait_for(loop.ready.wait(), 30)
        assert loop._consumer is not None
        assert loop._consumer._fetcher._fetch_max_wait_ms == 123
    finally:
        await loop.stop()
        await task
        await loop.writer.close()


class LagCheckingLoop(IngestLoop):
    """The real loop; counts its consumer-lag updates (what /health's stall check reads)."""

    lag_checks = 0

    async def _update_lag(self) -> None:
        self.lag_checks += 1
        await super()._update_lag()


async def test_a_first_batch_retried_through_an_outage_does_not_hold_the_loop(
    broker, topic_name: str, database_url: str
) -> None:
    """The wait for a first batch's rows to be sent is bounded (``batch_max_wait_ms``): while
    its write is retried through an outage, the loop goes on and keeps the lag (and so
    /health) current; once the server is back, every event is stored."""
    await create_topic(broker.bootstrap, topic_name, partitions=2)
    events = [event_dict(f"o-{i}", f"c-{i % 10}", at=i) for i in range(100)]
    await produce_keyed(broker.bootstrap, topic_name, events)
    writer = ScriptedWriter(database_url, up=False)
    config = IngestConfig(
        broker.bootstrap,
        topic_name,
        f"{topic_name}.dlq",
        f"g-{topic_name}",
        batch_max_events=800,
        batch_max_wait_ms=100,
        retry_initial_s=0.2,
        retry_max_s=0.2,
        idempotent_producer=False,
    )
    loop = LagCheckingLoop(config, writer)
    task = asyncio.create_task(loop.run())
    try:
        deadline = time.monotonic() + 30
        while not writer.failed and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        assert writer.failed
        before = loop.lag_checks
        await asyncio.sleep(1.0)
        assert loop.lag_checks - before >= 3  # the loop went on during the outage
        assert loop.health.paused
        writer.up.set()
        assert await wait_count(database_url, "SELECT count(*) FROM events", 100) == 100
    finally:
        await loop.stop()
        await task
        await writer.close()
