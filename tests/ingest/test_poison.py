"""No single event stops ingest: poison of every class produced to Kafka between good events.

The real broker and Postgres; the in-process ingest loop. Every good event must be stored once,
every poison event must be in the dead-letter table (and the DLQ topic) once, with its reason.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections import Counter
from datetime import UTC, datetime

import asyncpg
import pytest

from monitor.alerts.observations import observe
from monitor.alerts.rules import default_rules
from monitor.ingest.health import IngestHealth
from monitor.ingest.loop import IngestConfig, IngestLoop
from monitor.ingest.writer import EventWriter
from monitor.store.engine import libpq_url, make_engine
from monitor.store.store_errors import is_transient
from tests.factories import event_dict
from tests.ingest.test_ingest_loop import produce, wait_count
from tests.servers.worker import read_topic

STORE_POISON_AGENT = "store-poison"
CHECK = f"ALTER TABLE events ADD CONSTRAINT poison_check CHECK (agent_id <> '{STORE_POISON_AGENT}')"


def deep(levels: int) -> object:
    value: object = 1
    for _ in range(levels):
        value = [value]
    return value


def poison_events() -> dict[str, list[bytes]]:
    """Poison by expected dead-letter reason (each one a separate Kafka record)."""
    nul = event_dict("p-nul", "pc", content="bad\x00byte")
    nul_key = {**event_dict("p-nulkey", "pc"), "attributes": {"k\x00ey": "v"}}
    big_turn = event_dict("p-turn", "pc", turn=2**31)
    past = {**event_dict("p-past", "pc"), "ts": "0001-01-01T00:00:00+05:00"}
    far = {**event_dict("p-far", "pc"), "ts": "9999-12-31T23:00:00-05:00"}
    future = {**event_dict("p-future", "pc"), "ts": "2099-01-01T00:00:00+00:00"}
    nested = {**event_dict("p-deep", "pc"), "attributes": {"x": deep(80)}}
    surrogate = json.dumps(event_dict("p-sur", "pc", content="@@")).replace("@@", "\\ud800")
    return {
        "invalid_character": [json.dumps(nul).encode(), json.dumps(nul_key).encode()],
        "out_of_range": [json.dumps(x).encode() for x in (big_turn, past, far)],
        "future_timestamp": [json.dumps(future).encode()],
        "too_deep": [json.dumps(nested).encode()],
        "not_json": [surrogate.encode()],
        "oversize": [json.dumps(event_dict("p-big", "pc", content="x" * 600_000)).encode()],
        "store_rejected": [
            json.dumps(event_dict(f"p-store-{i}", "pc", agent=STORE_POISON_AGENT)).encode()
            for i in range(2)
        ],
        "conflicting_duplicate": [
            json.dumps(event_dict("ok-3", "c-0", content="changed")).encode()
        ],
    }


async def test_poison_of_every_class_between_good_events(broker, topic_name: str, database_url):
    dlq = f"{topic_name}.dlq"
    good = [event_dict(f"ok-{i}", f"c-{i % 4}", at=i, turn=i) for i in range(60)]
    poison = poison_events()
    flat = [(reason, raw) for reason, raws in poison.items() for raw in raws]
    items: list[tuple[bytes | None, bytes]] = []
    for i, ev in enumerate(good):
        items.append((b"k", json.dumps(ev).encode()))
        if i % 4 == 3 and flat:
            items.append((b"k", flat.pop(0)[1]))
    items.append((b"k", json.dumps(good[5]).encode()))  # an identical duplicate: absorbed
    assert not flat
    conn = await asyncpg.connect(libpq_url(database_url))
    await conn.execute(CHECK)  # a store rule the contract does not know: only Postgres refuses
    await produce(broker.bootstrap, topic_name, items)

    writer = EventWriter(database_url)
    config = IngestConfig(
        broker.bootstrap,
        topic_name,
        dlq,
        f"g-{topic_name}",
        batch_max_events=500,
        idempotent_producer=False,
    )
    loop = IngestLoop(config, writer)
    task = asyncio.create_task(loop.run())
    n_poison = sum(len(v) for v in poison.values())
    try:
        assert await wait_count(database_url, "SELECT count(*) FROM events", 60) == 60
        assert await wait_count(database_url, "SELECT count(*) FROM dead_letters", n_poison) == (
            n_poison
        )
        await asyncio.sleep(1.0)  # nothing more arrives later (no duplicate write)
    finally:
        await loop.stop()
        await task
        await writer.close()
    try:
        stored = await conn.fetch("SELECT event_id, body FROM events ORDER BY event_id")
        dead = await conn.fetch("SELECT reason, field, detail, source_offset FROM dead_letters")
        convs = await conn.fetch("SELECT sum(event_count) FROM conversations")
    finally:
        await conn.close()
    assert sorted(r["event_id"] for r in stored) == sorted(e["event_id"] for e in good)
    assert int(convs[0][0]) == 60  # the roll-up counted each good event once
    ok3 = next(r for r in stored if r["event_id"] == "ok-3")
    assert json.loads(ok3["body"])["message"]["content"] == "ok"  # the first body stays
    assert Counter(r["reason"] for r in dead) == {k: len(v) for k, v in poison.items()}
    by_reason = {r["reason"]: r for r in dead}
    assert by_reason["store_rejected"]["detail"].startswith("23514 ")
    assert "poison_check" in by_reason["store_rejected"]["detail"]
    fields = {r["field"] for r in dead if r["reason"] == "invalid_character"}
    assert fields == {"message.content", "attributes.k\\u0000ey"}  # stored, NUL escaped
    assert "9999-12-30" in next(r["detail"] for r in dead if r["detail"].endswith("-05:00"))
    metrics = loop.metrics.render().decode()
    assert "monitor_events_conflicting_total 1.0" in metrics
    assert 'monitor_events_invalid_total{reason="store_rejected"} 2.0' in metrics

    # the DLQ topic holds each dead letter once (conflicts live in the table only)
    recs = await read_topic(broker.bootstrap, dlq, max_records=1000)
    reasons = Counter(dict(r.headers)["reason"].decode() for r in recs)
    assert reasons == {k: len(v) for k, v in poison.items() if k != "conflicting_duplicate"}
    big = next(r for r in recs if dict(r.headers)["reason"] == b"oversize")
    headers = dict(big.headers)
    assert len(big.value) == 4096 and headers["truncated"] == b"true"
    assert headers["sha256"] == hashlib.sha256(poison["oversize"][0]).hexdigest().encode()
    assert int(headers["original_bytes"]) == len(poison["oversize"][0])


async def test_store_errors_are_classified_from_real_failures(database_url: str):
    conn = await asyncpg.connect(libpq_url(database_url))
    try:
        with pytest.raises(asyncpg.PostgresError) as nul:
            await conn.execute("SELECT $1::text", "a\x00b")
        with pytest.raises(asyncpg.PostgresError) as missing:
            await conn.execute("SELECT * FROM no_such_table")
        with pytest.raises(asyncpg.DataError) as overflow:  # an InterfaceError and ValueError
            await conn.execute("SELECT $1::int4", 2**40)
        with pytest.raises(asyncpg.PostgresError) as range_:
            await conn.execute("SELECT ($1::int8 * 1000000000000)::int4", 10)
        ts = datetime(1, 1, 1, tzinfo=UTC)
        await conn.execute("SELECT $1::timestamptz", ts)  # the contract's bound stays storable
    finally:
        await conn.close()
    assert not is_transient(nul.value)  # 22021 / 22P05: poison, isolated by bisection
    assert not is_transient(overflow.value)  # asyncpg could not encode the value
    assert not is_transient(range_.value)  # 22003
    assert is_transient(missing.value)  # 42P01: a deployment problem, never dead-letter for it
    with pytest.raises(OSError) as refused:
        await asyncpg.connect("postgresql://postgres@127.0.0.1:1/x", timeout=5)
    assert is_transient(refused.value)


def test_health_contract_and_stall_metric() -> None:
    now = [100.0]
    health = IngestHealth(lambda: now[0], stall_after_s=60)
    assert health.status() == (False, "starting", "the ingest consumer is not subscribed yet")
    health.ready = True
    now[0] += 600
    health.idle()  # quiet with no lag: healthy however long
    assert health.status() == (True, "ok", "") and health.stalled_seconds() == 0
    health.lag = 5
    now[0] += 61
    ok, state, reason = health.status()
    assert (ok, state) == (False, "stalled") and "consumer lag 5" in reason
    assert health.stalled_seconds() == 61
    health.wrote()
    assert health.status()[0] and health.stalled_seconds() == 0
    health.commit_failures, health.last_error = 3, "offset commit: KafkaTimeoutError"
    assert health.status()[1] == "commits_failing"


async def test_default_stall_rule_fires_from_the_stall_source(database_url: str) -> None:
    rules = default_rules()
    stall_only = rules.model_copy(update={"rules": (rules.rule("ingest_stalled"),)})
    engine = make_engine(database_url)
    try:
        now = datetime(2026, 3, 1, tzinfo=UTC)
        assert await observe(engine, stall_only, now) == []  # no source: no observation
        (obs,) = await observe(engine, stall_only, now, stall=lambda: 300.0)
        assert obs.value == 300.0 and stall_only.rules[0].breached(obs.value)
        (quiet,) = await observe(engine, stall_only, now, stall=lambda: 0.0)
        assert not stall_only.rules[0].breached(quiet.value)
    finally:
        await engine.dispose()
