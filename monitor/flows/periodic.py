"""Periodic analytics jobs the worker runs: drift checks on a timer.

:func:`drift_once` checks every segment with labelled items: the last ``recent`` (whole
minutes, ending at the current minute) against the period just before it, and stores each
check (``drift_checks``, upserted per segment and windows, so several workers running the same
job at the same minute write the same rows once). :class:`Every` runs a job every
``interval_s`` until stopped; a failing run is logged and retried at the next tick.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from datetime import timedelta

from sqlalchemy.ext.asyncio import AsyncEngine

from monitor.clock import Clock
from monitor.flows.analytics import drift_windows, run_drift
from monitor.store.analytics_repo import Segment

log = logging.getLogger("monitor.periodic")


async def drift_once(
    engine: AsyncEngine, clock: Clock, recent: timedelta, alpha: float, min_samples: int
) -> int:
    """Run and store one round of drift checks; returns how many segments fired."""
    windows = drift_windows(clock.now(), recent)
    checks = await run_drift(engine, Segment(), windows, alpha=alpha, min_samples=min_samples)
    fired = [k for k, c in checks.items() if c.fired]
    if fired:
        log.info("drift fired for %s", ", ".join(f"{k[0]}/{k[2] or '-'}" for k in fired))
    return len(fired)


class Every:
    """Run ``job`` every ``interval_s`` seconds until :meth:`stop` (first run after one
    interval, so a starting worker does not hit the store at once)."""

    def __init__(self, name: str, interval_s: float, job: Callable[[], Awaitable[object]]) -> None:
        self.name = name
        self.interval_s = interval_s
        self.job = job
        self._stopping = asyncio.Event()

    async def run(self) -> None:
        while True:
            try:
                await asyncio.wait_for(self._stopping.wait(), self.interval_s)
                return
            except TimeoutError:
                pass
            try:
                await self.job()
            except Exception as exc:  # a failed run must not end the loop
                log.warning("%s failed: %s", self.name, exc)

    def stop(self) -> None:
        self._stopping.set()
