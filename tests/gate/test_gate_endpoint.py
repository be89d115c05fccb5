"""POST /v1/gate through the real gate process beside a real worker: auth, 4xx reasons,
decisions from the maps it holds, and the decision events stored in Postgres (by the worker's
ingest) and joined with the conversation's late outcome."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from monitor.analytics.recalibration import fit_isotonic
from monitor.analytics.write import save_map
from monitor.store.engine import make_engine
from tests.db import fetch
from tests.factories import event_dict
from tests.gate.test_decide import FAILED_CANCEL
from tests.servers.worker import WorkerProcess, metric, running_gate_worker

POLICY = """\
version: "test-7"
rules:
  - agent: agent-a
    threshold: 0.7
    below_threshold: escalate
    on_check_failure: revise
    deadline_ms: 10000  # not a timing test: a loaded CI machine must not turn checks fail-open
"""
AUTH = {"Authorization": "Bearer g4te"}


@pytest.fixture
async def gate_worker(broker: Any, topic_name: str, database_url: str, tmp_path: Path) -> Any:
    async with running_gate_worker(
        broker.bootstrap,
        database_url,
        topic_name,
        tmp_path,
        POLICY,
        MONITOR_GATE_TOKEN="g4te",
        MONITOR_GATE_REFRESH_S="0.5",
        MONITOR_GATE_MAX_CONTENT_CHARS="2000",
        MONITOR_INGEST_TOKEN="s3cret",
    ) as worker:
        yield worker


def ask(**over: Any) -> dict[str, Any]:
    return {
        "conversation_id": "g-1",
        "agent": {"id": "agent-a"},
        "content": "Let me check.",
        "confidence": 0.9,
        "domain": "retail",
        **over,
    }


async def test_gate_answers_and_records_every_decision(
    gate_worker: WorkerProcess, database_url: str
) -> None:
    url = f"{gate_worker.gate_url}/v1/gate"
    async with httpx.AsyncClient(timeout=30) as client:
        # before any map: the stated confidence decides, calibrated false
        r = await client.post(url, json=ask(request_id="r0"), headers=AUTH)
        assert r.status_code == 200, r.text
        first = r.json()
        assert (first["decision"], first["calibrated"], first["map_version"]) == (
            "proceed",
            False,
            None,
        )
        assert first["policy_version"] == "test-7" and first["threshold"] == 0.7
        assert first["threshold_source"].endswith("gate.yaml rules[0]")
        assert 0 < first["latency_ms"] < 1000 and first["decision_id"] == "gate:r0"

        # an over-confident agent's map: 0.9 stated is right far less often
        rng = np.random.default_rng(3)
        conf = rng.uniform(0.5, 1.0, 600)
        y = (rng.uniform(size=600) < conf - 0.35).astype(float)
        fitted = fit_isotonic(conf, y)
        engine = make_engine(database_url)
        try:
            t0 = datetime(2026, 1, 1, tzinfo=UTC)
            await save_map(engine, "agent-a", "retail", fitted, t0, t0 + timedelta(days=1))
        finally:
            await engine.dispose()
        expected = fitted.map.apply_one(0.9)
        assert expected < 0.7
        polls = 0
        for _ in range(60):  # picked up by the periodic refresh, not read per request
            polls += 1
            r = await client.post(url, json=ask(), headers=AUTH)
            if r.json().get("calibrated"):
                break
            await asyncio.sleep(0.25)
        r = await client.post(url, json=ask(request_id="r1"), headers=AUTH)
        body = r.json()
        assert body["calibrated"] is True and body["map_version"] == 1, body
        assert body["calibrated_confidence"] == pytest.approx(expected)
        assert body["decision"] == "escalate" and body["maps_loaded_at"] is not None

        # a check fires on the proposed message: revise, with the critique
        r = await client.post(
            url,
            headers=AUTH,
            json=ask(
                conversation_id="c1",
                request_id="r2",
                domain="billing",
                history=FAILED_CANCEL,
                content="Your order W1 has been cancelled.",
            ),
        )
        assert r.status_code == 200, r.text
        revise = r.json()
        assert revise["decision"] == "revise" and revise["calibrated"] is False
        assert {f["judge"] for f in revise["findings"]} == {
            "det.authorization",
            "det.ignored_error",
        }

        # refusals: a status and a reason, never a 500
        assert (await client.post(url, json=ask())).json()["reason"] == "unauthorized"
        wrong = await client.post(url, json=ask(), headers={"Authorization": "Bearer no"})
        assert wrong.status_code == 401
        bad = await client.post(url, content=b"{nope", headers=AUTH)
        assert (bad.status_code, bad.json()["reason"]) == (400, "not_json")
        no_conf = await client.post(url, json={**ask(), "confidence": "high"}, headers=AUTH)
        assert no_conf.status_code == 400 and "confidence" in no_conf.json()["error"]
        big = await client.post(url, json=ask(content="x" * 2001), headers=AUTH)
        assert (big.status_code, big.json()["reason"]) == (413, "too_large")
        huge = await client.post(url, content=b"{" + b" " * (1 << 21) + b"}", headers=AUTH)
        assert (huge.status_code, huge.json()["reason"]) == (413, "too_large")
        who = await client.post(url, json=ask(agent={"id": "stranger"}), headers=AUTH)
        assert (who.status_code, who.json()["reason"]) == (404, "unknown_agent")
        assert "stranger" in who.json()["error"]

        # the conversation's outcome arrives later, through the ingest endpoint
        outcome = event_dict("o-1", "c1", "outcome", at=60, success=False)
        r = await client.post(
            f"{gate_worker.url}/v1/events",
            json=[outcome],
            headers={"Authorization": "Bearer s3cret"},
        )
        assert r.status_code == 202

    sql = (
        "SELECT g.event_id, g.body::jsonb->'gate'->>'decision' AS decision,"
        " (o.body::jsonb->'outcome'->>'success')::bool AS success FROM events g"
        " LEFT JOIN events o ON o.conversation_id = g.conversation_id AND o.type = 'outcome'"
        " WHERE g.type = 'gate' ORDER BY g.event_id"
    )
    rows: list[Any] = []
    for _ in range(120):
        rows = await fetch(database_url, sql)
        if len(rows) == 3 + polls and any(r["success"] is not None for r in rows):
            break
        await asyncio.sleep(0.25)
    assert len(rows) == 3 + polls, rows  # every decision is an event, stored once
    named = [
        (r["event_id"], r["decision"], r["success"])
        for r in rows
        if r["event_id"] in ("gate:r0", "gate:r1", "gate:r2")
    ]
    assert named == [
        ("gate:r0", "proceed", None),
        ("gate:r1", "escalate", None),
        ("gate:r2", "revise", False),
    ]
    assert gate_worker.gate is not None
    assert metric(gate_worker.gate, 'monitor_gate_answers_total{result="unknown_agent"}') == 1.0
