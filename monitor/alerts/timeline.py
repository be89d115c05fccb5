"""Replay the alerting of a stretch of agent time: drift checks, rule evaluation, delivery.

The worker evaluates at the wall clock. Stored traffic whose timestamps span an hour (the
simulator's, a replayed file) can instead be walked through at its own times: at every ``step``
from ``start`` to ``end`` this runs the periodic drift checks as of that time (tracked: each
segment's pinned reference in ``drift_references`` evolves as it would in the worker), evaluates the
rules with ``now`` = that time (monitor.alerts.evaluate.evaluate_once: the real lifecycle, state
store and outbox), and lets the notifier deliver what became due. A final tick after ``end``
flushes notifications held by ``group_wait``. Used by ``monitor up`` (to show an alert firing and
resolving in a one-minute demo) and by the end-to-end alert tests.

It writes alert states like the worker does: do not run it against a database whose worker
evaluates at the same time (``monitor up`` turns the worker's alerting off).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy.ext.asyncio import AsyncEngine

from monitor.alerts.evaluate import EvaluationReport, evaluate_once
from monitor.alerts.notifier import Notifier
from monitor.alerts.rules import RuleSet
from monitor.analytics.periodic import DEFAULT_REFERENCE, drift_once
from monitor.core.clock import FixedClock


def flush_delay(rules: RuleSet) -> timedelta:
    """How long after the last step the final tick comes: every grouped notification held by
    ``group_wait`` or ``group_interval`` is due by then."""
    return max(rules.group_wait, rules.group_interval) + timedelta(seconds=1)


@dataclass(frozen=True)
class Tick:
    """One step of the replay: its time, drift checks that fired, the evaluation, deliveries."""

    at: datetime
    drift_fired: int
    report: EvaluationReport
    attempted: int


async def replay_alert_timeline(
    engine: AsyncEngine,
    rules: RuleSet,
    start: datetime,
    end: datetime,
    step: timedelta,
    *,
    sinks: Mapping[str, object],
    notifier: Notifier | None,
    drift_recent: timedelta = timedelta(minutes=20),
    drift_alpha: float = 0.001,
    drift_min_samples: int = 100,
    drift_reference: timedelta = DEFAULT_REFERENCE,
    drift_min_reference: float = 0.0,
    on_tick: Callable[[Tick], None] | None = None,
    not_after: datetime | None = None,
) -> list[Tick]:
    """Walk ``[start, end]`` in ``step``s (see the module docstring); returns every tick.

    ``not_after`` (the wall clock, when the traffic reaches up to now): no tick is later than
    it, so no alert state, history or outbox row is stamped in the future; steps after it are
    dropped and the flush tick moves back to it (end the replay ``group_interval`` earlier to
    keep the whole flush). ``drift_min_reference``: as the worker's ``drift_min_reference``
    (0 here: a demo's short history would otherwise never page).

    Raises ValueError for a non-positive ``step`` or ``end < start``.
    """
    if step <= timedelta(0) or end < start:
        raise ValueError("need step > 0 and end >= start")
    ticks: list[Tick] = []
    times = []
    t = start
    while t <= end and (not_after is None or t <= not_after):
        times.append(t)
        t += step
    flush = end + flush_delay(rules)
    if not_after is not None:
        flush = min(flush, not_after)
    if not times or flush > times[-1]:
        times.append(flush)
    names = sorted(sinks)
    for at in times:
        fired = await drift_once(
            engine,
            FixedClock(at),
            drift_recent,
            drift_alpha,
            drift_min_samples,
            drift_reference,
            drift_min_reference,
        )
        report = await evaluate_once(engine, rules, at, names)
        attempted = await notifier.run_once(at) if notifier is not None else 0
        tick = Tick(at, fired, report, attempted)
        ticks.append(tick)
        if on_tick is not None:
            on_tick(tick)
    return ticks
