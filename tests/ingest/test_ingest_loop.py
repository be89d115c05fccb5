"""The batched ingest loop in-process against the real broker and Postgres."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterable
from typing import Any

import asyncpg
from aiokafka import AIOKafkaProducer

from monitor.ingest.loop import IngestConfig, IngestLoop
from monitor.ingest.writer import EventWriter
from monitor.store.engine import libpq_url
from tests.factories import event_dict
from tests.servers.worker import read_topic


async def produce(bootstrap: str, topic: str, items: list[tuple[bytes | None, bytes]]) -> None:
    p = AIOKafkaProducer(bootstrap_servers=bootstrap, enable_idempotence=False, acks="all")
    await p.start()
    try:
        for key, value in items:
            await p.send(topic, key=key, value=value)
        await p.flush()
    finally:
        await p.stop()


async def produce_keyed(bootstrap: str, topic: str, events: Iterable[dict[str, Any]]) -> None:
    """``events`` (event dicts) as JSON, each keyed by its conversation id."""
    await produce(
        bootstrap, topic, [(e["conversation_id"].encode(), json.dumps(e).encode()) for e in events]
    )


async def wait_count(url: str, sql: str, want: int, timeout: float = 30) -> int:
    conn = await asyncpg.connect(libpq_url(url))
    try:
        deadline = asyncio.get_running_loop().time() + timeout
        while True:
            n = int(await conn.fetchval(sql))
            if n >= want or asyncio.get_running_loop().time() > deadline:
                return n
            await asyncio.sleep(0.1)
    finally:
        await conn.close()


MALFORMED: dict[str, bytes] = {
    "not_json": b"{nope",
    "wrong_type": json.dumps(event_dict("bad-1", turn="three")).encode(),
    "missing_field": json.dumps(
        {k: v for k, v in event_dict("bad-2").items() if k != "ts"}
    ).encode(),
    "multiple_payloads": json.dumps(
        {**event_dict("bad-3"), "feedback": {"score": 1, "source": "x"}}
    ).encode(),
    "unknown_type": json.dumps({**event_dict("bad-4"), "type": "thought"}).encode(),
    "oversize": json.dumps(event_dict("bad-5", content="x" * (300 * 1024))).encode(),
    "out_of_range": json.dumps(event_dict("bad-6", confidence=1.5)).encode(),
}


async def test_valid_and_malformed_events(broker, topic_name: str, database_url: str):
    dlq = f"{topic_name}.dlq"
    valid = [event_dict(f"ok-{i}", f"conv-{i % 3}", at=i, turn=i) for i in range(30)]
    items: list[tuple[bytes | None, bytes]] = []
    for i, ev in enumerate(valid):
        items.append((ev["conversation_id"].encode(), json.dumps(ev).encode()))
        if i % 4 == 0 and i // 4 < len(MALFORMED):
            items.append((b"x", list(MALFORMED.values())[i // 4]))
    await produce(broker.bootstrap, topic_name, items)

    writer = EventWriter(database_url)
    loop = IngestLoop(
        IngestConfig(
            bootstrap=broker.bootstrap,
            topic=topic_name,
            dlq_topic=dlq,
            group_id=f"g-{topic_name}",
            idempotent_producer=False,
        ),
        writer,
    )
    task = asyncio.create_task(loop.run())
    try:
        assert await wait_count(database_url, "SELECT count(*) FROM events", 30) == 30
        assert await wait_count(database_url, "SELECT count(*) FROM dead_letters", 7) == 7
    finally:
        await loop.stop()
        await task
        await writer.close()

    conn = await asyncpg.connect(libpq_url(database_url))
    try:
        reasons = sorted(r["reason"] for r in await conn.fetch("SELECT reason FROM dead_letters"))
        convs = await conn.fetch(
            "SELECT conversation_id, event_count FROM conversations ORDER BY 1"
        )
    finally:
        await conn.close()
    assert reasons == sorted(MALFORMED)
    assert [(r["conversation_id"], r["event_count"]) for r in convs] == [
        ("conv-0", 10),
        ("conv-1", 10),
        ("conv-2", 10),
    ]
    text = loop.metrics.render().decode()
    assert "monitor_events_written_total 30.0" in text
    assert 'monitor_events_invalid_total{reason="oversize"} 1.0' in text

    # the DLQ topic holds the original bytes with the reason in the headers
    recs = await read_topic(broker.bootstrap, dlq)
    by_reason = {dict(r.headers)["reason"].decode(): r.value for r in recs}
    assert by_reason == MALFORMED
