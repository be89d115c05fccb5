"""DLQ publishing per record against the real broker: a record the broker (or producer) will
never take is given up without re-sending the others; oversize values go out truncated."""

from __future__ import annotations

import hashlib

from aiokafka import AIOKafkaProducer

from monitor.ingest.dlq_publish import DLQ_HEAD_BYTES, DlqBatch, dlq_record
from monitor.ingest.rows import DeadLetter
from tests.servers.worker import read_topic


def letter(offset: int, raw: bytes) -> DeadLetter:
    return DeadLetter("src", 0, offset, "not_json", None, "bad", raw, b"k")


async def read_all(bootstrap: str, topic: str) -> list[tuple[bytes, dict[str, bytes]]]:
    recs = await read_topic(bootstrap, topic, max_records=100, timeout_ms=4000)
    return [(r.value or b"", dict(r.headers)) for r in recs]


async def test_one_unpublishable_record_does_not_resend_the_others(broker, topic_name: str):
    small = [letter(i, f"bad-{i}".encode()) for i in range(3)]
    huge = letter(99, b"x" * 700_000)  # truncated to 4096 bytes, still above this producer's
    producer = AIOKafkaProducer(  # deliberately tiny request limit
        bootstrap_servers=broker.bootstrap, enable_idempotence=False, max_request_size=3000
    )
    await producer.start()
    try:
        batch = DlqBatch([small[0], huge, *small[1:]], topic_name)
        await batch.publish(producer)  # does not raise: the huge one is given up, logged
        assert batch.pending == [] and batch.given_up == [huge]
        await batch.publish(producer)  # a second attempt has nothing left to send
    finally:
        await producer.stop()
    got = await read_all(broker.bootstrap, topic_name)
    assert sorted(v for v, _ in got) == [b"bad-0", b"bad-1", b"bad-2"]  # each exactly once


def test_oversize_value_is_truncated_with_its_digest():
    raw = bytes(range(256)) * 3000
    value, headers = dlq_record(letter(7, raw))
    meta = dict(headers)
    assert value == raw[:DLQ_HEAD_BYTES]
    assert meta["sha256"] == hashlib.sha256(raw).hexdigest().encode()
    assert meta["original_bytes"] == str(len(raw)).encode() and meta["truncated"] == b"true"
    assert (meta["source"], meta["source_partition"], meta["source_offset"]) == (b"src", b"0", b"7")
    assert dlq_record(letter(8, b"small")) == (b"small", letter(8, b"small").headers())


def test_repeated_client_lines_are_cut_to_one_per_window(caplog):
    import logging

    from monitor.ingest.log_dedupe import RepeatFilter

    now = [0.0]
    logger = logging.getLogger("test.repeat")
    logger.addFilter(RepeatFilter(lambda: now[0], window_s=60))
    with caplog.at_level(logging.ERROR, logger="test.repeat"):
        for _ in range(190):  # 19 lines a second for ten seconds
            logger.error("OffsetCommit failed for group %s: %s", "g", "UnknownTopicOrPartition")
            now[0] += 1 / 19
        now[0] += 60
        logger.error("OffsetCommit failed for group %s: %s", "g", "UnknownTopicOrPartition")
        logger.error("another message")
    lines = [r.getMessage() for r in caplog.records]
    assert lines == [
        "OffsetCommit failed for group g: UnknownTopicOrPartition",
        "OffsetCommit failed for group g: UnknownTopicOrPartition (189 identical lines suppressed)",
        "another message",
    ]
