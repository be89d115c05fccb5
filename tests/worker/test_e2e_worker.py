"""End to end through the real worker process: tau2 replay, duplicates, HTTP ingest."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path

import asyncpg
import httpx
import pytest

from monitor.store.engine import libpq_url
from tests.factories import event_dict
from tests.servers.worker import (
    WorkerProcess,
    count,
    create_topic,
    metric,
    running_worker,
    wait_for_count,
)


def expected_from_tau2(files: list[Path]) -> tuple[Counter[str], dict[str, tuple[float, bool]]]:
    """Counts per event type and (reward, escalated) per conversation, straight from the JSON."""
    types: Counter[str] = Counter()
    convs: dict[str, tuple[float, bool]] = {}
    for path in files:
        data = json.loads(path.read_text())
        for sim in data["simulations"]:
            escalated = False
            for m in sim["messages"]:
                if m["role"] in ("assistant", "user"):
                    types["message"] += 1
                elif m["role"] == "tool":
                    types["tool_result"] += 1
                for call in m.get("tool_calls") or []:
                    if call["name"] == "transfer_to_human_agents":
                        types["escalation"] += 1
                        escalated = True
            types["outcome"] += 1
            convs[f"tau2:{sim['id']}"] = (float(sim["reward_info"]["reward"]), escalated)
    return types, convs


def replay_cli(path: Path, bootstrap: str, topic: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "MONITOR_KAFKA_IDEMPOTENT": "false"}
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "monitor.cli",
            "replay",
            str(path),
            "--bootstrap",
            bootstrap,
            "--topic",
            topic,
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


async def db_snapshot(url: str) -> tuple[Counter[str], dict[str, tuple[float, bool, int]]]:
    conn = await asyncpg.connect(libpq_url(url))
    try:
        types = Counter(
            {
                r["type"]: r["n"]
                for r in await conn.fetch("SELECT type, count(*) AS n FROM events GROUP BY type")
            }
        )
        convs = {
            r["conversation_id"]: (r["outcome_reward"], r["escalated"], r["event_count"])
            for r in await conn.fetch("SELECT * FROM conversations")
        }
    finally:
        await conn.close()
    return types, convs


@pytest.mark.slow  # two replays through the broker (~17 s)
async def test_tau2_replay_twice_through_kafka(
    broker, topic_name: str, database_url: str, tau2_files: list[Path], tmp_path: Path
):
    want_types, want_convs = expected_from_tau2(tau2_files)
    total = sum(want_types.values())
    await create_topic(broker.bootstrap, topic_name)
    worker = WorkerProcess(broker.bootstrap, database_url, topic_name, tmp_path).start()
    try:
        await worker.wait_ready()
        for path in tau2_files:
            done = replay_cli(path, broker.bootstrap, topic_name)
            assert done.returncode == 0, done.stderr + done.stdout
        assert await wait_for_count(database_url, total) == total
        types, convs = await db_snapshot(database_url)
        assert types == want_types
        assert {cid: (r, e) for cid, (r, e, _) in convs.items()} == want_convs

        # the same files again: nothing changes anywhere
        for path in tau2_files:
            assert replay_cli(path, broker.bootstrap, topic_name).returncode == 0
        # wait until the worker has read the second replay (duplicates counted in /metrics)
        duplicates = 0.0
        for _ in range(300):
            duplicates = metric(worker, "monitor_events_duplicate_total")
            if duplicates >= total:
                break
            await asyncio.sleep(0.2)
        assert duplicates == total
        assert metric(worker, "monitor_events_written_total") == total
        types2, convs2 = await db_snapshot(database_url)
        assert types2 == want_types
        assert convs2 == convs

        # the worker's judges: every tau2 conversation (rate 1.0) is requested and judged once
        for _ in range(300):
            if metric(worker, "monitor_judged_conversations_total") >= len(want_convs):
                break
            await asyncio.sleep(0.2)
        judged = await count(
            database_url, "SELECT count(*) FROM judge_requests WHERE judged_at IS NOT NULL"
        )
        assert judged == len(want_convs)
        assert metric(worker, "monitor_judge_requests_total") == len(want_convs)
        verdicts = await count(database_url, "SELECT count(*) FROM verdicts")
        repeated = await count(
            database_url, "SELECT count(*) FROM verdicts WHERE judge = 'det.repeated_call'"
        )
        assert verdicts > len(want_convs) and repeated > 0
    finally:
        worker.stop()


@pytest.fixture
async def http_worker(broker, topic_name: str, database_url: str, tmp_path: Path):
    async with running_worker(
        broker.bootstrap,
        database_url,
        topic_name,
        tmp_path,
        MONITOR_INGEST_TOKEN="s3cret",
        MONITOR_API_TOKEN="r3ad",
        MONITOR_HTTP_MAX_BODY_BYTES="65536",
        MONITOR_HTTP_MAX_EVENTS="50",
    ) as worker:
        yield worker


async def test_http_ingest_auth_mixed_and_limits(http_worker: WorkerProcess, database_url: str):
    url = f"{http_worker.url}/v1/events"
    good = [event_dict(f"h-{i}", "hc-1", at=i, turn=i) for i in range(3)]
    async with httpx.AsyncClient(timeout=30) as client:
        assert (await client.post(url, json=good)).status_code == 401
        wrong = await client.post(url, json=good, headers={"Authorization": "Bearer nope"})
        assert wrong.status_code == 401
        auth = {"Authorization": "Bearer s3cret"}

        mixed = [good[0], {**good[1], "type": "thought"}, good[2], {"schema": "agent-event/v1"}]
        r = await client.post(url, json=mixed, headers=auth)
        assert r.status_code == 207
        body = r.json()
        assert (body["accepted"], body["rejected"]) == (2, 2)
        assert [x["status"] for x in body["results"]] == [
            "accepted",
            "rejected",
            "accepted",
            "rejected",
        ]
        assert body["results"][1]["reason"] == "unknown_type"
        assert body["results"][3]["reason"] == "missing_field"

        ndjson = "\n".join(json.dumps(event_dict(f"n-{i}", "hc-2", at=i)) for i in range(4))
        r = await client.post(
            url, content=ndjson, headers={**auth, "Content-Type": "application/x-ndjson"}
        )
        assert r.status_code == 202 and r.json()["accepted"] == 4

        too_many = [event_dict(f"m-{i}", "hc-3") for i in range(51)]
        assert (await client.post(url, json=too_many, headers=auth)).status_code == 413
        big = [event_dict("big", "hc-4", content="x" * 70_000)]
        assert (await client.post(url, json=big, headers=auth)).status_code == 413
        assert (await client.post(url, content=b"[{", headers=auth)).status_code == 400
        all_bad = await client.post(url, json=[{"nope": 1}], headers=auth)
        assert all_bad.status_code == 422

    assert await wait_for_count(database_url, 6) == 6
    assert (
        await count(database_url, "SELECT count(*) FROM events WHERE conversation_id='hc-1'") == 2
    )
    text = httpx.get(f"{http_worker.url}/metrics").text
    assert 'monitor_http_events_total{result="accepted"} 6.0' in text
    # this worker has no alert destination: it said so when it started
    raw = http_worker.log_path.read_text()
    assert "\x1b" not in raw, "the worker log is plain text (no terminal escape codes)"
    log = " ".join(raw.split())
    assert "alerting: no destination: alerts are evaluated and recorded but nobody" in log


async def test_calibration_map_endpoint(http_worker: WorkerProcess, database_url: str):
    """GET /v1/calibration/{agent_id} serves the latest stored map per domain; 404 without."""
    import numpy as np

    from monitor.analytics.recalibration import fit_isotonic
    from monitor.analytics.write import save_map
    from monitor.store.engine import make_engine

    rng = np.random.default_rng(3)
    conf = rng.uniform(0.5, 1.0, 600)
    y = (rng.uniform(size=600) < conf - 0.3).astype(float)  # overconfident by 0.3
    result = fit_isotonic(conf, y)
    engine = make_engine(database_url)
    try:
        t0 = datetime(2026, 1, 1, tzinfo=UTC)
        for _ in range(2):
            await save_map(engine, "agent-x", "retail", result, t0, t0 + timedelta(days=1))
    finally:
        await engine.dispose()
    read = {"Authorization": "Bearer r3ad"}  # the read API's shared token (development mode)
    async with httpx.AsyncClient(timeout=30, headers=read) as client:
        r = await client.get(f"{http_worker.url}/v1/calibration/agent-x")
        assert r.status_code == 200, r.text
        body = r.json()
        assert body["agent_id"] == "agent-x" and len(body["maps"]) == 1
        m = body["maps"][0]
        assert (m["domain"], m["version"], m["method"]) == ("retail", 2, "isotonic")
        assert m["map"]["xs"] == list(result.map.xs)
        assert m["ece_after"] == pytest.approx(result.ece_after)
        missing = await client.get(f"{http_worker.url}/v1/calibration/nobody")
        assert missing.status_code == 404 and "nobody" in missing.json()["error"]
