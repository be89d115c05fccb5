"""How drift checks decide and what they compare against (pure, no I/O).

Four guards make a drift check worth a page (docs/analytics.md, "Drift: guards"; the rules'
``for:`` is a fifth):

1. **Minimum sizes per test** (:data:`TEST_MIN_SAMPLES`): a test runs only when the smaller
   window's effective size reaches ``max(min_samples, TEST_MIN_SAMPLES[test])``; PSI and the
   ECE test need more items than KS and the accuracy test (PSI of a 2-item window is noise:
   its null expectation is about (bins - 1)(1/n_b + 1/n_r)).
2. **Holm correction across the tests of a check** (:func:`holm`): the four tests of one
   check are one family; the check fires when Holm's step-down procedure rejects at least one
   hypothesis at family-wise level ``alpha``. Holm (not Benjamini-Hochberg) because a page is a
   family-wise decision (one false test is one false page, so the false-*discovery* share is
   the wrong quantity) and Holm is valid under any dependence (PSI and KS read the same
   distribution). Segments are not corrected for each other: pages are per segment and the
   goal is a false-page rate per segment. Repeated windows are handled by the pinned
   reference below and by the rules' ``for:`` (evidence must persist over several checks).
3. **A pinned reference** (:class:`Reference`, :func:`reference_window`, :func:`advance`):
   the baseline is a long window (``length``, the worker's default 24 h) of checked, unflagged
   traffic that rolls forward only while no check fires. When a check fires, the reference
   freezes, so the check keeps firing for as long as the change lasts (the old "previous
   period" baseline turned a change into the new normal one window later and "resolved" it).
   After the checks are quiet again, the reference stays pinned until a clean stretch as long
   as the reference itself exists; then it rolls again.
4. **A minimum reference** (:data:`MIN_REFERENCE`, passed by the worker): a smaller reference
   never fires, and the sequential ``surprise`` test (its own false-alarm bound, outside the
   Holm family) scans the :data:`SCAN_WINDOWS` only against a reference of that size.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

TEST_MIN_SAMPLES: Mapping[str, float] = {
    "psi": 200.0,
    "ks": 50.0,
    "accuracy_drop": 50.0,
    "ece_increase": 200.0,
}
"""Minimum effective size of the smaller window for each test (raised to ``min_samples``)."""

MIN_REFERENCE = 1000.0
"""Minimum effective size of a tracked check's reference before any of its tests may fire.
Every check compares with the same reference, so its sampling error is shared by all of them
(a reference whose accuracy is high by chance makes hours of checks see a "drop" that ``for:``
cannot filter); at n_eff >= 1000, about 7 recent windows of 150, that shared error is a small
part of each check's. The sequential ``surprise`` test also treats the reference's per-bin
accuracies as the truth (see docs/analytics.md, "Drift: the sequential test")."""

SURPRISE_MIN_REFERENCE = MIN_REFERENCE
"""Minimum effective size of the reference for the ``surprise`` test to run at all."""

SCAN_WINDOWS: tuple[timedelta, ...] = tuple(
    timedelta(minutes=m) for m in (15, 30, 60, 120, 180, 240, 360)
)
"""Candidate change points of the ``surprise`` test: windows ending with the recent window."""


def holm(pvalues: Mapping[str, float | None], alpha: float) -> tuple[str, ...]:
    """Names whose hypotheses Holm's step-down procedure rejects at family-wise ``alpha``.

    ``None`` p-values (test not run) do not count in the family. Sorted ascending, the k-th
    smallest p (k from 0, m tests) is rejected while ``p <= alpha / (m - k)``; the first that
    is not stops the procedure. Returned in the order of ``pvalues``. Raises ValueError for an
    ``alpha`` outside (0, 1)."""
    if not 0.0 < alpha < 1.0:
        raise ValueError("alpha must be in (0, 1)")
    run = sorted(((p, name) for name, p in pvalues.items() if p is not None))
    m = len(run)
    rejected: set[str] = set()
    for k, (p, name) in enumerate(run):
        if p > alpha / (m - k):
            break
        rejected.add(name)
    return tuple(name for name in pvalues if name in rejected)


@dataclass(frozen=True)
class Reference:
    """The drift state of one segment after a check.

    ``ref_from``/``ref_to``: the reference window the check used. ``clean_since``: start of the
    current stretch in which no check fired (None while a change is flagged).
    ``flagged_since``: end of the recent window of the first check that fired in the current
    episode (None when the last check did not fire). ``last_recent_to``: the last check's
    recent window end."""

    ref_from: datetime
    ref_to: datetime
    clean_since: datetime | None
    flagged_since: datetime | None
    last_recent_to: datetime

    @property
    def flagged(self) -> bool:
        """True while the last check fired."""
        return self.flagged_since is not None


def reference_window(
    state: Reference | None, recent_from: datetime, length: timedelta
) -> tuple[datetime, datetime]:
    """The reference the check whose recent window starts at ``recent_from`` compares with.

    - No state yet: ``[recent_from - length, recent_from)``.
    - Clean (no check fired since ``clean_since``): the rolling window ``[max(clean_since,
      recent_from - length), recent_from)`` once it is at least as long as the stored reference
      (or ``length``); before that the stored one.
    - Flagged: the stored reference, unchanged.

    Raises ValueError for a non-positive ``length``."""
    if length <= timedelta(0):
        raise ValueError("the reference length must be positive")
    if state is None:
        return (recent_from - length, recent_from)
    stored = (state.ref_from, state.ref_to)
    if state.clean_since is None:
        return stored
    lo = max(state.clean_since, recent_from - length)
    if recent_from - lo >= min(length, state.ref_to - state.ref_from):
        return (lo, recent_from)
    return stored


def advance(
    state: Reference | None,
    used: tuple[datetime, datetime],
    recent: tuple[datetime, datetime],
    fired: bool,
) -> Reference:
    """The state after a check that compared ``recent`` with the reference ``used``.

    A firing check ends the clean stretch (``clean_since`` None) and starts or continues an
    episode. A quiet check after an episode starts a clean stretch at the *end* of its recent
    window (the window may still hold changed traffic); a quiet check in a clean stretch keeps
    it. The first state's clean stretch starts at the reference's start."""
    if fired:
        since = state.flagged_since if state is not None else None
        return Reference(used[0], used[1], None, since or recent[1], recent[1])
    if state is None:
        return Reference(used[0], used[1], used[0], None, recent[1])
    clean = state.clean_since if state.clean_since is not None else recent[1]
    return replace(
        state,
        ref_from=used[0],
        ref_to=used[1],
        clean_since=clean,
        flagged_since=None,
        last_recent_to=recent[1],
    )


def accept(state: Reference | None, since: datetime, now: datetime) -> Reference:
    """The state after an operator accepts the segment's behaviour from ``since`` on as its new
    normal (``monitor drift-accept``).

    The reference becomes ``[since, now)`` with a clean stretch from ``since``: the next checks
    compare with that stretch and, once their recent window starts after ``now``, roll forward
    from ``since`` as usual. The flag is cleared, so a firing drift alert resolves at the next
    quiet check. Raises ValueError when ``since`` is not before ``now``."""
    if since >= now:
        raise ValueError("the accepted stretch must start before now")
    last = state.last_recent_to if state is not None else now
    return Reference(since, now, since, None, max(last, since))


def accepted_since(state: Reference | None, recent: timedelta) -> datetime | None:
    """Default start of an accepted change: the start of the recent window of the first check
    that fired in the current episode (``flagged_since - recent``); None when not flagged."""
    if state is None or state.flagged_since is None:
        return None
    return state.flagged_since - recent
