"""Periodic analytics jobs the worker runs: drift checks on a timer.

:func:`drift_once` checks every segment with labelled items in the last ``recent`` (whole
minutes, ending at the current minute) against that segment's **pinned reference**
(:mod:`monitor.analytics.drift_policy`): a window of ``reference`` length (default 24 h) of
earlier, unflagged traffic that rolls forward only while no check fires, kept in
``drift_references``. A change therefore stays flagged until the agent is back to its reference,
instead of becoming the new normal one window later. Each check is stored (``drift_checks``,
upserted per segment and windows, so several workers running the same job at the same minute
write the same rows once) and so is the new state. The tests of a check are Holm-corrected at
family-wise ``alpha``. A segment without recent items is not checked (its state and any firing
alert hold: no evidence either way). :class:`Every` runs a job every ``interval_s`` until
stopped; a failing run is logged and retried at the next tick.

Cost: a round is a fixed number of set-based reads (every segment's sums of a window in one
query; the sequential test's scan windows only when some reference is large enough for it),
the checks computed together (:func:`monitor.analytics.drift.check_drift_many`), and one
statement each for the checks and the states: thousands of segments cost a fraction of a
millisecond of work each and no round trip or commit of their own. The independent reads (the
states and the recent window; a window's bin sums and design effects) and the two writes run
two at a time on two connections, so the store works while the worker decodes or checks
(``bench/drift_scale.py``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta
from typing import cast

from sqlalchemy.ext.asyncio import AsyncEngine

from monitor.analytics.bins import BinSums, sum_all
from monitor.analytics.design_effect import design_effects
from monitor.analytics.drift import DriftCheck, check_drift_many, runs_surprise
from monitor.analytics.drift_policy import SCAN_WINDOWS, Reference, advance, reference_window
from monitor.analytics.drift_state import load_references, save_references
from monitor.analytics.repo import Segment, bin_sum_rows
from monitor.analytics.reports import drift_windows
from monitor.analytics.write import SegmentKey, save_drifts
from monitor.core.clock import Clock

log = logging.getLogger("monitor.periodic")

DEFAULT_REFERENCE = timedelta(hours=24)
_KEYS = ("agent_id", "agent_version", "domain", "tier")


async def _window_sums(
    engine: AsyncEngine, lo: datetime, hi: datetime, segment: Segment
) -> dict[SegmentKey, BinSums]:
    rows, deffs = await asyncio.gather(  # two connections: the store works while we decode
        bin_sum_rows(engine, segment, lo, hi, group_by=_KEYS, ordered=False),
        design_effects(engine, segment, lo, hi, group_by=_KEYS),
    )
    # the keys as stored (text, text, text, smallint: SegmentKey's types), each group's sums
    # with its design effect applied while grouping
    sums = BinSums.grouped(rows, len(_KEYS), design_effects=deffs)
    return cast(dict[SegmentKey, BinSums], sums)


Window = tuple[datetime, datetime]


async def drift_against_references(
    engine: AsyncEngine,
    now: datetime,
    recent: timedelta,
    *,
    alpha: float,
    min_samples: int,
    reference: timedelta = DEFAULT_REFERENCE,
    segment: Segment | None = None,
    track: bool = True,
    store: bool = True,
    min_reference: float = 0.0,
) -> dict[SegmentKey, tuple[Window, DriftCheck]]:
    """Check every segment (of ``segment``, default all) with labelled items in the recent
    window ending at ``now`` against its pinned reference; per segment the reference window
    used and the check. ``store``: save each check (``drift_checks``). ``track``: also advance
    each segment's stored state (``drift_references``): the worker's rounds do; an ad-hoc
    check (``monitor drift``) reads the state and leaves it as it is, so it cannot move the
    reference the alerts compare with. ``min_reference``: a reference with fewer effective
    items never fires (:data:`monitor.analytics.drift_policy.MIN_REFERENCE`)."""
    seg = segment if segment is not None else Segment()
    rec = drift_windows(now, recent).recent
    states, recent_sums = await asyncio.gather(
        load_references(engine), _window_sums(engine, *rec, seg)
    )
    cache: dict[Window, dict[SegmentKey, BinSums]] = {}
    refs: dict[SegmentKey, tuple[Window, BinSums]] = {}
    none = sum_all([])  # one empty reference for all without items (read-only: shared)
    for key in sorted(recent_sums):
        ref = reference_window(states.get(key), rec[0], reference)
        if ref not in cache:  # most segments share their reference window: one query each
            cache[ref] = await _window_sums(engine, *ref, seg)
        refs[key] = (ref, cache[ref].get(key, none))
    # the sequential test's windows, read only when a reference is large enough for it
    scans = (
        [await _window_sums(engine, rec[1] - w, rec[1], seg) for w in SCAN_WINDOWS]
        if any(runs_surprise(base) for _, base in refs.values())
        else []
    )
    checks = check_drift_many(
        [
            (base, recent_sums[key], [s[key] for s in scans if key in s])
            for key, (_, base) in refs.items()
        ],
        alpha=alpha,
        min_samples=min_samples,
        min_reference=min_reference,
    )
    out: dict[SegmentKey, tuple[Window, DriftCheck]] = {}
    advanced: dict[SegmentKey, Reference] = {}
    for (key, (ref, _)), check in zip(refs.items(), checks, strict=True):
        advanced[key] = advance(states.get(key), ref, rec, check.fired)
        out[key] = (ref, check)
    # one transaction each for all segments (one per segment cost more than the checks), the
    # two on two connections at once (different tables: neither waits for the other)
    writes = []
    if store:
        writes.append(
            save_drifts(engine, [(key, ref, rec, check) for key, (ref, check) in out.items()])
        )
    if track:
        writes.append(save_references(engine, advanced))
    await asyncio.gather(*writes)
    return out


async def drift_once(
    engine: AsyncEngine,
    clock: Clock,
    recent: timedelta,
    alpha: float,
    min_samples: int,
    reference: timedelta = DEFAULT_REFERENCE,
    min_reference: float = 0.0,
) -> int:
    """Run and store one round of tracked drift checks; returns how many segments fired."""
    found = await drift_against_references(
        engine,
        clock.now(),
        recent,
        alpha=alpha,
        min_samples=min_samples,
        reference=reference,
        min_reference=min_reference,
    )
    fired = [k for k, (_ref, check) in found.items() if check.fired]
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
