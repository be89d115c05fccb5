"""The gate as a process of its own (``monitor gate serve``), through real processes, a real
broker and a real Postgres: its decision events are stored by a worker's ingest; with the
broker and Postgres both stopped while agents gate, every answer still comes within the
deadline, says so, and every decision event is stored exactly once when both are back."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from typer.testing import CliRunner

from monitor.cli.main import app
from monitor.contract.events import validate_event
from monitor.stack.broker import EmbeddedBroker
from monitor.stack.postgres import EmbeddedPostgres
from tests.factories import event_dict
from tests.gate.test_effect import gate_json
from tests.gate.test_gate_outages import (
    FAST,
    ask,
    gate,
    health,
    make_topic,
    own_broker,
    own_pg,
    stored_exactly,
    until,
)
from tests.servers.worker import (
    GateProcess,
    WorkerProcess,
    count,
    create_topic,
    metric,
    send_events,
)

__all__ = ["own_broker", "own_pg"]  # fixtures
DEADLINE_S = 2.0  # an answer later than this is a failure (the broker's timeout is 30 s)


def labelled(process: WorkerProcess, name: str, **labels: str) -> float:
    """The value of ``name`` with exactly ``labels`` on the process's /metrics (0 if absent)."""
    want = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    for line in httpx.get(f"{process.url}/metrics", timeout=10).text.splitlines():
        if line.startswith(f"{name}{{{want}}} "):
            return float(line.split()[-1])
    return 0.0


SLOW_POLICY = """\
version: "slow-1"
rules:
  - agent: slow-bot
    threshold: 0.5
    deadline_ms: 0.000001
  - threshold: 0.5
"""


@asynccontextmanager
async def worker_and_gate(
    bootstrap: str, database_url: str, topic: str, tmp: Path, policy: str, **extra: str
) -> AsyncIterator[tuple[WorkerProcess, GateProcess]]:
    """A worker, then a gate process, both ready with ``FAST`` settings, ``extra`` and the
    gate policy ``policy`` (the YAML, written to ``tmp/gate.yaml``); both stopped on exit."""
    path = tmp / "gate.yaml"
    path.write_text(policy)
    env = {**FAST, "MONITOR_GATE_POLICY_FILE": str(path), **extra}
    await create_topic(bootstrap, topic)
    worker = WorkerProcess(bootstrap, database_url, topic, tmp, **env).start()
    gate_ = GateProcess(bootstrap, database_url, topic, tmp, **env)
    try:
        await worker.wait_ready()  # first: it makes the origin key the gate then reads
        await gate_.start().wait_ready()
        yield worker, gate_
    finally:
        gate_.stop()
        worker.stop()


def status(gate_: GateProcess) -> dict[str, Any]:
    body: dict[str, Any] = httpx.get(f"{gate_.url}/health", timeout=10).json()
    return body


async def gate_timed(gate_: GateProcess, ids: range) -> list[dict[str, Any]]:
    """Ask for each id (8 at a time); each answer is a 200 decision within DEADLINE_S."""
    limit = asyncio.Semaphore(8)
    async with httpx.AsyncClient(timeout=DEADLINE_S) as client:

        async def one(i: int) -> dict[str, Any]:
            async with limit:
                t0 = time.monotonic()
                r = await client.post(f"{gate_.url}/v1/gate", json=ask(i))
                took = time.monotonic() - t0
            assert r.status_code == 200, r.text
            assert took < DEADLINE_S, f"answer {i} took {took:.2f}s"
            body: dict[str, Any] = r.json()
            assert body["decision_id"] == f"gate:r{i}"
            return body

        return list(await asyncio.gather(*(one(i) for i in ids)))


@pytest.mark.slow
async def test_gate_process_answers_and_a_worker_stores_its_decision_events(
    broker: Any, topic_name: str, tmp_path: Path, database_url: str
) -> None:
    async with worker_and_gate(
        broker.bootstrap,
        database_url,
        topic_name,
        tmp_path,
        SLOW_POLICY,
        MONITOR_GC_INTERVAL_S="0.5",
    ) as (worker, gate_):
        assert status(gate_)["status"] == "ok", status(gate_)
        # both processes run a full collection every gc_interval_s, shown on /metrics
        full = {
            p: labelled(p, "python_gc_collections_total", generation="2") for p in (worker, gate_)
        }
        answers = await gate(gate_, range(25))
        assert all(a["maps_loaded_at"] and "maps_stale" not in a for a in answers)
        await stored_exactly(database_url, 25, worker)
        assert metric(gate_, "monitor_gate_buffered_events") == 0
        text = httpx.get(f"{gate_.url}/metrics", timeout=10).text
        answered = sum(
            float(line.split()[-1])
            for line in text.splitlines()
            if line.startswith("monitor_gate_answers_total{")
        )
        assert answered == 25
        bad = httpx.post(f"{gate_.url}/v1/gate", content=b"{", timeout=10)
        assert bad.status_code == 400 and bad.json()["reason"] == "not_json"
        assert httpx.get(f"{gate_.url}/nope", timeout=10).json()["reason"] == "http_404"
        # the worker does not answer /v1/gate: a 404 pointing at the gate process
        moved = httpx.post(f"{worker.url}/v1/gate", json=ask(25), timeout=10)
        assert (moved.status_code, moved.json()["reason"]) == (404, "gate_elsewhere")
        assert "monitor gate serve" in moved.json()["error"]
        # fail-open answers and timeouts are counted per rule and agent
        slow = {**ask(25), "agent": {"id": "slow-bot"}}
        answer = httpx.post(f"{gate_.url}/v1/gate", json=slow, timeout=10).json()
        assert answer["decision"] == "proceed" and answer["degraded"].startswith("fail open")
        degraded = "monitor_gate_degraded_answers_total"
        for kind in ("fail_open", "deadline"):
            assert labelled(gate_, degraded, rule="0", agent="slow-bot", kind=kind) == 1
        assert labelled(gate_, degraded, rule="1", agent="agent-a", kind="fail_open") == 0
        await stored_exactly(database_url, 26, worker)
        await asyncio.sleep(1.5)
        for process, before in full.items():
            after = labelled(process, "python_gc_collections_total", generation="2")
            assert after >= before + 2, (process.url, before, after)
        assert gate_.stop() == 0, gate_.log_tail()


@pytest.mark.slow
async def test_broker_and_postgres_down_the_gate_process_answers_in_time_and_delivers_later(
    own_broker: EmbeddedBroker,
    own_pg: tuple[EmbeddedPostgres, str],
    topic_name: str,
    tmp_path: Path,
) -> None:
    pg, url = own_pg
    await create_topic(own_broker.bootstrap, topic_name)
    worker = WorkerProcess(own_broker.bootstrap, url, topic_name, tmp_path, **FAST).start()
    gate_ = GateProcess(own_broker.bootstrap, url, topic_name, tmp_path, **FAST)
    second: WorkerProcess | None = None
    try:
        await worker.wait_ready()  # first: it makes the origin key the gate then reads
        await gate_.start().wait_ready()
        # Nothing is stored before the outage: the in-memory Tansu broker, restarted with a
        # recreated topic, reports log ends below offsets a consumer already read and does not
        # serve what is appended below them (docs/robustness.md, section 5; the worker's own
        # outage tests avoid the same quirk). Delivery in normal operation is the first test's.
        worker.kill()  # ingest is down as well; a fresh worker stores what comes later
        await asyncio.to_thread(pg.stop, "immediate")
        own_broker.stop()
        answers = await gate_timed(gate_, range(50))  # agents keep gating
        await until(lambda: health(gate_)["buffered"] == 50, 30, "50 kept", gate_)
        later = await gate_timed(gate_, range(50, 60))
        answers += later
        assert all(a["decision_events_kept"] >= 50 for a in later)
        assert all("maps_stale" in a and a["maps_loaded_at"] for a in later)
        stale = [a for a in answers if "maps_stale" in a]
        assert (
            labelled(
                gate_,
                "monitor_gate_degraded_answers_total",
                rule="0",
                agent="agent-a",
                kind="maps_stale",
            )
            == len(stale)
            > 0
        )
        body = status(gate_)
        assert body["status"] == "degraded"
        assert {"maps_stale", "decision_events_buffered"} <= set(body["reasons"])
        await until(lambda: health(gate_)["buffered"] == 60, 30, "60 kept", gate_)
        assert len(answers) == 60
        await asyncio.to_thread(pg.start)
        own_broker.start()  # same port, empty
        await make_topic(own_broker.bootstrap, topic_name)
        second = WorkerProcess(own_broker.bootstrap, url, topic_name, tmp_path, **FAST).start()
        await second.wait_ready()
        await until(lambda: health(gate_)["buffered"] == 0, 120, "buffer empty", gate_)
        await stored_exactly(url, 60, second, timeout=120)
        await until(lambda: status(gate_)["status"] == "ok", 30, "healthy again", gate_)
        answer = (await gate_timed(gate_, range(60, 61)))[0]
        assert "maps_stale" not in answer and "decision_events_kept" not in answer
        await stored_exactly(url, 61, second, timeout=60)
    finally:
        gate_.stop()
        worker.kill()
        if second is not None:
            second.stop()


SHADOW_POLICY = """\
version: "shadow-1"
rules:
  - agent: shadow-bot
    threshold: 0.6
    mode: shadow
  - threshold: 0.6
"""


@pytest.mark.slow
async def test_shadow_decisions_are_recorded_answered_proceed_and_reported_apart(
    broker: Any, topic_name: str, tmp_path: Path, database_url: str
) -> None:
    policy = tmp_path / "gate.yaml"  # written by worker_and_gate; the CLI reads it too
    async with worker_and_gate(
        broker.bootstrap, database_url, topic_name, tmp_path, SHADOW_POLICY
    ) as (worker, gate_):
        n = 48
        agent = {i: "shadow-bot" if i % 2 == 0 else "enforce-bot" for i in range(n)}
        confidence = {i: 0.25 + (i % 7) / 10 for i in range(n)}  # 0.25 .. 0.85
        success = {i: i % 3 != 0 for i in range(n)}
        answers = {}
        async with httpx.AsyncClient(timeout=10) as client:
            for i in range(n):
                body = {
                    "conversation_id": f"conv-{i}",
                    "agent": {"id": agent[i]},
                    "content": "Done.",
                    "confidence": confidence[i],
                    "request_id": f"r{i}",
                }
                r = await client.post(f"{gate_.url}/v1/gate", json=body)
                assert r.status_code == 200, r.text
                answers[i] = r.json()
        would = {}
        for i, a in answers.items():
            below = confidence[i] < 0.6
            if agent[i] == "shadow-bot":  # decided and recorded, but the agent proceeds
                assert a["decision"] == "proceed" and a["enforced"] is False, a
                assert a["shadow_decision"] == ("escalate" if below else "proceed"), a
                would[i] = a["shadow_decision"]
            else:
                assert a["enforced"] is True and "shadow_decision" not in a, a
                assert a["decision"] == ("escalate" if below else "proceed"), a
                would[i] = a["decision"]
        # each conversation's outcome arrives after the answer
        now = datetime.now(UTC).isoformat()
        outcomes = [
            validate_event(
                {
                    **event_dict(
                        f"out-{i}", f"conv-{i}", "outcome", agent=agent[i], success=success[i]
                    ),
                    "ts": now,
                }
            )
            for i in range(n)
        ]
        await send_events(broker.bootstrap, topic_name, outcomes)
        await stored_exactly(database_url, n, worker)
        sql = "SELECT count(*) FROM conversations WHERE outcome_success IS NOT NULL"
        deadline = time.monotonic() + 60
        while await count(database_url, sql) < n and time.monotonic() < deadline:
            await asyncio.sleep(0.3)
        enforced_sql = (
            "SELECT count(*) FROM events WHERE type = 'gate' AND agent_id = 'shadow-bot'"
            " AND (body->'gate'->>'enforced')::boolean = false"
        )
        assert await count(database_url, enforced_sql) == n // 2

        window = ("--from", "2000-01-01", "--to", "2100-01-01")
        options = ("--no-replay", "--policy", str(policy), *window)
        out = await asyncio.to_thread(gate_json, database_url, *options)
        effects = {e["agent_id"]: e for e in out["effects"]}
        assert set(effects) == {"shadow-bot", "enforce-bot"}
        assert effects["shadow-bot"]["source"] == "shadow"
        assert effects["enforce-bot"]["source"] == "recorded"
        assert any("shadow" in note for note in effects["shadow-bot"]["notes"])
        for name, e in effects.items():  # recomputed from the answers and the outcomes
            mine = [i for i in range(n) if agent[i] == name]
            failed = [i for i in mine if not success[i]]
            stopped = [i for i in failed if would[i] != "proceed"]
            proceeded = [i for i in mine if would[i] == "proceed"]
            assert e["decisions"]["escalate"] == sum(would[i] == "escalate" for i in mine)
            assert e["decisions"]["proceed"] == len(proceeded)
            assert (e["failures_prevented"]["k"], e["failures_prevented"]["n"]) == (
                len(stopped),
                len(failed),
            )
            assert e["failure_rate_proceeded"]["k"] == sum(not success[i] for i in proceeded)
            assert e["escalation_rate"]["k"] == sum(would[i] == "escalate" for i in mine)
        assert effects["shadow-bot"]["failures_prevented"]["k"] > 0
        table = await asyncio.to_thread(
            CliRunner().invoke,
            app,
            ["gate", *options],
            env={
                "MONITOR_DATABASE_URL": database_url,
                "DATABASE_URL": database_url,
                "COLUMNS": "250",
            },
        )
        assert table.exit_code == 0, table.output
        assert "shadow" in table.output and "recorded" in table.output


@pytest.mark.slow
async def test_two_gate_processes_serve_one_port(
    broker: Any, topic_name: str, tmp_path: Path, database_url: str
) -> None:
    """SO_REUSEPORT: a second gate process binds the port of the first; both answer (each
    with its own disk buffer slot), and with one stopped the other still answers there."""
    await create_topic(broker.bootstrap, topic_name)
    worker = WorkerProcess(broker.bootstrap, database_url, topic_name, tmp_path, **FAST).start()
    first = GateProcess(broker.bootstrap, database_url, topic_name, tmp_path, **FAST)
    second = GateProcess(broker.bootstrap, database_url, topic_name, tmp_path, **FAST)
    second.port = first.port
    second.env["MONITOR_GATE_PORT"] = str(first.port)
    second.loglevel = "info"  # it logs "gate serving on" once its socket is bound

    def serving() -> bool:
        return "gate serving on" in second.log_tail(200)

    try:
        await worker.wait_ready()
        await first.start().wait_ready()
        second.start()
        await until(serving, 60, "the second gate process bound the port", second)
        await gate(first, range(40))
        assert first.proc is not None and first.proc.poll() is None, first.log_tail()
        assert second.proc is not None and second.proc.poll() is None, second.log_tail()
        slots = sorted(p.name for p in tmp_path.glob("gate-buffer*"))
        assert len(slots) == 2, slots  # one per gate process
        assert first.stop() == 0
        await gate(second, range(40, 50))  # the same port, now served by the second alone
        await stored_exactly(database_url, 50, worker)
    finally:
        first.stop()
        second.stop()
        worker.stop()


def test_the_gate_process_sets_its_nice_value() -> None:
    """``gate_nice`` is the nice value the process runs at (a child process: the test's own
    priority stays); 0 leaves it unchanged."""
    here = os.getpriority(os.PRIO_PROCESS, 0)
    wanted = min(19, here + 2)
    code = (
        "import os; from monitor.gate.server import set_priority; "
        f"assert set_priority(0) and os.getpriority(os.PRIO_PROCESS, 0) == {here}; "
        f"assert set_priority({wanted}); print(os.getpriority(os.PRIO_PROCESS, 0))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert int(out.stdout) == wanted
