"""The gate under outages, through the real worker process, a real broker and a real Postgres:
Postgres stopped while gating, the broker stopped while gating, the worker killed (-9) while
decision events wait on its disk buffer. Every decision answered must end in ``events``
exactly once."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from aiokafka.errors import TopicAlreadyExistsError

from monitor.stack.broker import EmbeddedBroker
from monitor.stack.postgres import EmbeddedPostgres
from monitor.store.engine import ensure_database, upgrade, with_database
from tests.servers.worker import WorkerProcess, count, create_topic, metric

GATE_IDS = "SELECT count(DISTINCT event_id) FROM events WHERE type = 'gate'"
GATE_ROWS = "SELECT count(*) FROM events WHERE type = 'gate'"
FAST = {
    "MONITOR_GATE_REFRESH_S": "0.5",
    "MONITOR_GATE_SPILL_AFTER_S": "0.5",
    "MONITOR_JUDGE_ENABLED": "false",
    "MONITOR_ALERTING_ENABLED": "false",
}


def ask(i: int) -> dict[str, Any]:
    return {
        "conversation_id": f"c-{i % 7}",
        "agent": {"id": "agent-a"},
        "content": "Done.",
        "confidence": 0.3 + (i % 7) / 10,
        "request_id": f"r{i}",
    }


async def gate(worker: WorkerProcess, ids: range) -> list[dict[str, Any]]:
    """Ask the gate for each id (16 at a time); every answer must be a 200 decision."""
    limit = asyncio.Semaphore(16)
    async with httpx.AsyncClient(timeout=30) as client:

        async def one(i: int) -> dict[str, Any]:
            async with limit:
                r = await client.post(f"{worker.url}/v1/gate", json=ask(i))
            assert r.status_code == 200, r.text
            body: dict[str, Any] = r.json()
            assert body["decision"] in ("proceed", "escalate")
            assert body["decision_id"] == f"gate:r{i}"
            return body

        return list(await asyncio.gather(*(one(i) for i in ids)))


def health(worker: WorkerProcess) -> dict[str, Any]:
    body: dict[str, Any] = httpx.get(f"{worker.url}/health", timeout=10).json()
    return body["gate_decision_events"]  # type: ignore[no-any-return]


async def until(check: Any, timeout: float, what: str, worker: WorkerProcess) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if await asyncio.to_thread(check):
            return
        await asyncio.sleep(0.2)
    raise AssertionError(f"{what} not reached in {timeout}s\n{worker.log_tail(60)}")


async def stored_exactly(url: str, n: int, worker: WorkerProcess, timeout: float = 90) -> None:
    """Wait until ``n`` decision events are stored; then no row and no id beyond ``n``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if await count(url, GATE_IDS) >= n:
                break
        except OSError:
            pass
        await asyncio.sleep(0.3)
    await asyncio.sleep(1.0)
    got = (await count(url, GATE_IDS), await count(url, GATE_ROWS))
    assert got == (n, n), f"(distinct ids, rows) = {got}, want {n}\n{worker.log_tail(60)}"
    want = ",".join(f"'gate:r{i}'" for i in range(n))
    assert await count(url, f"SELECT count(*) FROM events WHERE event_id IN ({want})") == n


async def make_topic(bootstrap: str, topic: str) -> None:
    with contextlib.suppress(TopicAlreadyExistsError):  # a producer's metadata request made it
        await create_topic(bootstrap, topic)


@pytest.fixture
def own_broker(tmp_path: Path) -> Iterator[EmbeddedBroker]:
    """A broker this test may stop and restart on the same port (memory storage: a restart
    starts empty, so the test waits for what was produced before the stop to be stored)."""
    b = EmbeddedBroker(log_path=tmp_path / "tansu.log").start()
    try:
        yield b
    finally:
        b.stop()


@pytest.fixture
async def own_pg(private_dir: Path) -> AsyncIterator[tuple[EmbeddedPostgres, str]]:
    pg = EmbeddedPostgres(private_dir / "pg", fsync=False).start()
    try:
        url = with_database(pg.admin_url, "gate_outage")
        await ensure_database(url)
        await asyncio.to_thread(upgrade, url)
        yield pg, url
    finally:
        pg.stop()


@pytest.mark.slow
async def test_postgres_down_the_gate_answers_from_memory_and_events_are_stored_later(
    broker: Any, topic_name: str, tmp_path: Path, own_pg: tuple[EmbeddedPostgres, str]
) -> None:
    pg, url = own_pg
    await create_topic(broker.bootstrap, topic_name)
    worker = WorkerProcess(broker.bootstrap, url, topic_name, tmp_path, **FAST).start()
    try:
        await worker.wait_ready()
        assert all("maps_stale" not in a for a in await gate(worker, range(10)))
        await stored_exactly(url, 10, worker)
        await asyncio.to_thread(pg.stop, "immediate")
        stale: list[dict[str, Any]] = []
        deadline = time.monotonic() + 30
        i = 10
        while not stale and time.monotonic() < deadline:  # the next refresh fails
            stale = [a for a in await gate(worker, range(i, i + 5)) if "maps_stale" in a]
            i += 5
            await asyncio.sleep(0.3)
        assert stale, worker.log_tail(40)
        answers = await gate(worker, range(i, 60))  # Postgres still down: answered from memory
        assert all("maps_stale" in a and a["maps_loaded_at"] for a in answers)
        assert health(worker)["buffered"] == 0  # the broker took them: nothing on disk
        await asyncio.to_thread(pg.start)
        await stored_exactly(url, 60, worker)
        assert worker.proc is not None and worker.proc.poll() is None
    finally:
        worker.stop()


@pytest.mark.slow
async def test_broker_down_decisions_are_buffered_then_stored_exactly_once(
    own_broker: EmbeddedBroker, topic_name: str, tmp_path: Path, database_url: str
) -> None:
    await create_topic(own_broker.bootstrap, topic_name)
    worker = WorkerProcess(own_broker.bootstrap, database_url, topic_name, tmp_path, **FAST).start()
    try:
        await worker.wait_ready()
        await gate(worker, range(10))
        await stored_exactly(database_url, 10, worker)  # before the stop: memory storage
        own_broker.stop()
        await gate(worker, range(10, 40))  # answers come; their events cannot be acknowledged
        await until(lambda: health(worker)["buffered"] == 30, 30, "30 buffered", worker)
        later = await gate(worker, range(40, 50))
        assert all(a["decision_events_kept"] >= 30 for a in later)
        await until(lambda: health(worker)["buffered"] == 40, 30, "40 buffered", worker)
        status = health(worker)
        assert status["dropped"] == 0 and status["oldest_age_s"] > 0
        assert metric(worker, "monitor_gate_buffered_events") == 40
        assert metric(worker, "monitor_gate_buffer_oldest_age_seconds") > 0
        own_broker.start()  # same port, empty
        await make_topic(own_broker.bootstrap, topic_name)
        # every buffered event acknowledged by the broker (removed only after the ack)
        await until(lambda: health(worker)["buffered"] == 0, 120, "buffer empty", worker)
        answer = (await gate(worker, range(50, 51)))[0]
        assert "decision_events_kept" not in answer  # direct again
        assert health(worker)["dropped"] == 0
        # Not asserted here: that this same worker then stores all 51. The in-memory Tansu 0.6
        # broker, restarted with a recreated topic, reports a log end below the offsets it
        # serves (a partition holding offsets 0..15 reported 12; end_offsets of a 12-record
        # partition said 1), and a consumer whose position is beyond that reported end was not
        # served the records appended later within 60 s. The ingest loop no longer re-reads
        # such a partition at every batch (ingest/offsets.py: at most once per reported end,
        # after 3 s without arrivals), but what the broker does not serve it cannot store
        # (docs/robustness.md, section 5). Delivery from the disk buffer into the store is
        # shown by the kill -9 test below, whose new worker stores exactly what was buffered.
    finally:
        worker.stop()


@pytest.mark.slow
async def test_worker_killed_with_events_on_disk_delivers_them_after_restart(
    own_broker: EmbeddedBroker, topic_name: str, tmp_path: Path, database_url: str
) -> None:
    await create_topic(own_broker.bootstrap, topic_name)
    first = WorkerProcess(own_broker.bootstrap, database_url, topic_name, tmp_path, **FAST).start()
    second: WorkerProcess | None = None
    try:
        await first.wait_ready()
        own_broker.stop()
        await gate(first, range(20))
        await until(lambda: health(first)["buffered"] == 20, 30, "20 on disk", first)
        first.kill()  # SIGKILL: nothing in memory survives
        own_broker.start()
        await make_topic(own_broker.bootstrap, topic_name)
        second = WorkerProcess(
            own_broker.bootstrap, database_url, topic_name, tmp_path, **FAST
        ).start()  # same state dir: the same disk buffer
        await second.wait_ready()
        await stored_exactly(database_url, 20, second, timeout=120)
        await until(lambda: health(second)["buffered"] == 0, 30, "buffer empty", second)
    finally:
        first.kill()
        if second is not None:
            second.stop()
