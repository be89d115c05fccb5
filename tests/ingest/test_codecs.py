"""Every Kafka codec decodes, and a record batch that does not is dead-lettered, not fatal.

The real broker (it stores produced record batches as they are sent, corrupt ones included) and
Postgres; the in-process ingest loop.
"""

from __future__ import annotations

import asyncio
import json
import struct
import zlib
from collections import Counter

import cramjam
import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.errors import (
    ConsumerStoppedError,
    CorruptRecordException,
    KafkaConnectionError,
    RecordTooLargeError,
    UnsupportedCodecError,
)

from monitor.consume.batch_scan import codec_of, scan
from monitor.consume.guarded_fetch import may_be_undecodable
from monitor.ingest.decoded import dead_letter_of
from monitor.ingest.loop import IngestConfig, IngestLoop
from monitor.ingest.writer import EventWriter
from tests.db import fetch
from tests.factories import event_dict
from tests.ingest.test_ingest_loop import wait_count
from tests.kafka_raw import Raw, record_batch
from tests.servers.worker import create_topic, read_topic

CODECS = ("gzip", "snappy", "lz4", "zstd")


def values(prefix: str, n: int, start: int = 0) -> list[bytes]:
    return [
        json.dumps(event_dict(f"{prefix}-{i}", f"c-{prefix}", at=i, turn=i)).encode()
        for i in range(start, start + n)
    ]


async def produce_with(
    bootstrap: str, topic: str, vals: list[bytes], codec: str | None, partition: int = 0
) -> None:
    """``vals`` sent by a real producer configured with ``codec``, as one batch (linger)."""
    p = AIOKafkaProducer(
        bootstrap_servers=bootstrap,
        enable_idempotence=False,
        acks="all",
        compression_type=codec,
        linger_ms=200,
    )
    await p.start()
    try:
        futures = [await p.send(topic, v, key=b"k", partition=partition) for v in vals]
        await p.flush()
        for f in futures:
            await f
    finally:
        await p.stop()


def loop_for(
    bootstrap: str, topic: str, database_url: str, batch_max_events: int = 500
) -> tuple[IngestLoop, EventWriter]:
    writer = EventWriter(database_url)
    dlq, group = f"{topic}.dlq", f"g-{topic}"
    config = IngestConfig(bootstrap, topic, dlq, group, batch_max_events=batch_max_events)
    config.idempotent_producer = False
    return IngestLoop(config, writer), writer


async def stored_ids(database_url: str) -> list[str]:
    return [r[0] for r in await fetch(database_url, "SELECT event_id FROM events")]


async def test_every_codec_between_uncompressed_events(broker, topic_name: str, database_url):
    bootstrap = broker.bootstrap
    await create_topic(bootstrap, topic_name, 1)
    sent: list[bytes] = []
    for codec in CODECS:
        plain = values(f"plain-{codec}", 3)
        packed = values(codec, 20)
        await produce_with(bootstrap, topic_name, plain, None)
        await produce_with(bootstrap, topic_name, packed, codec)
        sent += plain + packed
    tail = values("plain-tail", 3)
    await produce_with(bootstrap, topic_name, tail, None)
    sent += tail
    async with Raw(bootstrap, topic_name) as raw:
        on_broker = [codec for _, codec in await raw.batches()]
    assert [c for c in on_broker if c != "none"] == list(CODECS)  # one batch per codec

    loop, writer = loop_for(bootstrap, topic_name, database_url)
    task = asyncio.create_task(loop.run())
    try:
        assert await wait_count(database_url, "SELECT count(*) FROM events", len(sent)) == len(sent)
        await asyncio.sleep(0.5)  # nothing more arrives later (no duplicate write)
        assert not task.done() and loop.health.status()[0]
    finally:
        await loop.stop()
        await task
        await writer.close()
    ids = await stored_ids(database_url)
    assert Counter(ids) == Counter(json.loads(v)["event_id"] for v in sent)  # each once
    assert await wait_count(database_url, "SELECT count(*) FROM dead_letters", 0, 0) == 0
    text = loop.metrics.render().decode()
    assert f"monitor_events_written_total {float(len(sent))}" in text
    assert not [line for line in text.splitlines() if line.startswith("monitor_undecodable")]


@pytest.mark.parametrize("batch_max_events", [500, 16])  # 16: fewer than the good records
async def test_undecodable_batches_are_dead_lettered_between_good_events(
    broker, topic_name: str, database_url, batch_max_events: int
):
    bootstrap = broker.bootstrap
    # partitions 1-3 hold good events only: those the consumer drained before it failed on
    # partition 0 in the same fetch must not be skipped
    await create_topic(bootstrap, topic_name, 4)
    before, middle, after = values("before", 10), values("middle", 10), values("after", 10)
    other = {p: values(f"other-{p}", 10) for p in (1, 2, 3)}
    bad_vals = values("bad", 5)
    for p, vals in other.items():
        await produce_with(bootstrap, topic_name, vals[:5], None, partition=p)
    await produce_with(bootstrap, topic_name, before, None)
    async with Raw(bootstrap, topic_name) as raw:
        zstd_at = await raw.produce(record_batch(bad_vals, "zstd", "payload"))
        await produce_with(bootstrap, topic_name, middle, "gzip")
        crc_at = await raw.produce(record_batch(bad_vals[:3], "lz4", "crc"))
        await produce_with(bootstrap, topic_name, after, None)
        for p, vals in other.items():
            await produce_with(bootstrap, topic_name, vals[5:], "snappy", partition=p)
        assert [c for _, c in await raw.batches()] == ["none", "zstd", "gzip", "lz4", "none"]

    loop, writer = loop_for(bootstrap, topic_name, database_url, batch_max_events)
    task = asyncio.create_task(loop.run())
    good = before + middle + after + [v for vals in other.values() for v in vals]
    try:
        assert await wait_count(database_url, "SELECT count(*) FROM events", len(good)) == len(good)
        assert await wait_count(database_url, "SELECT count(*) FROM dead_letters", 2) == 2
        late = values("late", 5)
        await produce_with(bootstrap, topic_name, late, "zstd")  # the loop goes on
        good += late
        assert await wait_count(database_url, "SELECT count(*) FROM events", len(good)) == len(good)
        await asyncio.sleep(0.5)
        assert not task.done() and loop.ready.is_set()
        assert loop.health.status() == (True, "ok", "")
    finally:
        await loop.stop()
        await task
        await writer.close()

    assert Counter(await stored_ids(database_url)) == Counter(
        json.loads(v)["event_id"] for v in good
    )
    dead = await fetch(
        database_url,
        "SELECT source, source_partition, source_offset, reason, detail, raw FROM dead_letters"
        " ORDER BY source_offset",
    )
    assert [(d["source"], d["source_partition"], d["source_offset"]) for d in dead] == [
        (topic_name, 0, zstd_at),
        (topic_name, 0, crc_at),
    ]
    assert {d["reason"] for d in dead} == {"undecodable_batch"}
    zstd, crc = dead
    assert zstd["detail"].startswith(
        f"offsets {zstd_at}-{zstd_at + 4} (5 offsets) of {topic_name}[0]"
    )
    assert "zstd record batch: DecompressionError" in zstd["detail"]
    assert crc["detail"].startswith(f"offsets {crc_at}-{crc_at + 2} (3 offsets)")
    assert "lz4 record batch: CorruptRecordException" in crc["detail"]
    assert "invalid CRC" in crc["detail"]
    assert codec_of(zstd["raw"]) == "zstd"  # the batch as the broker holds it

    text = loop.metrics.render().decode()
    assert 'monitor_events_invalid_total{reason="undecodable_batch"} 2.0' in text
    assert 'monitor_undecodable_batches_total{codec="zstd"} 1.0' in text
    assert 'monitor_undecodable_batches_total{codec="lz4"} 1.0' in text

    # the DLQ topic holds one record per batch, with the reason and where it came from
    recs = await read_topic(bootstrap, f"{topic_name}.dlq")
    headers = sorted((dict(r.headers) for r in recs), key=lambda h: int(h["source_offset"]))
    assert [(h["reason"], h["source_offset"]) for h in headers] == [
        (b"undecodable_batch", str(zstd_at).encode()),
        (b"undecodable_batch", str(crc_at).encode()),
    ]

    # the group committed past everything, the bad batches included: a restart re-reads nothing
    group = AIOKafkaConsumer(
        bootstrap_servers=bootstrap, group_id=f"g-{topic_name}", enable_auto_commit=False
    )
    await group.start()
    try:
        ends = {p: await group.committed(TopicPartition(topic_name, p)) for p in range(4)}
    finally:
        await group.stop()
    assert ends == {0: crc_at + 3 + len(after) + len(late), 1: 10, 2: 10, 3: 10}


def test_scan_stops_at_the_first_undecodable_batch() -> None:
    tp = TopicPartition("t", 3)
    # three batches at offsets 0-1, 2-4 (bad), 5-6, framed as a fetch response holds them
    batches = [
        rebased(record_batch(values("a", 2), "gzip", "none"), 0),
        rebased(record_batch(values("b", 3), "snappy", "payload"), 2),
        rebased(record_batch(values("c", 2), "none", "none"), 5),
    ]
    data = b"".join(batches)
    found = scan(tp, 1, data, 100)  # fetched at offset 1: offset 0 was delivered before
    assert [r.offset for r in found.records] == [1]
    assert found.records[0].value == values("a", 2)[1] and found.records[0].partition == 3
    assert found.bad is not None and (found.bad.first, found.bad.next) == (2, 5)
    assert found.bad.codec == "snappy" and found.resume == 5
    letter = dead_letter_of(found.bad)
    assert (letter.partition, letter.offset, letter.reason) == (3, 2, "undecodable_batch")
    assert letter.detail.startswith("offsets 2-4 (3 offsets) of t[3]: snappy record batch: ")
    assert letter.raw == batches[1]
    cut = scan(tp, 0, data, 1)  # at most ``limit`` records: the bad batch is not reached
    assert [r.offset for r in cut.records] == [0] and cut.bad is None and cut.resume == 1
    fine = scan(tp, 5, batches[2], 100)
    assert [r.offset for r in fine.records] == [5, 6] and fine.bad is None and fine.resume == 7


def rebased(batch: bytes, base: int) -> bytes:
    """``batch`` with base offset ``base`` (outside the CRC, which covers attributes on)."""
    return struct.pack(">q", base) + batch[8:]


def test_which_fetch_errors_are_looked_into() -> None:
    codec_errors = [
        UnsupportedCodecError("Unknown compression codec 0x06"),
        CorruptRecordException("Invalid CRC"),
        cramjam.DecompressionError("lz4: ERROR_reservedFlag_set"),
        zlib.error("invalid stored block lengths"),
        EOFError("Compressed file ended before the end-of-stream marker was reached"),
    ]
    assert all(may_be_undecodable(e) for e in codec_errors)
    other = [KafkaConnectionError(), ConsumerStoppedError(), RecordTooLargeError()]
    assert not any(may_be_undecodable(e) for e in other)
