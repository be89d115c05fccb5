"""Poison through HTTP into the real worker, a fuzz corpus on the endpoint, and /health on a stall.

The worker runs as a subprocess against the real broker and Postgres. The store gets a CHECK
constraint the contract does not know, so some accepted events are refused by Postgres alone.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from pathlib import Path

import asyncpg
import httpx
import pytest

from monitor.store.engine import libpq_url
from tests.factories import event_dict
from tests.ingest.test_poison import CHECK, STORE_POISON_AGENT, deep
from tests.servers.worker import (
    QUIET,
    WorkerProcess,
    count,
    running_worker,
    wait_for_count,
)

AUTH = {"Authorization": "bearer s3cret"}  # the scheme is case-insensitive
LIMIT = 4 * 1024 * 1024


@pytest.fixture
async def worker(broker, topic_name: str, database_url: str, tmp_path: Path):
    conn = await asyncpg.connect(libpq_url(database_url))
    try:
        await conn.execute(CHECK)
    finally:
        await conn.close()
    async with running_worker(
        broker.bootstrap,
        database_url,
        topic_name,
        tmp_path,
        MONITOR_INGEST_TOKEN="s3cret",
        MONITOR_HTTP_MAX_BODY_BYTES=str(LIMIT),
        MONITOR_HEALTH_STALL_S="2",
        **QUIET,
    ) as w:
        yield w


def fuzz_corpus(seed: int = 14, n: int = 250) -> list[bytes]:
    """Bodies derived from valid ones: flipped bytes, cuts, odd tokens, deep nesting."""
    rng = random.Random(seed)
    base = [
        json.dumps([event_dict("f-1", "fz"), event_dict("f-2", "fz", etype="outcome")]).encode(),
        json.dumps(event_dict("f-3", "fz"), indent=2).encode(),
        "\n".join(json.dumps(event_dict(f"f-{i}", "fz")) for i in range(4, 7)).encode(),
    ]
    tokens = [
        b"\\u0000",
        b"\\ud800",
        b"NaN",
        b"1e400",
        b"-0",
        b"99999999999999999999",
        b"\x00",
        b"\xff",
        b"[[[[[[[[",
        b"{",
        b"}",
        b'"',
        b"\\",
        b"\n",
        b"null",
        b"\xed\xa0\x80",
    ]
    out = [b"[" * 5000, b"{" * 5000, b'{"a":' * 3000, json.dumps(deep(300)).encode()]
    out.append(b"\xef\xbb\xbf{}")
    while len(out) < n:
        body = bytearray(rng.choice(base))
        for _ in range(rng.randint(1, 4)):
            pos = rng.randrange(len(body))
            action = rng.random()
            if action < 0.4:
                body[pos:pos] = rng.choice(tokens)
            elif action < 0.7:
                body[pos] = rng.randrange(256)
            else:
                del body[pos : pos + rng.randint(1, 20)]
        out.append(bytes(body))
    return out


async def test_http_poison_fuzz_and_limits(worker: WorkerProcess, database_url: str):
    url = f"{worker.url}/v1/events"
    good = [event_dict(f"g-{i}", "hg", at=i, turn=i) for i in range(6)]
    poison = [
        event_dict("hp-nul", "hp", content="a\x00b"),
        event_dict("hp-turn", "hp", turn=2**31),
        {**event_dict("hp-past", "hp"), "ts": "0001-01-01T00:00:00+05:00"},
        {**event_dict("hp-future", "hp"), "ts": "2099-01-01T00:00:00Z"},
        {**event_dict("hp-deep", "hp"), "attributes": {"x": deep(80)}},
    ]
    store_poison = [event_dict(f"hs-{i}", "hs", agent=STORE_POISON_AGENT) for i in range(2)]
    mixed = [good[0], poison[0], good[1], *store_poison, poison[1], good[2], *poison[2:]]
    async with httpx.AsyncClient(timeout=60) as client:
        r = await client.post(url, json=mixed, headers=AUTH)
        assert r.status_code == 207, r.text
        verdicts = {
            x["event_id"] if x["status"] == "accepted" else x["index"]: x
            for x in r.json()["results"]
        }
        reasons = [verdicts[i]["reason"] for i in (1, 5, 7, 8, 9)]
        assert reasons == [
            "invalid_character",
            "out_of_range",
            "out_of_range",
            "future_timestamp",
            "too_deep",
        ]
        # a pretty-printed single object; NDJSON with the rest of the good events
        r = await client.post(url, content=json.dumps(good[3], indent=2), headers=AUTH)
        assert r.status_code == 202, r.text
        ndjson = "\n".join(json.dumps(e) for e in good[4:])
        assert (await client.post(url, content=ndjson, headers=AUTH)).status_code == 202
        # above aiohttp's 1 MiB default, below the configured limit: accepted
        filler = [event_dict(f"big-{i}", "hb", content="y" * 9000) for i in range(200)]
        r = await client.post(url, json=filler, headers=AUTH)
        assert r.status_code == 202, r.text[:300]
        over = b"[" + b" " * LIMIT + b"]"
        r = await client.post(url, content=over, headers=AUTH)
        assert r.status_code == 413 and "error" in r.json()
        statuses = []
        for body in fuzz_corpus():
            r = await client.post(url, content=body, headers=AUTH)
            assert r.status_code < 500, (body[:200], r.status_code, r.text[:200])
            assert isinstance(r.json(), dict)
            statuses.append(r.status_code)
        assert {400, 422} <= set(statuses)

    want = len(good) + len(store_poison) + len(filler)  # store poison is accepted, then refused
    n_good = len(good) + len(filler)
    sql = "SELECT count(*) FROM events WHERE conversation_id IN ('hg', 'hb')"
    assert await wait_for_count(database_url, n_good, sql, stable_s=1.0) == n_good
    rejected = "SELECT count(*) FROM dead_letters WHERE reason = 'store_rejected'"
    assert await wait_for_count(database_url, 2, rejected, stable_s=1.0) == 2
    assert (
        await count(
            database_url, f"SELECT count(*) FROM events WHERE agent_id = '{STORE_POISON_AGENT}'"
        )
        == 0
    )
    assert want == n_good + 2
    assert (await httpx.AsyncClient().get(f"{worker.url}/health")).status_code == 200


async def test_health_goes_503_on_a_stall_and_recovers(worker: WorkerProcess, database_url: str):
    url = f"{worker.url}/v1/events"
    conn = await asyncpg.connect(libpq_url(database_url))
    try:
        async with httpx.AsyncClient(timeout=30) as client:
            body = (await client.get(f"{worker.url}/health")).json()
            assert body["status"] == "ok" and "reason" not in body
            # a transient store failure (42P01: the table is missing): ingest pauses, retries
            await conn.execute("ALTER TABLE events RENAME TO events_away")
            events = [event_dict(f"s-{i}", "stall", at=i) for i in range(5)]
            assert (await client.post(url, json=events, headers=AUTH)).status_code == 202
            deadline = time.monotonic() + 30
            health = await client.get(f"{worker.url}/health")
            while health.status_code == 200 and time.monotonic() < deadline:
                await asyncio.sleep(0.5)
                health = await client.get(f"{worker.url}/health")
            assert health.status_code == 503, health.text
            body = health.json()
            assert body["status"] == "stalled" and "paused" in body["reason"]
            assert "42P01" in body["reason"]
            gauge = [
                ln
                for ln in (await client.get(f"{worker.url}/metrics")).text.splitlines()
                if ln.startswith("monitor_seconds_since_last_write ")
            ]
            assert gauge and float(gauge[0].split()[1]) > 2
            await conn.execute("ALTER TABLE events_away RENAME TO events")
            assert await wait_for_count(database_url, 5, stable_s=0.5) == 5  # nothing lost
            deadline = time.monotonic() + 30
            while (await client.get(f"{worker.url}/health")).status_code != 200:
                assert time.monotonic() < deadline
                await asyncio.sleep(0.3)
    finally:
        await conn.close()
    assert await count(database_url, "SELECT count(*) FROM dead_letters") == 0
