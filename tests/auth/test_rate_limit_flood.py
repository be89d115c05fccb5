"""Floods past the request rates, on the real stack (a worker and a gate process, a real broker
and Postgres): ``POST /v1/events``, ``/v1/traces`` (the worker) and ``/v1/gate`` (the gate
process) answered 429 with ``Retry-After`` once a key's bucket is empty, while another key is
served as before; every refused request re-sent after its ``Retry-After`` (and some accepted
ones re-sent as a client that lost the answer would) ends stored exactly once. Then the SDK's
gate client against the real gate process: a 429 raises ``GateRateLimited`` and nothing is
sent until ``Retry-After`` has passed."""

from __future__ import annotations

import asyncio
import json
import time
import zlib
from pathlib import Path
from typing import Any

import httpx
import pytest

from monitor.auth import repo
from monitor.sdk import Agent, GateRateLimited, SyncEventEmitter
from monitor.store.engine import make_engine
from tests.db import fetch
from tests.factories import event_dict
from tests.gate.test_gate_server import labelled
from tests.servers.worker import WorkerProcess, count, running_gate_worker, wait_for_count

POLICY = """\
version: "flood-1"
rules:
  - agent: "*"
    threshold: 0.5
    deadline_ms: 10000
"""
RATE, BURST = "1", "5"  # per key and endpoint class: 5 at once, then one a second
FLOOD = 20  # requests sent at once by the flooding key, per endpoint


async def issue(url: str, agents: list[str]) -> str:
    engine = make_engine(url)
    try:
        async with engine.begin() as conn:
            _, secret = await repo.issue(conn, agents, ["write", "gate"], name="flood")
    finally:
        await engine.dispose()
    return secret


@pytest.fixture
async def stack(broker: Any, topic_name: str, database_url: str, tmp_path: Path) -> Any:
    loud = await issue(database_url, ["loud-*"])
    calm = await issue(database_url, ["calm-*"])
    async with running_gate_worker(
        broker.bootstrap,
        database_url,
        topic_name,
        tmp_path,
        POLICY,
        MONITOR_HTTP_INGEST_RATE_PER_S=RATE,
        MONITOR_HTTP_INGEST_RATE_BURST=BURST,
        MONITOR_HTTP_GATE_RATE_PER_S=RATE,
        MONITOR_HTTP_GATE_RATE_BURST=BURST,
        MONITOR_KEYS_MISS_REFRESH_S="0.2",
    ) as worker:
        yield worker, loud, calm


def bearer(secret: str, content_type: str = "application/json") -> dict[str, str]:
    return {"Authorization": f"Bearer {secret}", "Content-Type": content_type}


def events_body(agent: str, i: int) -> bytes:
    """Request ``i`` of ``agent``: two events of its own conversation."""
    return json.dumps(
        [event_dict(f"{agent}-e{i}-{k}", f"{agent}-c{i}", at=k, agent=agent) for k in range(2)]
    ).encode()


def traces_body(agent: str, i: int) -> bytes:
    """Request ``i`` of ``agent``: one LLM span, a trace of its own (a root: mapped at once)."""
    span = {
        "traceId": f"{zlib.crc32(agent.encode()):08x}{i:024x}",
        "spanId": f"{i + 1:016x}",
        "name": "chat m",
        "startTimeUnixNano": "1700000000000000000",
        "endTimeUnixNano": "1700000001000000000",
        "attributes": [
            {"key": "gen_ai.operation.name", "value": {"stringValue": "chat"}},
            {"key": "monitor.confidence", "value": {"doubleValue": 0.8}},
        ],
    }
    resource = {"attributes": [{"key": "service.name", "value": {"stringValue": agent}}]}
    return json.dumps(
        {"resourceSpans": [{"resource": resource, "scopeSpans": [{"spans": [span]}]}]}
    ).encode()


def gate_body(agent: str, i: int) -> bytes:
    return json.dumps(
        {
            "conversation_id": f"{agent}-g{i}",
            "agent": {"id": agent},
            "content": "Done.",
            "confidence": 0.9,
            "request_id": f"{agent}-r{i}",
        }
    ).encode()


async def flood(
    client: httpx.AsyncClient, url: str, body: Any, secret: str, agent: str, ok: int
) -> tuple[list[int], list[int]]:
    """``FLOOD`` requests of ``agent`` at once; (accepted ids, refused ids). Every refusal is a
    429 with ``Retry-After`` of at least a second and the endpoint's error shape."""
    traces = url.endswith("/v1/traces")
    headers = bearer(secret)

    async def one(i: int) -> tuple[int, httpx.Response]:
        return i, await client.post(url, content=body(agent, i), headers=headers)

    answers = await asyncio.gather(*(one(i) for i in range(FLOOD)))
    accepted, refused = [], []
    for i, r in answers:
        if r.status_code == ok:
            accepted.append(i)
            continue
        assert r.status_code == 429, (url, r.status_code, r.text)
        assert int(r.headers["Retry-After"]) >= 1, r.headers
        if traces:  # OTLP's google.rpc.Status, in the request's encoding (JSON here)
            assert r.json()["code"] == 8 and "rate limit" in r.json()["message"], r.text
        else:
            assert r.json()["reason"] == "rate_limited", r.text
        refused.append(i)
    return accepted, refused


async def resend(
    client: httpx.AsyncClient, url: str, body: Any, secret: str, agent: str, ids: list[int], ok: int
) -> int:
    """Re-send each of ``ids`` until accepted, waiting what each 429's ``Retry-After`` says;
    returns the 429s met on the way."""
    refusals = 0
    for i in ids:
        for _ in range(60):
            r = await client.post(url, content=body(agent, i), headers=bearer(secret))
            if r.status_code == ok:
                break
            assert r.status_code == 429, r.text
            refusals += 1
            await asyncio.sleep(float(r.headers["Retry-After"]))
        else:
            raise AssertionError(f"{url} request {i} never accepted")
    return refusals


async def test_floods_get_429_with_retry_after_others_are_served_nothing_is_stored_twice(
    stack: Any, database_url: str
) -> None:
    worker, loud, calm = stack
    endpoints = {
        "events": (f"{worker.url}/v1/events", events_body, 202),
        "traces": (f"{worker.url}/v1/traces", traces_body, 200),
        "gate": (f"{worker.gate_url}/v1/gate", gate_body, 200),
    }
    refusals = {"events": 0, "traces": 0, "gate": 0}
    async with httpx.AsyncClient(timeout=30) as client:
        for name, (url, body, ok) in endpoints.items():
            accepted, refused = await flood(client, url, body, loud, "loud-a", ok)
            assert refused and 1 <= len(accepted) <= int(BURST) + 2, (name, accepted)
            refusals[name] += len(refused)
            # the other key is served at once, whatever the flood did to the first one's bucket
            r = await client.post(url, content=body("calm-b", 0), headers=bearer(calm))
            assert r.status_code == ok, (name, r.text)
            # the refused requests, re-sent after Retry-After; accepted ones re-sent as by a
            # client that lost the answer (not the gate's: its decision id names one decision)
            again = refused + (accepted[:2] if name != "gate" else [])
            refusals[name] += await resend(client, url, body, loud, "loud-a", again, ok)
            if name == "events":  # /v1/events and /v1/traces share the key's bucket
                await asyncio.sleep(int(BURST) / float(RATE))

    # every request ends stored exactly once: 2 events per events request, one span's events
    # per traces request, one decision event per gate request
    def stored(sql_where: str) -> str:
        return (
            f"SELECT count(*) AS n, count(DISTINCT event_id) AS ids FROM events WHERE {sql_where}"
        )

    want = {
        "events": ("agent_id = 'loud-a' AND event_id LIKE 'loud-a-e%'", 2 * FLOOD),
        "gate": ("type = 'gate' AND conversation_id LIKE 'loud-a-g%'", FLOOD),
    }
    for name, (where, n) in want.items():
        sql = f"SELECT count(*) FROM events WHERE {where}"
        assert await wait_for_count(database_url, n, sql, timeout=120, stable_s=2.0) == n, name
        rows = await fetch(database_url, stored(where))
        assert (rows[0]["n"], rows[0]["ids"]) == (n, n), (name, dict(rows[0]))
    spans = (
        "SELECT count(DISTINCT split_part(event_id, ':', 3)) FROM events"
        " WHERE agent_id = 'loud-a' AND event_id LIKE 'otel:%'"
    )
    assert await wait_for_count(database_url, FLOOD, spans, timeout=120, stable_s=2.0) == FLOOD
    rows = await fetch(database_url, stored("agent_id = 'loud-a' AND event_id LIKE 'otel:%'"))
    assert rows[0]["n"] == rows[0]["ids"] >= FLOOD, dict(rows[0])
    # the calm key's three requests, stored
    calm_sql = "SELECT count(DISTINCT conversation_id) FROM events WHERE agent_id = 'calm-b'"
    assert await wait_for_count(database_url, 3, calm_sql, timeout=60) >= 3
    assert await count(database_url, "SELECT count(*) FROM dead_letters") == 0
    # every 429 counted where it was answered
    assert worker.gate is not None
    for process, path, n in (
        (worker, "/v1/events", refusals["events"]),
        (worker, "/v1/traces", refusals["traces"]),
        (worker.gate, "/v1/gate", refusals["gate"]),
    ):
        got = labelled(process, "monitor_http_client_errors_total", path=path, status="429")
        assert got == n, (path, got, n)


def gate_answers(process: WorkerProcess) -> float:
    """Every gate request the process answered, whatever the result (decision or refusal)."""
    text = httpx.get(f"{process.url}/metrics", timeout=10).text
    return sum(
        float(line.split()[-1])
        for line in text.splitlines()
        if line.startswith("monitor_gate_answers_total{")
    )


async def test_the_sdk_waits_out_retry_after_against_the_real_gate(stack: Any) -> None:
    worker, loud, _ = stack
    assert worker.gate is not None
    em = SyncEventEmitter(  # no start(): the gate is HTTP, not Kafka
        "127.0.0.1:1", agent=Agent(id="loud-sdk"), gate_url=worker.gate_url, gate_token=loud
    )
    try:
        first: GateRateLimited | None = None
        for i in range(int(BURST) + 5):  # one past the bucket is enough
            try:
                assert em.gate(f"sdk-{i}", "Done.", confidence=0.9).decision == "proceed"
            except GateRateLimited as exc:
                first = exc
                break
        assert first is not None and first.status == 429 and first.reason == "rate_limited"
        assert first.retry_after_s >= 1.0
        # while Retry-After runs, the client sends nothing: refused locally, at once
        sent = gate_answers(worker.gate)
        t0 = time.monotonic()
        with pytest.raises(GateRateLimited) as held:
            em.gate("sdk-held", "Done.", confidence=0.9)
        assert time.monotonic() - t0 < 0.5  # no round trip (and no request, below)
        assert held.value.reason == "retry_after"
        assert 0 < held.value.retry_after_s <= first.retry_after_s
        assert gate_answers(worker.gate) == sent  # the gate saw no request
        # once it has passed, the next call is sent and answered (the bucket refilled a token)
        await asyncio.sleep(held.value.retry_after_s + 0.05)
        assert em.gate("sdk-after", "Done.", confidence=0.9).decision == "proceed"
        assert gate_answers(worker.gate) == sent + 1
    finally:
        em.close()
