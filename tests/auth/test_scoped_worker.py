"""Scoped API keys through the real worker and gate process (real broker, real Postgres): every
endpoint asks
the authorizer, events of agents outside a key's scope are refused per event, the gate's
decision ids cannot be claimed by ingest (HTTP or Kafka), labels longer than the contract's
bound are refused at the contract on both paths, another agent's outcome is dead-lettered,
and a revoked key is refused once the worker reloads the keys."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

from monitor.auth import repo
from monitor.contract.origin import ORIGIN_HEADER, origin_tag
from monitor.store.engine import make_engine
from tests.db import fetch
from tests.factories import event_dict
from tests.otel.test_otel_e2e import chat_span_json
from tests.servers.worker import running_gate_worker, wait_for_count

POLICY = """\
version: "scopes-1"
rules:
  - agent: "*"
    threshold: 0.5
    below_threshold: escalate
    deadline_ms: 10000
"""


async def issue(url: str, agents: list[str], scopes: list[str]) -> tuple[str, str]:
    engine = make_engine(url)
    try:
        async with engine.begin() as conn:
            key, secret = await repo.issue(conn, agents, scopes, name="test")  # type: ignore[arg-type]
    finally:
        await engine.dispose()
    return key.id, secret


def bearer(secret: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {secret}"}


@pytest.fixture
async def keyed(broker: Any, topic_name: str, database_url: str, tmp_path: Path) -> Any:
    team = await issue(database_url, ["team-a-*"], ["write", "gate", "read"])
    writer = await issue(database_url, ["solo"], ["write"])
    async with running_gate_worker(
        broker.bootstrap,
        database_url,
        topic_name,
        tmp_path,
        POLICY,
        MONITOR_GATE_TOKEN="dev-gate",
        MONITOR_KEYS_REFRESH_S="1",
        MONITOR_KEYS_MISS_REFRESH_S="0.2",
        MONITOR_GATE_ORIGIN_KEY="origin-secret",
    ) as worker:
        yield worker, team, writer


async def dlq_reasons(bootstrap: str, topic: str, n: int) -> list[tuple[str, str]]:
    consumer = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest")
    await consumer.start()
    found: list[tuple[str, str]] = []
    try:
        for _ in range(30):
            for records in (await consumer.getmany(timeout_ms=1000)).values():
                for rec in records:
                    headers = {k: v.decode() for k, v in rec.headers}
                    found.append((headers["reason"], headers["field"]))
            if len(found) >= n:
                break
    finally:
        await consumer.stop()
    return found


def span(agent: str, span_id: str) -> dict[str, Any]:
    return {
        "resource": {"attributes": [{"key": "service.name", "value": {"stringValue": agent}}]},
        "scopeSpans": [{"spans": [chat_span_json(span_id)]}],
    }


async def test_keys_scope_every_endpoint(
    keyed: Any, database_url: str, broker: Any, topic_name: str
) -> None:
    worker, (team_id, team), (solo_id, solo) = keyed
    base = worker.url
    async with httpx.AsyncClient(timeout=30) as client:
        # ingest: per event, in the key's scope or refused with a reason
        batch = [
            event_dict("s-1", "ca", agent="team-a-1"),
            event_dict("s-2", "cb", agent="other"),
            event_dict("gate:rq-1", "ca", agent="team-a-1"),
            event_dict("s-3", "ca", agent="team-a-1", context={"domain": "d" * 3000}),
        ]
        r = await client.post(f"{base}/v1/events", json=batch, headers=bearer(team))
        assert r.status_code == 207, r.text
        results = r.json()["results"]
        assert [x["status"] for x in results] == ["accepted", "rejected", "rejected", "rejected"]
        assert [(x.get("reason"), x.get("field")) for x in results[1:]] == [
            ("out_of_scope", "agent.id"),
            ("reserved_id", "event_id"),
            ("invalid_value", "context.domain"),
        ]
        r = await client.post(
            f"{base}/v1/events", json=[event_dict("s-4", "cc", agent="other")], headers=bearer(team)
        )
        assert r.status_code == 422 and r.json()["results"][0]["reason"] == "out_of_scope"
        for headers in ({}, bearer("mk_not-a-key"), {"Authorization": "Bearer dev-gate"}):
            r = await client.post(f"{base}/v1/events", json=batch[:1], headers=headers)
            assert r.status_code == 401 and r.json()["reason"] == "unauthorized", r.text

        # calibration: a credential is required, and only for the key's agents
        assert (await client.get(f"{base}/v1/calibration/team-a-1")).status_code == 401
        r = await client.get(f"{base}/v1/calibration/other", headers=bearer(team))
        assert r.status_code == 403 and r.json()["reason"] == "out_of_scope"
        r = await client.get(f"{base}/v1/calibration/solo", headers=bearer(solo))
        assert r.status_code == 403 and r.json()["reason"] == "missing_scope"
        r = await client.get(f"{base}/v1/calibration/team-a-1", headers=bearer(team))
        assert r.status_code == 404  # authorized: no map yet

        # gate: the gated agent must be in scope; a key without the gate scope is refused
        ask = {"conversation_id": "ca", "content": "Done.", "confidence": 0.9, "request_id": "rq-1"}
        r = await client.post(
            f"{worker.gate_url}/v1/gate",
            json={**ask, "agent": {"id": "other"}},
            headers=bearer(team),
        )
        assert r.status_code == 403 and r.json()["reason"] == "out_of_scope", r.text
        r = await client.post(
            f"{worker.gate_url}/v1/gate",
            json={**ask, "agent": {"id": "solo"}},
            headers=bearer(solo),
        )
        assert r.status_code == 403 and r.json()["reason"] == "missing_scope"

        # a forged decision id straight on Kafka (no tag, a wrong tag) is dead-lettered ...
        forged = json.dumps(event_dict("gate:rq-1", "ca", agent="team-a-1")).encode()
        long_domain = json.dumps(event_dict("k-long", "ck", context={"segment": "s" * 3000}))
        producer = AIOKafkaProducer(bootstrap_servers=broker.bootstrap)
        await producer.start()
        try:
            await producer.send_and_wait(topic_name, forged, key=b"ca")
            await producer.send_and_wait(
                topic_name,
                forged,
                key=b"ca",
                headers=[(ORIGIN_HEADER, origin_tag(b"guessed", forged))],
            )
            await producer.send_and_wait(topic_name, long_domain.encode(), key=b"ck")
            # a tag under the worker's key is the gate's own: accepted (the key is the secret)
            signed = json.dumps(event_dict("gate:signed", "cs", agent="team-a-1")).encode()
            await producer.send_and_wait(
                topic_name,
                signed,
                key=b"cs",
                headers=[(ORIGIN_HEADER, origin_tag(b"origin-secret", signed))],
            )
        finally:
            await producer.stop()
        sql = "SELECT count(*) FROM dead_letters WHERE reason = 'reserved_id'"
        assert await wait_for_count(database_url, 2, sql, stable_s=0.5) == 2
        # ... so the gate's own decision with that id is stored afterwards
        r = await client.post(
            f"{worker.gate_url}/v1/gate",
            json={**ask, "agent": {"id": "team-a-1"}},
            headers=bearer(team),
        )
        assert r.status_code == 200 and r.json()["decision_id"] == "gate:rq-1", r.text
        sql = "SELECT count(*) FROM events WHERE event_id IN ('gate:rq-1', 'gate:signed')"
        assert await wait_for_count(database_url, 2, sql, stable_s=0.5) == 2
        gate_row = await fetch(database_url, "SELECT type FROM events WHERE event_id = 'gate:rq-1'")
        assert gate_row[0]["type"] == "gate"
        assert not await fetch(
            database_url, "SELECT 1 FROM dead_letters WHERE reason = 'conflicting_duplicate'"
        )
        long_dead = await fetch(
            database_url, "SELECT field FROM dead_letters WHERE reason = 'invalid_value'"
        )
        assert [r["field"] for r in long_dead] == ["context.segment"]
        # the DLQ topic carries the same reasons
        dlq = await dlq_reasons(broker.bootstrap, f"{topic_name}.dlq", 3)
        assert sorted(dlq) == [
            ("invalid_value", "context.segment"),
            ("reserved_id", "event_id"),
            ("reserved_id", "event_id"),
        ]

        # traces: the mapped events of agents outside the key's scope are rejected
        body = {
            "resourceSpans": [
                span("team-a-2", "eee19b7ec3c1b174"),
                span("other", "eee19b7ec3c1b175"),
            ]
        }
        r = await client.post(f"{base}/v1/traces", json=body, headers=bearer(team))
        assert r.status_code == 200, r.text
        partial = r.json()["partialSuccess"]
        assert partial["rejectedSpans"] == "1" and "out_of_scope" in partial["errorMessage"]
        r = await client.post(f"{base}/v1/traces", json=body, headers=bearer("mk_nope"))
        assert r.status_code == 401

        # another agent's outcome for a conversation of team-a-1: dead-lettered, not stored
        r = await client.post(
            f"{base}/v1/events",
            headers=bearer(team),
            json=[event_dict("o-own", "ca", "outcome", at=5, agent="team-a-1", success=True)],
        )
        assert r.status_code == 202
        sql = "SELECT count(*) FROM conversations WHERE outcome_success"
        assert await wait_for_count(database_url, 1, sql, stable_s=0.3) == 1
        r = await client.post(
            f"{base}/v1/events",
            headers=bearer(team),
            json=[event_dict("o-forged", "ca", "outcome", at=9, agent="team-a-9", success=False)],
        )
        assert r.status_code == 202  # in scope: the store refuses it for its conversation
        sql = "SELECT count(*) FROM dead_letters WHERE reason = 'agent_mismatch'"
        assert await wait_for_count(database_url, 1, sql, stable_s=0.3) == 1
        conv = await fetch(
            database_url, "SELECT outcome_success FROM conversations WHERE conversation_id = 'ca'"
        )
        assert conv[0]["outcome_success"] is True

        # a key issued while the worker runs works at once (reload on a miss) ...
        _, late = await issue(database_url, ["late"], ["write"])
        r = await client.post(
            f"{base}/v1/events", headers=bearer(late), json=[event_dict("l-1", "cl", agent="late")]
        )
        assert r.status_code == 202, r.text
        # ... and a revoked one is refused from the next reload
        r = await client.post(
            f"{base}/v1/events",
            headers=bearer(solo),
            json=[event_dict("so-1", "cso", agent="solo")],
        )
        assert r.status_code == 202
        engine = make_engine(database_url)
        try:
            async with engine.begin() as conn:
                assert await repo.revoke(conn, solo_id, datetime.now(UTC)) is not None
        finally:
            await engine.dispose()
        status = 202
        for _ in range(40):
            r = await client.post(
                f"{base}/v1/events",
                headers=bearer(solo),
                json=[event_dict("so-2", "cso", agent="solo")],
            )
            status = r.status_code
            if status == 401:
                break
            await asyncio.sleep(0.25)
        assert status == 401
    assert worker.gate is not None
    for log in (worker.log_path, worker.gate.log_path):  # the worker's and the gate's
        logged = log.read_text(errors="replace")
        assert team not in logged and solo not in logged and late not in logged
    assert team_id.startswith("key_")
