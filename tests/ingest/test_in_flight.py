"""Two batches in flight: a revocation waits for both and holds back the next one; a partition
paused by two failing writes stays paused (and ``/health`` says so) until both recovered."""

from __future__ import annotations

import asyncio

from aiokafka import TopicPartition

from monitor.ingest.health import IngestHealth
from monitor.ingest.paused_retry import PausedRetry
from monitor.ingest.rebalance import InFlight
from monitor.telemetry.ops_metrics import OpsMetrics


async def test_a_revocation_waits_for_every_batch_in_flight_and_holds_back_new_ones() -> None:
    gate, log = InFlight(), []
    release = [asyncio.Event(), asyncio.Event()]

    async def batch(name: str, done: asyncio.Event | None) -> None:
        async with gate.batch():
            log.append(f"{name} started")
            if done is not None:
                await done.wait()
            log.append(f"{name} committed")

    async def revoke() -> None:
        await gate.drain()
        log.append("revoked")

    first = asyncio.create_task(batch("k", release[0]))
    second = asyncio.create_task(batch("k+1", release[1]))
    await asyncio.sleep(0.01)
    assert gate.batches == 2
    revocation = asyncio.create_task(revoke())
    await asyncio.sleep(0.01)
    third = asyncio.create_task(batch("k+2", None))  # fetched before the revocation
    await asyncio.sleep(0.01)
    assert log == ["k started", "k+1 started"]  # the revocation waits, k+2 waits behind it
    release[1].set()
    await asyncio.sleep(0.01)
    assert "revoked" not in log  # k is still in flight
    release[0].set()
    await asyncio.gather(first, second, revocation, third)
    assert log == [
        "k started",
        "k+1 started",
        "k+1 committed",
        "k committed",
        "revoked",
        "k+2 started",
        "k+2 committed",
    ]
    assert gate.batches == 0


async def test_a_partition_stays_paused_until_every_failing_write_recovered() -> None:
    metrics, health = OpsMetrics(), IngestHealth(lambda: 0.0)
    retrier = PausedRetry(metrics, health, asyncio.Event(), initial_s=0.01, max_s=0.02)
    tp = TopicPartition("t", 0)  # no consumer: pausing is bookkeeping only here
    fail = {"a": 2, "b": 30}  # failures before each write succeeds

    async def op(name: str) -> str:
        if fail[name]:
            fail[name] -= 1
            raise ConnectionResetError(f"{name} lost the server")
        return name

    def retry(name: str) -> asyncio.Task[str]:
        return asyncio.create_task(
            retrier.retry(
                None,
                lambda: op(name),
                "store write",
                lambda e: isinstance(e, OSError),
                metrics.store_errors,
                [tp],
            )
        )

    a, b = retry("a"), retry("b")
    assert await a == "a"
    assert not b.done()
    # "a" recovered, "b" still fails: the partition stays paused, and /health says so
    assert health.paused and retrier.paused[tp] == 1
    assert "lost the server" in health.last_error
    assert await b == "b"
    assert not health.paused and health.last_error == "" and not retrier.paused
