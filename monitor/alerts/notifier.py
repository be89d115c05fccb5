"""The notifier: delivers the ``notification_outbox`` rows to their sinks, with retries.

Protocol (several notifiers may run at once against one database):

1. Claim (short transaction): due rows (``status = 'pending' AND next_attempt_at <= now``) of
   the configured sinks, ``FOR UPDATE SKIP LOCKED``, skipping a row while an earlier row of the
   same sink and incident (else fingerprint, ``group_key`` for a grouped payload) is still
   pending, so each incident's (fingerprint's) messages arrive in order. The claim bumps
   ``attempts`` and moves ``next_attempt_at`` to ``now + lease``, then commits.
2. Send, outside any transaction, bounded by half the lease. A notifier killed here leaves the
   row pending; another (or the restarted one) sends it again once the lease expires: at most
   one duplicate per crash, with the same ``Idempotency-Key``.
3. Record: ``delivered`` (+ ``delivered_at`` and the sink's ``response``, plus the ``episodes``
   a firing message opened, so a resolved message can thread under it, and ``incident`` when
   it is the first message of its incident on that sink, the thread its updates go to); or a
   retry at
   ``now + RetryPolicy.delay`` (full jitter, or the server's ``Retry-After``, capped); or
   ``failed`` with the reason after ``max_attempts`` or a permanent error.

Sinks are delivered in independent lanes, one per sink, each with its own concurrency bound:
a lane claims, sends and records only its sink's rows, so a sink that is down or hangs (up to
half the lease per attempt) delays only its own rows; the other lanes keep claiming and
delivering on time. Rows of a sink the notifier does not know stay pending.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import random
import signal
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncEngine

from monitor.alerts.outbox import CLAIM_SQL, NEXT_DUE_SQL, THREAD_SQL, enqueue
from monitor.alerts.sink_check import SinkTestResult, sample_notification, test_sinks
from monitor.alerts.sinks.base import DeliveryContext, DeliveryResult, Sink, classify_exception
from monitor.alerts.sinks.registry import configured_sinks
from monitor.alerts.sinks.slack_blocks import episodes
from monitor.alerts.states import Kind
from monitor.config import Settings, load_settings
from monitor.core.errors import ConfigError
from monitor.core.resilience import RetryPolicy
from monitor.store.tables_alerts import notification_outbox

__all__ = [
    "Notifier",
    "SinkTestResult",
    "default_retry",
    "enqueue",
    "main",
    "notifier_from_settings",
    "sample_notification",
    "serve",
    "test_sinks",
]
log = logging.getLogger(__name__)


def utcnow() -> datetime:
    """The current aware UTC time (the default clock)."""
    return datetime.now(UTC)


def default_retry(max_attempts: int) -> RetryPolicy:
    """Backoff for notifications: 1 s doubling to 5 min, ``Retry-After`` honoured up to 10 min."""
    return RetryPolicy(max_attempts, base_delay=1.0, max_delay=300.0, max_retry_after=600.0)


@dataclass(frozen=True)
class Claimed:
    """A claimed outbox row (``attempts`` already counts this attempt)."""

    id: int
    idempotency_key: str
    sink: str
    payload: dict[str, Any]
    attempts: int


class Notifier:
    """Delivers outbox rows (see the module docstring). ``clock`` returns aware datetimes,
    ``sleep`` and ``rand`` are injectable for tests; ``retry.max_attempts`` bounds attempts."""

    def __init__(
        self,
        engine: AsyncEngine,
        sinks: Mapping[str, Sink],
        retry: RetryPolicy,
        lease_s: float = 60.0,
        clock: Callable[[], datetime] = utcnow,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        rand: Callable[[], float] = random.random,
        batch_size: int = 100,
        poll_interval_s: float = 1.0,
        concurrency: int = 16,
    ) -> None:
        if lease_s <= 0:
            raise ValueError(f"lease_s must be > 0, got {lease_s}")
        self._engine = engine
        self._sinks = dict(sinks)
        self._retry = retry
        self._lease = timedelta(seconds=lease_s)
        self._clock, self._sleep, self._rand = clock, sleep, rand
        self._batch = batch_size
        self._poll = poll_interval_s
        self._semaphores = {name: asyncio.Semaphore(concurrency) for name in self._sinks}

    async def run_once(self, now: datetime | None = None) -> int:
        """Attempt every row due at ``now`` (default: the clock) once; returns how many.

        Each sink's lane runs concurrently (see the module docstring). Rows that become due
        during the call because an earlier row of their fingerprint was recorded are attempted
        too; a row scheduled for retry is not attempted again."""
        now = now or self._clock()
        counts = await asyncio.gather(*(self._lane_once(name, now) for name in self._sinks))
        return sum(counts)

    async def _lane_once(self, sink: str, now: datetime) -> int:
        seen: list[int] = []
        while rows := await self._claim(now, seen, sink):
            seen.extend(r.id for r in rows)
            await asyncio.gather(*(self._deliver(r) for r in rows))
        return len(seen)

    async def run(self, stop: asyncio.Event, wake: asyncio.Event | None = None) -> None:
        """Deliver until ``stop`` is set, one independent lane per sink: a lane makes a pass,
        then sleeps until its next row is due (at most ``poll_interval_s``, or until ``wake`` is
        set: an evaluator in the same process sets it after writing outbox rows, so a page does
        not wait for the next poll). Database errors are logged and retried on the next pass."""
        lane_wakes = {name: asyncio.Event() for name in self._sinks}

        async def fan_out() -> None:
            assert wake is not None
            while not stop.is_set():
                await wake.wait()
                wake.clear()
                for event in lane_wakes.values():
                    event.set()

        tasks = [asyncio.create_task(self._lane(n, stop, lane_wakes[n])) for n in self._sinks]
        if wake is not None:
            tasks.append(asyncio.create_task(fan_out()))
        try:
            await stop.wait()
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    async def _lane(self, sink: str, stop: asyncio.Event, wake: asyncio.Event) -> None:
        while not stop.is_set():
            wake.clear()
            delay = self._poll
            try:
                await self._lane_once(sink, self._clock())
                async with self._engine.connect() as conn:
                    due = (await conn.execute(NEXT_DUE_SQL, {"sinks": [sink]})).scalar()
                if due is not None:
                    delay = min(delay, max(0.0, (due - self._clock()).total_seconds()))
            except (OSError, SQLAlchemyError) as exc:
                log.warning(
                    "notifier (%s): database unavailable (%s); retrying", sink, type(exc).__name__
                )
            waiters = {
                asyncio.ensure_future(self._sleep(delay)),
                asyncio.ensure_future(stop.wait()),
                asyncio.ensure_future(wake.wait()),
            }
            await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
            for task in waiters:
                task.cancel()

    async def _claim(self, now: datetime, seen: list[int], sink: str) -> list[Claimed]:
        params = {
            "now": now,
            "sinks": [sink],
            "seen": seen,
            "limit": self._batch,
            "lease_until": now + self._lease,
        }
        async with self._engine.begin() as conn:
            result = await conn.execute(CLAIM_SQL, params)
            rows = [Claimed(r[0], r[1], r[2], r[3], r[4]) for r in result.all()]
        return sorted(rows, key=lambda r: r.id)

    async def _thread(self, row: Claimed) -> dict[str, Any] | None:
        """The stored response of the message ``row`` replies to: its incident's first
        message on the sink (any message of an incident but its opening page), else the
        firing message of the episode it resolves; None when there is none."""
        incident = row.payload.get("incident_id")
        probes: list[dict[str, Any]] = []
        if isinstance(incident, str) and row.payload.get("incident_role") != "open":
            probes.append({"incident": incident})
        with contextlib.suppress(KeyError, TypeError, ValueError):
            probes.extend({"episodes": [key]} for key in episodes(row.payload, (Kind.RESOLVED,)))
        async with self._engine.connect() as conn:
            for probe in probes:
                found = await conn.execute(
                    THREAD_SQL, {"sink": row.sink, "probe": json.dumps(probe)}
                )
                response = found.scalar()
                if isinstance(response, dict):
                    return response
        return None

    async def _deliver(self, row: Claimed) -> None:
        async with self._semaphores[row.sink]:
            sink = self._sinks[row.sink]
            try:
                thread = await self._thread(row)
                ctx = DeliveryContext(row.idempotency_key, row.attempts, self._clock(), thread)
                timeout = self._lease.total_seconds() / 2
                result = await asyncio.wait_for(sink.deliver(row.payload, ctx), timeout)
            except Exception as exc:
                thread = None
                result = classify_exception(exc, row.sink)
            await self._record(row, result, threaded=thread is not None)

    async def _record(self, row: Claimed, result: DeliveryResult, threaded: bool = False) -> None:
        now = self._clock()
        if result.ok:
            response = dict(result.response)
            try:
                opened = episodes(row.payload, (Kind.FIRING,))
            except (KeyError, TypeError, ValueError):
                opened = []
            if opened:
                response["episodes"] = opened
            incident = row.payload.get("incident_id")
            if isinstance(incident, str) and not threaded:
                response["incident"] = incident
            values: dict[str, Any] = {"status": "delivered", "delivered_at": now}
            values |= {"response": response, "last_error": None}
            where = notification_outbox.c.status == "pending"
        else:
            error = result.error or result.outcome
            if result.outcome == "retry" and self._retry.should_retry(row.attempts):
                wait = self._retry.delay(row.attempts, self._rand, result.retry_after)
                values = {"next_attempt_at": now + timedelta(seconds=wait), "last_error": error}
                log.info(
                    "notification %s to %s: %s; retry in %.1fs",
                    row.idempotency_key,
                    row.sink,
                    error,
                    wait,
                )
            else:
                why = "permanent error" if result.outcome == "permanent" else "gave up"
                error = f"{why} after {row.attempts} attempt(s): {error}"
                values = {"status": "failed", "last_error": error}
                log.warning(
                    "notification %s to %s failed: %s", row.idempotency_key, row.sink, error
                )
            where = (notification_outbox.c.status == "pending") & (
                notification_outbox.c.attempts == row.attempts
            )
        stmt = notification_outbox.update().where(notification_outbox.c.id == row.id, where)
        async with self._engine.begin() as conn:
            await conn.execute(stmt.values(**values))


def notifier_from_settings(
    settings: Settings, engine: AsyncEngine, sinks: Mapping[str, Sink] | None = None
) -> Notifier:
    """A Notifier for the configured sinks with ``notify_max_attempts`` and ``notify_lease_s``."""
    return Notifier(
        engine,
        configured_sinks(settings) if sinks is None else sinks,
        default_retry(settings.notify_max_attempts),
        lease_s=settings.notify_lease_s,
    )


async def serve(settings: Settings, stop: asyncio.Event) -> None:
    """Run a notifier on ``settings`` until ``stop`` is set. Raises ConfigError without a
    database URL (the notifier needs the shared database, not an embedded one)."""
    from monitor.store.engine import make_engine

    if not settings.database_url:
        raise ConfigError("database_url: required to run the notifier")
    engine = make_engine(settings.database_url, pool_size=4)
    sinks = configured_sinks(settings)
    try:
        await notifier_from_settings(settings, engine, sinks).run(stop)
    finally:
        await asyncio.gather(*(s.aclose() for s in sinks.values()))
        await engine.dispose()


def main() -> None:
    """``python -m monitor.alerts.notifier``: run a notifier until SIGTERM or SIGINT."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    for noisy in ("httpx", "httpcore", "slack_sdk"):  # they log request URLs (webhook secrets)
        logging.getLogger(noisy).setLevel(logging.WARNING)

    async def _main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await serve(load_settings(), stop)

    asyncio.run(_main())


if __name__ == "__main__":  # pragma: no cover
    main()
