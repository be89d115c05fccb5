"""Crash, outage and scale-out: exactly 20,000 events and correct roll-ups every time.

Each test streams 20,000 simulator events through Kafka at a steady rate while it kills the
worker, stops Postgres, or moves partitions between two workers, then checks the database
against an independent computation from the events that were sent.
"""

from __future__ import annotations

import asyncio
import itertools
from collections import defaultdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from monitor.contract.events import AgentEvent
from monitor.sdk import EventEmitter
from monitor.sim.traffic import Simulator
from monitor.stack.postgres import EmbeddedPostgres
from monitor.store.engine import ensure_database, upgrade, with_database
from tests.db import fetch
from tests.servers.worker import WorkerProcess, create_topic, metric, send_events, wait_for_count

N = 20_000
RATE = 2_500.0


def traffic(seed: int) -> list[AgentEvent]:
    sim = Simulator(seed, datetime(2026, 3, 1, tzinfo=UTC))
    return list(itertools.islice(sim.events(), N))


def expected_rollups(events: list[AgentEvent]) -> dict[str, tuple[int, float | None, bool, Any]]:
    """(event_count, min assistant confidence, escalated, outcome success) per conversation."""
    acc: dict[str, dict[str, Any]] = defaultdict(
        lambda: {"n": 0, "min": None, "esc": False, "out": None}
    )
    for e in events:
        row = acc[e.conversation_id]
        row["n"] += 1
        if (
            e.message is not None
            and e.message.role == "assistant"
            and e.message.confidence is not None
        ):
            c = e.message.confidence
            row["min"] = c if row["min"] is None else min(row["min"], c)
        if e.escalation is not None:
            row["esc"] = True
        if e.outcome is not None:
            row["out"] = e.outcome.success
    return {k: (v["n"], v["min"], v["esc"], v["out"]) for k, v in acc.items()}


async def actual_rollups(url: str) -> dict[str, tuple[int, float | None, bool, Any]]:
    rows = await fetch(
        url,
        "SELECT conversation_id, event_count, min_confidence, escalated, outcome_success "
        "FROM conversations",
    )
    return {r[0]: (r[1], r[2], r[3], r[4]) for r in rows}


async def assert_exact(url: str, events: list[AgentEvent]) -> None:
    got = await wait_for_count(url, N, timeout=120, stable_s=2.0)
    assert got == N, f"{got} events in Postgres, want {N}"
    assert (
        await wait_for_count(url, N, "SELECT count(DISTINCT event_id) FROM events", timeout=1) == N
    )
    assert await actual_rollups(url) == expected_rollups(events)


@pytest.mark.slow
async def test_sigkill_mid_run_loses_and_duplicates_nothing(
    broker, topic_name: str, database_url: str, tmp_path: Path
):
    events = traffic(11)
    await create_topic(broker.bootstrap, topic_name)
    first = WorkerProcess(broker.bootstrap, database_url, topic_name, tmp_path).start()
    second = WorkerProcess(broker.bootstrap, database_url, topic_name, tmp_path)
    try:
        await first.wait_ready()
        sending = asyncio.create_task(send_events(broker.bootstrap, topic_name, events, RATE))
        assert await wait_for_count(database_url, N // 4, timeout=60) >= N // 4
        first.kill()
        second.start()
        await second.wait_ready()
        assert await sending == N
        await assert_exact(database_url, events)
    finally:
        first.kill()
        second.stop()


@pytest.mark.slow
async def test_postgres_outage_mid_run(broker, topic_name: str, tmp_path: Path, private_dir: Path):
    events = traffic(12)
    # fsync may be off (a process crash, not an OS crash, is simulated); synchronous_commit is
    # on, so every commit the worker saw survives the immediate shutdown below
    pg = EmbeddedPostgres(private_dir / "pg", fsync=False).start()
    url = with_database(pg.admin_url, "outage")
    worker = WorkerProcess(broker.bootstrap, url, topic_name, tmp_path)
    try:
        await ensure_database(url)
        await asyncio.to_thread(upgrade, url)
        await create_topic(broker.bootstrap, topic_name)
        worker.start()
        await worker.wait_ready()
        sending = asyncio.create_task(send_events(broker.bootstrap, topic_name, events, RATE))
        assert await wait_for_count(url, N // 4, timeout=60) >= N // 4
        await asyncio.to_thread(pg.stop, "immediate")
        await asyncio.sleep(4)
        assert worker.proc is not None and worker.proc.poll() is None, worker.log_tail()
        await asyncio.to_thread(pg.start)
        assert await sending == N
        try:
            await assert_exact(url, events)
        except AssertionError as exc:
            raise AssertionError(f"{exc}\nworker log:\n{worker.log_tail(80)}") from None
        assert worker.proc.poll() is None
        assert metric(worker, "monitor_store_errors_total") > 0  # the outage was felt
    finally:
        worker.stop()
        pg.stop()


@pytest.mark.slow
async def test_scale_out_second_worker_joins_then_first_leaves(
    broker, topic_name: str, database_url: str, tmp_path: Path
):
    """Phases, so the test does not depend on machine speed:

    1. the first worker alone ingests a quarter of the events;
    2. a second worker joins; events trickle in until the second one has consumed some
       (so partitions really moved to it);
    3. the first worker leaves (SIGTERM) and the rest is sent as fast as possible.
    """
    events = traffic(13)
    quarter = N // 4
    await create_topic(broker.bootstrap, topic_name)
    first = WorkerProcess(broker.bootstrap, database_url, topic_name, tmp_path).start()
    second = WorkerProcess(broker.bootstrap, database_url, topic_name, tmp_path)
    try:
        await first.wait_ready()
        sent = await send_events(broker.bootstrap, topic_name, events[:quarter])
        assert await wait_for_count(database_url, quarter, timeout=60) == quarter
        second.start()
        await second.wait_ready()
        trickle_end = 3 * quarter
        async with EventEmitter(broker.bootstrap, topic_name, idempotent=False) as em:
            while sent < trickle_end and metric(second, "monitor_events_in_total") == 0:
                for event in events[sent : sent + 50]:
                    await em.send(event)
                await em.flush()
                sent += 50
                await asyncio.sleep(0.1)
        assert metric(second, "monitor_events_in_total") > 0, "partitions never moved"
        first_wrote = metric(first, "monitor_events_written_total")
        assert first.stop() is not None
        sent += await send_events(broker.bootstrap, topic_name, events[sent:])
        assert sent == N
        await assert_exact(database_url, events)
        second_wrote = metric(second, "monitor_events_written_total")
        assert first_wrote > 0 and second_wrote > 0  # both workers really shared the work
        # no event was newly written twice (first_wrote is read before the first worker stops,
        # so batches it wrote after that read are in neither count: <=, not ==)
        assert first_wrote + second_wrote <= N
    finally:
        first.stop()
        second.stop()
