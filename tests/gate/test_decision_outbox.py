"""Decision events through the outbox with a real producer: straight to the real broker when it
acknowledges (nothing on disk), onto the disk buffer when no broker answers, replayed in order
once one does."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer

from monitor.contract.events import AgentEvent, decode_event, validate_event
from monitor.gate.buffer import DiskBuffer
from monitor.gate.decision_outbox import DecisionOutbox
from monitor.gate.producer import DecisionProducer
from monitor.stack.broker import EmbeddedBroker
from monitor.stack.ports import free_port
from tests.factories import event_dict
from tests.servers.worker import create_topic


def decision(i: int) -> AgentEvent:
    return validate_event(event_dict(f"gate:{i}", f"c{i}", "gate", at=i))


async def read_all(bootstrap: str, topic: str, n: int) -> list[AgentEvent]:
    consumer = AIOKafkaConsumer(
        topic,
        bootstrap_servers=bootstrap,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        group_id=None,
    )
    await consumer.start()
    out: list[AgentEvent] = []
    try:
        async with asyncio.timeout(60):
            while len(out) < n:
                batch = await consumer.getmany(timeout_ms=500)
                out.extend(decode_event(r.value) for rs in batch.values() for r in rs)
            extra = await consumer.getmany(timeout_ms=1000)  # nothing beyond n
            out.extend(decode_event(r.value) for rs in extra.values() for r in rs)
    finally:
        await consumer.stop()
    return out


async def test_broker_up_events_go_straight_through_without_touching_the_disk(
    broker: Any, topic_name: str, tmp_path: Path
) -> None:
    await create_topic(broker.bootstrap, topic_name, partitions=1)
    producer = DecisionProducer(broker.bootstrap, topic_name, idempotent=False)
    buf = DiskBuffer(tmp_path / "buf")
    outbox = DecisionOutbox(producer.deliver, buf, spill_after_s=10)
    try:
        assert all(await asyncio.gather(*(outbox.publish(decision(i)) for i in range(20))))
    finally:
        await producer.close()
        buf.close()
    assert buf.pending == 0 and buf.bytes == 0 and outbox.delivered == 20
    assert sum(p.stat().st_size for p in (tmp_path / "buf").iterdir()) == 0
    got = await read_all(broker.bootstrap, topic_name, 20)
    assert sorted(e.event_id for e in got) == sorted(f"gate:{i}" for i in range(20))


async def test_no_broker_events_are_buffered_in_order_then_replayed_once_one_answers(
    broker: Any, topic_name: str, tmp_path: Path
) -> None:
    await create_topic(broker.bootstrap, topic_name, partitions=1)
    nowhere = DecisionProducer(
        f"127.0.0.1:{free_port()}", topic_name, idempotent=False, request_timeout_ms=2000
    )
    buf = DiskBuffer(tmp_path / "buf")
    outbox = DecisionOutbox(nowhere.deliver, buf, spill_after_s=0.5, retry_s=0.2)
    assert await outbox.publish(decision(0)) is False  # refused or not acknowledged in time
    assert outbox.last_error is not None and buf.pending == 1
    assert outbox.buffered_mode
    for i in range(1, 6):  # behind the first, written before publish returns
        assert await outbox.publish(decision(i)) is False
        assert buf.pending == i + 1
    status = outbox.status()
    assert status["buffered"] == 6 and status["oldest_age_s"] is not None
    assert await outbox.replay_once() == 0 and buf.pending == 6  # still no broker: nothing lost
    await nowhere.close()
    buf.close()

    # a restart: a new buffer object on the same directory, a producer that reaches the broker
    up = DecisionProducer(broker.bootstrap, topic_name, idempotent=False)
    reopened = DiskBuffer(tmp_path / "buf")
    again = DecisionOutbox(up.deliver, reopened, retry_s=0.2)
    assert again.buffer.pending == 6 and again.buffered_mode
    runner = asyncio.create_task(again.run())
    try:
        assert await again.publish(decision(6)) is False  # goes behind the buffered ones
        async with asyncio.timeout(30):
            while again.buffer.pending:
                await asyncio.sleep(0.05)
        assert await again.publish(decision(7)) is True  # empty again: direct
    finally:
        await again.close()
        await runner
        await up.close()
        reopened.close()
    got = await read_all(broker.bootstrap, topic_name, 8)
    assert [e.event_id for e in got] == [f"gate:{i}" for i in range(8)]
    assert all(e.type == "gate" and e.gate is not None for e in got)
    assert again.status()["buffered"] == 0 and again.status()["dropped"] == 0


async def test_a_record_refused_for_good_is_dropped_counted_and_does_not_block_the_rest(
    broker: Any, topic_name: str, tmp_path: Path
) -> None:
    await create_topic(broker.bootstrap, topic_name, partitions=1)
    buf = DiskBuffer(tmp_path / "buf")
    huge = b'{"event_id":"gate:huge","pad":"' + b"x" * 1_100_000 + b'"}'  # above max_request_size
    buf.append([(b"c0", decision(0).to_json()), (b"cx", huge), (b"c1", decision(1).to_json())])
    producer = DecisionProducer(broker.bootstrap, topic_name, idempotent=False)
    outbox = DecisionOutbox(producer.deliver, buf)
    try:
        assert await outbox.replay_once() == 3  # all three left the buffer
    finally:
        await producer.close()
        buf.close()
    assert buf.pending == 0 and buf.dropped["refused"] == 1 and outbox.delivered == 2
    assert outbox.last_error is not None and "MessageSizeTooLarge" in outbox.last_error
    got = await read_all(broker.bootstrap, topic_name, 2)
    assert [e.event_id for e in got] == ["gate:0", "gate:1"]


@pytest.mark.slow  # seconds of waiting or sampling: make test, not make check
async def test_a_graceful_stop_writes_the_events_in_flight_to_disk(tmp_path: Path) -> None:
    own = EmbeddedBroker(log_path=tmp_path / "tansu.log").start()
    producer = DecisionProducer(
        own.bootstrap, "decisions", idempotent=False, request_timeout_ms=3000
    )  # only bounds the producer's stop
    buf = DiskBuffer(tmp_path / "buf")
    outbox = DecisionOutbox(producer.deliver, buf, spill_after_s=120)
    try:
        await create_topic(own.bootstrap, "decisions", partitions=1)
        assert await outbox.publish(decision(0)) is True  # connected, acknowledged
        own.stop()
        waiting = asyncio.create_task(outbox.publish(decision(1)))  # no acknowledgement comes
        async with asyncio.timeout(10):
            while outbox.status()["in_flight"] != 1:
                await asyncio.sleep(0.05)
        assert buf.pending == 0  # nothing on disk yet: a kill -9 now would lose it
        await outbox.close()
        assert await waiting is False
        assert buf.pending == 1
        assert [r.value for r in buf.read(10)] == [decision(1).to_json()]
    finally:
        await producer.close()
        buf.close()
        own.stop()


async def test_a_graceful_stop_delivers_what_the_disk_holds_before_the_producer_closes(
    broker: Any, topic_name: str, tmp_path: Path
) -> None:
    """Events buffered while the broker was slow are delivered by the stop itself: a stopped
    process's slot may never be taken again (a scale-down)."""
    await create_topic(broker.bootstrap, topic_name, partitions=1)
    buf = DiskBuffer(tmp_path / "buf")
    buf.append([(b"c%d" % i, decision(i).to_json()) for i in range(5)])
    producer = DecisionProducer(broker.bootstrap, topic_name, idempotent=False)
    outbox = DecisionOutbox(producer.deliver, buf)
    try:
        await outbox.close(drain_s=30)
        assert buf.pending == 0 and outbox.delivered == 5
    finally:
        await producer.close()
        buf.close()
    got = await read_all(broker.bootstrap, topic_name, 5)
    assert [e.event_id for e in got] == [f"gate:{i}" for i in range(5)]


async def test_a_stop_without_a_broker_keeps_the_buffer_within_its_drain_time(
    tmp_path: Path,
) -> None:
    buf = DiskBuffer(tmp_path / "buf")
    buf.append([(b"c0", decision(0).to_json())])

    async def hangs(key: bytes, value: bytes) -> None:
        await asyncio.sleep(3600)

    outbox = DecisionOutbox(hangs, buf)
    started = time.monotonic()
    await outbox.close(drain_s=0.3)
    assert time.monotonic() - started < 5
    assert buf.pending == 1  # kept for the next process that takes the slot
    buf.close()
