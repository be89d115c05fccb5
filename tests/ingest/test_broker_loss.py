"""The broker loses its data (an in-memory broker restarted on the same port): the ingest loop
detects it, says so once, and resumes from the recreated topic's earliest offset."""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path

import pytest

from monitor.ingest.loop import IngestConfig, IngestLoop
from monitor.ingest.writer import EventWriter
from monitor.stack.broker import EmbeddedBroker
from tests.factories import event_dict
from tests.ingest.test_ingest_loop import produce, wait_count
from tests.servers.worker import create_topic


class LossyIngest:
    """An ingest loop (not yet running) on a broker of its own that :meth:`lose_data` replaces
    by an empty one on the same port; :meth:`close` stops the loop, writer and broker."""

    def __init__(self, tmp_path: Path, database_url: str, topic: str, group: str) -> None:
        self.tmp_path, self.topic = tmp_path, topic
        self.broker = EmbeddedBroker(log_path=tmp_path / "tansu-1.log").start()
        self.writer = EventWriter(database_url)
        config = IngestConfig(
            self.broker.bootstrap,
            topic,
            f"{topic}.dlq",
            group,
            idempotent_producer=False,
            commit_timeout_s=3.0,
        )
        self.loop = IngestLoop(config, self.writer)
        self.task: asyncio.Task[None] | None = None

    async def lose_data(self) -> None:
        """Stop the broker, start an empty one on its port and create the topic again."""
        self.broker.stop()
        log = self.tmp_path / "tansu-2.log"
        self.broker = EmbeddedBroker(port=self.broker.port, log_path=log).start()
        await create_topic(self.broker.bootstrap, self.topic, partitions=1)

    async def close(self) -> None:
        await self.loop.stop()
        if self.task is not None:
            await asyncio.wait_for(self.task, 30)
        await self.writer.close()
        self.broker.stop()


@pytest.mark.slow  # a broker that lost its data (~20 s)
async def test_broker_data_loss_is_detected_and_ingest_resumes(
    tmp_path: Path, database_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="monitor.ingest")
    topic = "lossy"
    ingest = LossyIngest(tmp_path, database_url, topic, "g-lossy")
    try:
        await create_topic(ingest.broker.bootstrap, topic, partitions=1)
        before = [(b"k", json.dumps(event_dict(f"a-{i}", "c-a", at=i)).encode()) for i in range(20)]
        await produce(ingest.broker.bootstrap, topic, before)
        ingest.task = asyncio.create_task(ingest.loop.run())
        assert await wait_count(database_url, "SELECT count(*) FROM events", 20) == 20
        await asyncio.sleep(1.0)  # the batch's offsets are committed
        await ingest.lose_data()
        after = [(b"k", json.dumps(event_dict(f"b-{i}", "c-b", at=i)).encode()) for i in range(5)]
        await produce(ingest.broker.bootstrap, topic, after)
        assert await wait_count(database_url, "SELECT count(*) FROM events", 25, timeout=90) == 25
        await asyncio.sleep(2.0)
        assert ingest.loop.health.status()[0], ingest.loop.health.status()
    finally:
        await ingest.close()
    lost = [r for r in caplog.records if "lost data" in r.getMessage()]
    assert len(lost) == 1, [r.getMessage() for r in caplog.records][-20:]
    assert "earliest offset" in lost[0].getMessage()


@pytest.mark.slow  # a broker recreated mid-run (~20 s)
async def test_a_recreated_partition_that_keeps_receiving_is_not_read_again(
    tmp_path: Path, database_url: str
) -> None:
    """After the broker lost its data, records keep arriving in the recreated topic (in batches of
    several records, which Tansu 0.6 reports with a lagging log end): the loop stores them all
    and does not go back to the beginning and read them again (the earlier detector re-read the
    partition whenever the reported end was below its position: duplicates and lag)."""
    topic = "lossy-busy"
    ingest = LossyIngest(tmp_path, database_url, topic, "g-busy")
    loop = ingest.loop
    try:
        await create_topic(ingest.broker.bootstrap, topic, partitions=1)
        ingest.task = asyncio.create_task(loop.run())
        for i in range(20):  # one record per batch
            await produce(
                ingest.broker.bootstrap,
                topic,
                [(b"k", json.dumps(event_dict(f"a-{i}", "c-a", at=i)).encode())],
            )
        assert await wait_count(database_url, "SELECT count(*) FROM events", 20) == 20
        await asyncio.sleep(1.0)
        await ingest.lose_data()
        for k in range(3):  # three batches of ten
            await produce(
                ingest.broker.bootstrap,
                topic,
                [
                    (b"k", json.dumps(event_dict(f"b-{k}-{i}", "c-b", at=i)).encode())
                    for i in range(10)
                ],
            )
        assert await wait_count(database_url, "SELECT count(*) FROM events", 50, timeout=90) == 50
        await asyncio.sleep(6.0)  # past LOSS_CONFIRM_S: an idle partition would be re-read now
        assert loop.metrics.events_duplicate._value.get() == 0  # nothing read twice
        assert loop.metrics.broker_data_loss._value.get() >= 1  # the loss was seen and counted
        assert loop.health.status()[0], loop.health.status()
    finally:
        await ingest.close()
