"""Decision events the producer refuses are kept, in order, and delivered by a later retry:
a real producer that is not running, then one connected to the real broker."""

from __future__ import annotations

import asyncio
from typing import Any

from aiokafka import AIOKafkaConsumer

from monitor.contract.events import AgentEvent, decode_event, validate_event
from monitor.gate.outbox import DecisionOutbox
from monitor.sdk import EventEmitter
from tests.factories import event_dict
from tests.servers.worker import create_topic


def decision(i: int) -> AgentEvent:
    return validate_event(event_dict(f"gate:{i}", f"c{i}", "gate", at=i))


async def read_all(bootstrap: str, topic: str, n: int) -> list[AgentEvent]:
    consumer = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest",
                                enable_auto_commit=False, group_id=None)  # fmt: skip
    await consumer.start()
    out: list[AgentEvent] = []
    try:
        async with asyncio.timeout(60):
            while len(out) < n:
                batch = await consumer.getmany(timeout_ms=500)
                out.extend(decode_event(r.value) for rs in batch.values() for r in rs)
    finally:
        await consumer.stop()
    return out


async def test_refused_events_are_kept_in_order_and_sent_later(
    broker: Any, topic_name: str
) -> None:
    await create_topic(broker.bootstrap, topic_name, partitions=1)
    down = EventEmitter(broker.bootstrap, topic_name, idempotent=False)  # never started
    outbox = DecisionOutbox(down.send, capacity=4)
    assert await outbox.publish(decision(0)) is False
    assert outbox.last_error is not None and "EmitterNotRunning" in outbox.last_error
    for i in range(1, 6):  # 6 refused, room for 4: the two oldest are dropped and counted
        assert await outbox.publish(decision(i)) is False
    assert [e.event_id for e in outbox.kept] == ["gate:2", "gate:3", "gate:4", "gate:5"]
    assert outbox.dropped == 2
    assert await outbox.retry() == 0  # still down: nothing lost, nothing reordered
    assert len(outbox.kept) == 4

    async with EventEmitter(broker.bootstrap, topic_name, idempotent=False) as up:
        outbox.send = up.send
        assert await outbox.retry() == 4 and not outbox.kept
        assert await outbox.publish(decision(6)) is True  # nothing kept: straight through
        await up.flush()
    got = await read_all(broker.bootstrap, topic_name, 5)
    assert [e.event_id for e in got] == ["gate:2", "gate:3", "gate:4", "gate:5", "gate:6"]
    assert all(e.type == "gate" and e.gate is not None for e in got)
