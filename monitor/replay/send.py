"""Replay orchestration: iterate items, rate-limit, send, count, collect bad lines.

Framework-free: the caller passes the items (``monitor.replay.reader`` or the simulator) and an
async ``send`` callable (a Kafka emitter's ``send``, a file writer, or ``None`` for a dry run).
Time is injected (``monotonic``, ``sleep``) so pacing is testable without waiting.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field

from monitor.contract.events import AgentEvent
from monitor.replay.reader import LineError, ReplayCounts, ReplayItem

SendFn = Callable[[AgentEvent], Awaitable[None]]
ProgressFn = Callable[[ReplayItem], None]


@dataclass
class ReplayReport:
    """What a replay did.

    Attributes:
        counts: valid events per type and number of bad lines seen (including the one that
            aborted a strict run).
        sent: events handed to ``send`` (0 for a dry run).
        errors: every bad line, in file order.
        aborted: the bad line that stopped a ``strict`` run, else ``None``.
        elapsed_s: monotonic seconds from the first item to the end.
    """

    counts: ReplayCounts = field(default_factory=ReplayCounts)
    sent: int = 0
    errors: list[LineError] = field(default_factory=list)
    aborted: LineError | None = None
    elapsed_s: float = 0.0

    @property
    def ok(self) -> bool:
        """True if the run was not aborted (skipped bad lines do not make it fail)."""
        return self.aborted is None


async def run_replay(
    items: Iterable[ReplayItem],
    send: SendFn | None,
    *,
    rate: float | None = None,
    strict: bool = False,
    on_item: ProgressFn | None = None,
    monotonic: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
) -> ReplayReport:
    """Validate, count and (unless ``send`` is ``None``) send every event of ``items``.

    Args:
        items: events and line errors, in order.
        send: awaited once per valid event, in order; ``None`` = dry run (validate and count).
        rate: most events per second (> 0); event ``k`` (0-based) is not sent before
            ``k / rate`` seconds after the start. ``None`` = as fast as possible. Line errors
            do not consume the budget. Applies to dry runs too.
        strict: stop at the first line error (it is counted and set as ``aborted``).
        on_item: called after each item is handled (progress bars, error printing).

    Raises:
        ValueError: ``rate`` <= 0.
        Whatever ``send`` raises propagates (nothing is swallowed); events already sent stay
        sent.
    """
    if rate is not None and rate <= 0:
        raise ValueError("rate must be > 0 events per second")
    report = ReplayReport()
    started = monotonic()
    pace = 0
    for item in items:
        if isinstance(item, LineError):
            report.counts.add(item)
            report.errors.append(item)
            if on_item is not None:
                on_item(item)
            if strict:
                report.aborted = item
                break
            continue
        if rate is not None:
            due = started + pace / rate
            now = monotonic()
            if due > now:
                await sleep(due - now)
            pace += 1
        if send is not None:
            await send(item)
            report.sent += 1
        report.counts.add(item)
        if on_item is not None:
            on_item(item)
    report.elapsed_s = monotonic() - started
    return report
