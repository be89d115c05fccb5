"""The SDK emitters against the real (embedded Tansu) broker.

Tansu's memory storage rejects InitProducerId, so every emitter here runs with idempotent=False
except the one test that checks the clear error idempotent=True gives against it.
"""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from collections import defaultdict
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.partitioner import DefaultPartitioner

from monitor.contract.events import AgentEvent, decode_event
from monitor.core.clock import FixedClock
from monitor.core.errors import InvalidEvent
from monitor.sdk import (
    Agent,
    Context,
    DeliveryError,
    EmitterError,
    EmitterNotRunning,
    EventEmitter,
    SyncEventEmitter,
    ToolCall,
)
from monitor.stack.broker import EmbeddedBroker
from tests.servers.worker import create_topics

PARTITIONS = 4
AGENT = Agent(id="support-bot", version="1.4.0", model="gpt-x")
CONTEXT = Context(domain="retail", tier=2, channel="chat")
T0 = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)


@pytest.fixture
async def topic(broker: EmbeddedBroker, topic_name: str) -> str:
    await create_topics(broker.bootstrap, (topic_name, PARTITIONS))
    return topic_name


def emitter(broker: EmbeddedBroker, topic: str, **kw: Any) -> EventEmitter:
    kw.setdefault("agent", AGENT)
    return EventEmitter(broker.bootstrap, topic, idempotent=False, **kw)


async def consume(bootstrap: str, topic: str, n: int, timeout: float = 10.0) -> list[Any]:
    """Read the topic from the start until n records arrived, plus one poll to catch extras."""
    consumer = AIOKafkaConsumer(
        topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest", enable_auto_commit=False
    )
    await consumer.start()
    records: list[Any] = []
    try:
        deadline = asyncio.get_running_loop().time() + timeout
        while len(records) < n and asyncio.get_running_loop().time() < deadline:
            for batch in (await consumer.getmany(timeout_ms=200)).values():
                records.extend(batch)
        for batch in (await consumer.getmany(timeout_ms=300)).values():
            records.extend(batch)
    finally:
        await consumer.stop()
    return records


async def started_consumer(bootstrap: str, topic: str) -> AIOKafkaConsumer:
    """A consumer already assigned to every partition from the start, polling every 50 ms."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, fetch_max_wait_ms=50)
    await consumer.start()
    consumer.assign([TopicPartition(topic, p) for p in range(PARTITIONS)])
    await consumer.seek_to_beginning()
    return consumer


async def read_within(consumer: AIOKafkaConsumer, n: int, seconds: float) -> list[Any]:
    records: list[Any] = []
    deadline = asyncio.get_running_loop().time() + seconds
    while len(records) < n and asyncio.get_running_loop().time() < deadline:
        for batch in (await consumer.getmany(timeout_ms=50)).values():
            records.extend(batch)
    return records


def assert_round_trip(records: list[Any], sent: list[AgentEvent]) -> None:
    """Each record decodes to exactly the event sent, keyed by its conversation."""
    by_id = {e.event_id: e for e in sent}
    assert len(records) == len(sent) == len(by_id)
    for rec in records:
        event = decode_event(rec.value)
        assert event == by_id.pop(event.event_id)
        assert rec.key == event.conversation_id.encode("utf-8")
    assert not by_id


async def test_events_round_trip_with_keys_partitions_and_order(
    broker: EmbeddedBroker, topic: str
) -> None:
    clock = FixedClock(T0)
    sent: list[AgentEvent] = []
    async with emitter(broker, topic, context=CONTEXT, clock=clock.now) as em:
        for c in range(8):
            conv = f"conv-{c}-é"  # non-ASCII: the key is UTF-8
            sent.append(
                await em.message(
                    conv,
                    "assistant",
                    "Let me check.",
                    confidence=0.7,
                    confidence_source="verbalized",
                    tool_calls=[ToolCall(id="call-1", name="lookup", arguments={"order": c})],
                    turn=0,
                )
            )
            sent.append(await em.tool_result(conv, "call-1", "lookup", True, "shipped", turn=1))
            sent.append(await em.escalation(conv, "threshold", "low confidence", 0.2, turn=2))
            sent.append(await em.outcome(conv, c % 2 == 0, reward=0.5, source="csat", turn=3))
            sent.append(
                await em.feedback(conv, -0.5, "thumbs", "meh", turn=4, attributes={"ui": "web"})
            )
            clock.advance(1)
        await em.flush()
        assert em.pending == 0

    records = await consume(broker.bootstrap, topic, len(sent))
    assert_round_trip(records, sent)
    partitions: dict[str, set[int]] = defaultdict(set)
    turns: dict[str, list[int]] = defaultdict(list)
    for rec in sorted(records, key=lambda r: (r.partition, r.offset)):
        event = decode_event(rec.value)
        partitions[event.conversation_id].add(rec.partition)
        turns[event.conversation_id].append(event.turn or 0)
    assert all(len(p) == 1 for p in partitions.values())  # one conversation, one partition
    for rec in records:  # the partition aiokafka's (and Java's) default partitioner picks
        assert rec.partition == DefaultPartitioner()(rec.key, list(range(PARTITIONS)), [])
    assert len(set().union(*partitions.values())) > 1  # and the keys do spread
    assert all(t == [0, 1, 2, 3, 4] for t in turns.values())  # in send order
    first = decode_event(records[0].value)
    assert first.agent == AGENT and first.context == CONTEXT


async def test_flush_waits_for_broker_acknowledgement(broker: EmbeddedBroker, topic: str) -> None:
    # Tansu's ListOffsets(latest) answers "last batch base offset + 1", not the high watermark,
    # so visibility is checked by reading, with a consumer started before anything is sent.
    n, linger_s = 60, 5.0
    consumer = await started_consumer(broker.bootstrap, topic)
    try:
        async with emitter(broker, topic, linger_ms=int(linger_s * 1000)) as em:
            sent = [await em.message(f"c{i % 7}", "user", f"msg {i}") for i in range(n)]
            assert em.pending == n  # queued, not acknowledged: the batches are lingering
            assert await read_within(consumer, 1, 0.3) == []
            started = time.monotonic()
            await em.flush()
            assert time.monotonic() - started < linger_s / 2  # flush sends lingering batches
            assert em.pending == 0
            # everything is on the broker when flush returns: readable well inside the linger
            records = await read_within(consumer, n, 1.0)
    finally:
        await consumer.stop()
    assert_round_trip(records, sent)


@pytest.mark.timing  # what shipped within 0.5 s
async def test_full_batches_keep_each_conversations_order(
    broker: EmbeddedBroker, topic: str
) -> None:
    # 1 KiB batches: each holds a few events, so every partition ships many, back to back
    # (shipped when full, not lingering), and a conversation's events span batches.
    async with emitter(broker, topic, max_batch_size=1024, linger_ms=2000) as em:
        sent = [
            await em.message(f"c{i % 5}", "user", f"{i} " + "x" * 200, turn=i // 5)
            for i in range(300)
        ]
        await asyncio.sleep(0.5)
        assert 0 < em.pending < 20  # full batches left at once; the last, open ones linger
        await em.flush()
    records = await consume(broker.bootstrap, topic, len(sent))
    assert_round_trip(records, sent)
    turns: dict[str, list[int]] = defaultdict(list)
    for rec in sorted(records, key=lambda r: (r.partition, r.offset)):
        event = decode_event(rec.value)
        turns[event.conversation_id].append(event.turn or 0)
    assert all(t == list(range(60)) for t in turns.values())


async def test_a_tight_send_loop_has_its_batches_delivered_while_it_sends(
    broker: EmbeddedBroker, topic: str
) -> None:
    # a caller awaiting nothing but send() (a replay, a backfill): full batches must leave while
    # it sends. Before send() yielded once per shipped batch, none did until flush (or a full
    # buffer): 0 events were acknowledged inside this loop
    async with emitter(broker, topic, max_batch_size=4096, linger_ms=10_000) as em:
        sent, acknowledged = [], 0
        for i in range(3000):
            sent.append(await em.message(f"c{i % 7}", "user", "z" * 200))
            acknowledged = max(acknowledged, len(sent) - em.pending)
        await em.flush()
    assert acknowledged > 0
    assert_round_trip(await consume(broker.bootstrap, topic, len(sent)), sent)


async def test_a_full_buffer_holds_sends_back_until_acknowledged(
    broker: EmbeddedBroker, topic: str
) -> None:
    peak, started = 0, time.monotonic()
    # a 10 s linger: a full buffer ships its open batches at once instead of waiting it out
    async with emitter(broker, topic, buffer_bytes=4096, linger_ms=10_000) as em:
        sent = []
        for i in range(200):
            sent.append(await em.message(f"c{i % 9}", "user", "y" * 300))
            peak = max(peak, em.pending)
        await em.flush()
    assert time.monotonic() - started < 5
    assert peak <= 4096 // 300 + 1  # never more unacknowledged bytes than the buffer (+1 event)
    assert_round_trip(await consume(broker.bootstrap, topic, len(sent)), sent)


async def test_close_flushes_is_idempotent_and_rejects_sends(
    broker: EmbeddedBroker, topic: str
) -> None:
    em = emitter(broker, topic, linger_ms=400)
    with pytest.raises(EmitterNotRunning, match="not started"):
        await em.message("c", "user", "too early")
    await em.start()
    await em.start()  # no-op
    sent = [await em.message(f"c{i}", "user", "hi") for i in range(10)]
    await asyncio.gather(em.close(), em.close())  # concurrent closes: both return cleanly
    await em.close()
    assert em.pending == 0
    assert_round_trip(await consume(broker.bootstrap, topic, 10), sent)  # close flushed them
    with pytest.raises(EmitterNotRunning, match="closed"):
        await em.send(sent[0])
    with pytest.raises(EmitterNotRunning, match="closed"):
        await em.start()
    await em.flush()  # nothing pending: a no-op after close

    never_started = emitter(broker, topic)
    await never_started.close()
    with pytest.raises(EmitterNotRunning, match="closed"):
        await never_started.start()


async def test_sends_racing_close_are_delivered_or_rejected(
    broker: EmbeddedBroker, topic: str
) -> None:
    em = emitter(broker, topic)
    await em.start()
    events = [em.build("message", f"c{i}", {"role": "user", "content": str(i)}) for i in range(30)]
    results = await asyncio.gather(
        *(em.send(e) for e in events[:15]),
        em.close(),
        *(em.send(e) for e in events[15:]),
        return_exceptions=True,
    )
    accepted = [e for e, r in zip(events, results[:15] + results[16:], strict=True) if r is None]
    rejected = [r for r in results if isinstance(r, EmitterNotRunning)]
    assert results[15] is None and len(accepted) + len(rejected) == 30 and len(rejected) >= 15
    assert_round_trip(await consume(broker.bootstrap, topic, len(accepted)), accepted)


async def test_helpers_fill_ids_timestamps_and_defaults(broker: EmbeddedBroker, topic: str) -> None:
    plus2 = timezone(timedelta(hours=2))
    clock = FixedClock(datetime(2025, 3, 1, 14, 0, tzinfo=plus2))
    async with emitter(broker, topic, context=CONTEXT, clock=clock.now) as em:
        events = [await em.message("c", "assistant", "x", confidence=1) for _ in range(50)]
        other = Agent(id="other-bot")
        override = await em.outcome(
            "c",
            True,
            agent=other,
            context=Context(tier=3),
            event_id="my-id",
            ts=T0 + timedelta(days=2),
        )
    ids = [e.event_id for e in events]
    assert len(set(ids)) == 50
    assert all(len(i) == 32 and uuid.UUID(hex=i).version == 7 for i in ids)
    assert all(abs(int(i[:12], 16) / 1000 - time.time()) < 60 for i in ids)  # UUIDv7 ms prefix
    for e in events:
        assert e.ts == T0 and e.ts.utcoffset() == timedelta(0)  # 14:00+02:00 -> 12:00 UTC
        assert e.agent == AGENT and e.context == CONTEXT and e.message is not None
        assert e.message.confidence == 1.0
    assert (override.event_id, override.agent) == ("my-id", other)
    assert override.context == Context(tier=3)
    assert override.ts == T0 + timedelta(days=2) and override.outcome is not None
    assert override.outcome.source == "ground_truth"

    bare = EventEmitter(broker.bootstrap, topic, idempotent=False)
    with pytest.raises(ValueError, match="no agent"):
        bare.build("feedback", "c", {"score": 1.0, "source": "x"})
    naive = EventEmitter(broker.bootstrap, topic, agent=AGENT, clock=lambda: datetime(2025, 1, 1))
    with pytest.raises(ValueError, match="timezone-aware"):
        naive.build("feedback", "c", {"score": 1.0, "source": "x"})
    with pytest.raises(InvalidEvent) as bad:
        await emitter(broker, topic).escalation("c", "threshold", confidence=1.5)
    assert (bad.value.reason, bad.value.field) == ("out_of_range", "escalation.confidence")


async def test_send_validates_its_argument(broker: EmbeddedBroker, topic: str) -> None:
    async with emitter(broker, topic) as em:
        with pytest.raises(TypeError, match="AgentEvent"):
            await em.send({"type": "message"})  # type: ignore[arg-type]
        with pytest.raises(InvalidEvent) as big:
            await em.message("c", "assistant", "x" * (300 * 1024))
        assert big.value.reason == "oversize"
        assert em.pending == 0


async def test_idempotent_producer_against_tansu_fails_clearly(broker: EmbeddedBroker) -> None:
    em = EventEmitter(broker.bootstrap, "any", agent=AGENT)  # idempotent=True is the default
    with pytest.raises(EmitterError, match="idempotent=False"):
        await em.start()
    with pytest.raises(EmitterNotRunning, match="not started"):
        await em.message("c", "user", "x")


@pytest.mark.slow  # seconds of waiting or sampling: make test, not make check
async def test_failed_deliveries_are_counted_once(tmp_path: Path) -> None:
    with EmbeddedBroker(log_path=tmp_path / "tansu.log") as doomed:
        em = EventEmitter(
            doomed.bootstrap, "t", idempotent=False, agent=AGENT, request_timeout_ms=800
        )
        await em.start()
        await em.message("c0", "user", "delivered")
        await em.flush()
    lost = [await em.message("c0", "user", f"lost {i}") for i in range(3)]
    with pytest.raises(DeliveryError, match="3 event") as failed:
        await em.flush()
    assert failed.value.failed == 3
    assert {e.event_id for e in failed.value.events} == {e.event_id for e in lost}
    assert len(failed.value.errors) == 3
    await em.flush()  # already reported: does not raise again
    await em.close()


@pytest.mark.slow  # seconds of waiting or sampling: make test, not make check
async def test_a_buffer_that_never_drains_fails_the_send_clearly(tmp_path: Path) -> None:
    with EmbeddedBroker(log_path=tmp_path / "tansu.log") as doomed:
        em = EventEmitter(
            doomed.bootstrap,
            "t",
            idempotent=False,
            agent=AGENT,
            request_timeout_ms=800,
            buffer_bytes=1,
        )
        await em.start()
        await em.message("c0", "user", "delivered")
        await em.flush()
    queued = await em.message("c0", "user", "fills the buffer")
    with pytest.raises(EmitterError, match=r"not queued.*unacknowledged after 0\.8 s"):
        await em.message("c0", "user", "no room")
    with pytest.raises(DeliveryError, match="1 event") as failed:
        await em.close()
    assert [e.event_id for e in failed.value.events] == [queued.event_id]


def run_threads(em: SyncEventEmitter, per_thread: int) -> list[AgentEvent]:
    sent: list[AgentEvent] = []
    lock = threading.Lock()

    def work(name: str) -> None:
        for i in range(per_thread):
            event = em.message(f"{name}-{i % 3}", "assistant", f"{name} {i}", turn=i)
            with lock:
                sent.append(event)
            if i == per_thread // 2:
                em.flush()

    threads = [threading.Thread(target=work, args=(n,)) for n in ("a", "b")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return sent


def sdk_threads() -> set[threading.Thread]:
    return {t for t in threading.enumerate() if t.name == "monitor-sdk"}


async def test_sync_emitter_from_two_threads(broker: EmbeddedBroker, topic: str) -> None:
    before = sdk_threads()
    em = SyncEventEmitter(broker.bootstrap, topic, idempotent=False, agent=AGENT)
    with pytest.raises(EmitterNotRunning, match="not started"):
        em.flush()
    await asyncio.to_thread(em.start)
    sent = await asyncio.to_thread(run_threads, em, 25)
    await asyncio.to_thread(em.flush)
    assert em.pending == 0
    await asyncio.to_thread(em.close)
    await asyncio.to_thread(em.close)  # idempotent
    with pytest.raises(EmitterNotRunning, match="closed"):
        em.send(sent[0])
    assert_round_trip(await consume(broker.bootstrap, topic, 50), sent)
    assert sdk_threads() == before  # the loop thread is gone


def sync_lifecycle(bootstrap: str, topic: str) -> AgentEvent:
    with pytest.raises(EmitterError, match="idempotent=False"):
        SyncEventEmitter(bootstrap, topic, agent=AGENT).start()
    with SyncEventEmitter(bootstrap, topic, idempotent=False, agent=AGENT, linger_ms=300) as em:
        return em.feedback("c", 0.5, "thumbs")  # not flushed: leaving the block closes


async def test_sync_context_manager_closes_and_failed_start_cleans_up(
    broker: EmbeddedBroker, topic: str
) -> None:
    before = sdk_threads()
    event = await asyncio.to_thread(sync_lifecycle, broker.bootstrap, topic)
    assert_round_trip(await consume(broker.bootstrap, topic, 1), [event])
    assert sdk_threads() == before
