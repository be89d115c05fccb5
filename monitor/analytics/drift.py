"""Drift of one segment: a recent window against a baseline window (pure math, no I/O).

Two entry points return the same :class:`DriftCheck`: :func:`check_drift_raw` from two windows
of raw labelled items (:class:`LabelledItems`: confidence, 0/1 label, sampling weight) and
:func:`check_drift_sums` from the per-bin additive sums the store keeps
(:class:`monitor.analytics.bins.BinSums`).

The four tests (defined, documented and each callable alone in :mod:`monitor.analytics.drift_tests`,
re-exported here):

- ``psi``: population stability index of the weighted confidence distribution over the fixed
  bins (smoothed with ε = 1e-4); fires above ``psi_threshold`` (0.25) when its chi-square
  p-value (:func:`psi_pvalue`) is also below ``alpha`` (a small sample's PSI is large by
  chance alone).
- ``ks``: two-sample Kolmogorov-Smirnov: ``scipy.stats.ks_2samp`` on raw confidences, or the
  conservative binned approximation from sums.
- ``accuracy_drop``: one-sided pooled two-proportion z-test, H1: recent accuracy < baseline.
- ``ece_increase``: one-sided test of ΔECE = ECE_recent - ECE_baseline > 0 (ECE as in
  docs/design.md): a seeded permutation test from raw items, a parametric bootstrap from sums.

Sample sizes: proportions and distributions use the weights (inverse inclusion probabilities);
tests use Kish's effective size n_eff = (Σw)² / Σw² (the raw count for unit weights).  A check
whose smaller window has n_eff < ``min_samples`` still reports its statistics but never fires;
each test also needs ``max(min_samples, TEST_MIN_SAMPLES[test])`` (PSI and ECE: 200).

Decision: the tests that ran form one family; the check fires when Holm's step-down procedure
rejects at least one of them at family-wise level ``alpha`` (a PSI at or below
``psi_threshold`` counts as p = 1), or when the sequential ``surprise`` test
(:func:`surprise_e_detector`, given candidate change-point windows) reaches its own threshold.
See :mod:`monitor.analytics.drift_policy` for why Holm.
Malformed input raises ValueError; small or empty windows are not errors.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any, Literal

import numpy as np

from monitor.analytics.bins import DEFAULT_BINS, BinSums
from monitor.analytics.drift_policy import SURPRISE_MIN_REFERENCE, TEST_MIN_SAMPLES
from monitor.analytics.drift_policy import holm as holm_reject
from monitor.analytics.drift_tests import PSI_EPSILON as PSI_EPSILON
from monitor.analytics.drift_tests import (
    SURPRISE_CONCENTRATIONS,
    SURPRISE_GROUPS,
    SURPRISE_LOG_THRESHOLD,
    _rows,
    _vec,
)
from monitor.analytics.drift_tests import FloatArray as FloatArray
from monitor.analytics.drift_tests import LabelledItems as LabelledItems
from monitor.analytics.drift_tests import StatResult as StatResult
from monitor.analytics.drift_tests import ece_change_bootstrap as ece_change_bootstrap
from monitor.analytics.drift_tests import ece_change_permutation as ece_change_permutation
from monitor.analytics.drift_tests import ece_of as ece_of
from monitor.analytics.drift_tests import ks_binned as ks_binned
from monitor.analytics.drift_tests import ks_binned_many as ks_binned_many
from monitor.analytics.drift_tests import ks_raw as ks_raw
from monitor.analytics.drift_tests import psi as psi
from monitor.analytics.drift_tests import psi_level as psi_level
from monitor.analytics.drift_tests import psi_pvalue as psi_pvalue
from monitor.analytics.drift_tests import surprise_e_detector as surprise_e_detector
from monitor.analytics.drift_tests import two_proportion_z as two_proportion_z
from monitor.core.lazy import lazy_module

special = lazy_module("scipy.special")

TEST_NAMES = ("psi", "ks", "accuracy_drop", "ece_increase", "surprise")
SEQUENTIAL_TESTS = frozenset({"surprise"})
"""Tests that are always valid over time (e-processes with their own false-alarm bound): a
rule need not wait its ``for`` for them to persist."""


@dataclass(frozen=True)
class DriftCheck:
    """One drift check of a segment: every statistic, p-value and sample size behind them.

    ``n_*`` are raw item counts, ``n_eff_*`` the effective sizes the tests used, ``weight_*``
    the weighted counts.  Statistics are None when a window is empty.  ``fired`` is True when
    at least one test in ``fired_tests`` (a subset of :data:`TEST_NAMES`) fired and both windows
    reach ``min_samples``; ``reason`` always says why it did or did not fire."""

    method: Literal["raw", "sums"]
    n_bins: int
    alpha: float
    min_samples: int
    psi_threshold: float
    n_baseline: int
    n_recent: int
    n_eff_baseline: float
    n_eff_recent: float
    weight_baseline: float
    weight_recent: float
    psi: float | None
    psi_level: str | None
    psi_pvalue: float | None
    ks_statistic: float | None
    ks_pvalue: float | None
    accuracy_baseline: float | None
    accuracy_recent: float | None
    accuracy_z: float | None
    accuracy_pvalue: float | None
    ece_baseline: float | None
    ece_recent: float | None
    ece_delta: float | None
    ece_pvalue: float | None
    surprise_log_e: float | None
    n_resamples: int
    seed: int
    fired: bool
    fired_tests: tuple[str, ...]
    reason: str

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready dict (``fired_tests`` as a list; no NaN anywhere). Every field is a
        scalar but ``fired_tests``: read field by field (``asdict`` copies recursively, a
        tenth of a millisecond per check, which a round over thousands of segments pays)."""
        out = {name: getattr(self, name) for name in _CHECK_FIELDS}
        out["fired_tests"] = list(self.fired_tests)
        return out


_CHECK_FIELDS = tuple(f.name for f in fields(DriftCheck))


def _n_eff_total(s: BinSums) -> float:
    s2 = float(_vec(s.sum_w2).sum())
    return float(_vec(s.weight).sum()) ** 2 / s2 if s2 > 0 else 0.0


def runs_surprise(baseline: BinSums) -> bool:
    """Whether :func:`check_drift_sums` runs the sequential ``surprise`` test against
    ``baseline`` when given scan windows (its effective size reaches
    :data:`monitor.analytics.drift_policy.SURPRISE_MIN_REFERENCE`): a caller reads the scan
    windows only for such segments."""
    return _n_eff_total(baseline) >= SURPRISE_MIN_REFERENCE


@dataclass(frozen=True)
class WindowTotals:
    """The per-window scalars of a check of ``(baseline, recent)`` sums: effective sizes,
    weights, item counts, and (both windows weighted) PSI, its p-value, accuracies and ECEs.
    :func:`window_totals` computes one pair's, :func:`window_totals_many` many pairs' at once
    with the same arithmetic (row sums of the stacked bins: the same bits as each pair's)."""

    ne_b: float
    ne_r: float
    w_b: float
    w_r: float
    n_b: int
    n_r: int
    psi: float | None
    psi_pvalue: float | None
    acc_b: float | None
    acc_r: float | None
    ece_b: float | None
    ece_r: float | None


def window_totals(base: BinSums, rec: BinSums) -> WindowTotals:
    """:class:`WindowTotals` of one pair of windows (ValueError on malformed sums)."""
    ne_b, ne_r = _n_eff_total(base), _n_eff_total(rec)
    w_b, w_r = float(_vec(base.weight).sum()), float(_vec(rec.weight).sum())
    empty = not (w_b > 0 and w_r > 0)
    p = None if empty else psi(base.weight, rec.weight)
    return WindowTotals(
        ne_b=ne_b,
        ne_r=ne_r,
        w_b=w_b,
        w_r=w_r,
        n_b=int(_vec(base.count).sum()),
        n_r=int(_vec(rec.count).sum()),
        psi=p,
        psi_pvalue=None if p is None else psi_pvalue(p, base.weight, rec.weight, ne_b, ne_r),
        acc_b=None if empty else min(1.0, float(_vec(base.sum_y).sum()) / w_b),  # no ulp > 1
        acc_r=None if empty else min(1.0, float(_vec(rec.sum_y).sum()) / w_r),
        ece_b=None if empty else ece_of(base),
        ece_r=None if empty else ece_of(rec),
    )


def window_totals_many(windows: Sequence[tuple[BinSums, BinSums]]) -> list[WindowTotals]:
    """:func:`window_totals` of each ``(baseline, recent)``, the sums, PSIs and ECEs of all
    pairs computed on stacked arrays (a few dozen array operations per round instead of a few
    dozen per segment). Pairs that the vectorised path cannot take as they are (different
    numbers of bins, negative weights) go through :func:`window_totals`, which raises."""
    n = len(windows)
    if n == 0:
        return []
    k = len(_vec(windows[0][0].weight))
    # BinSums hold 1-d arrays: their lengths are their sizes
    if any(b.weight.shape != (k,) or r.weight.shape != (k,) for b, r in windows):
        return [window_totals(b, r) for b, r in windows]

    def stack(field: str, which: int) -> FloatArray:
        # BinSums' arrays are 1-d, each field of one shape: every one of length k
        return _rows([getattr(w[which], field) for w in windows], k)

    wb_bins, wr_bins = stack("weight", 0), stack("weight", 1)
    wb, wr = wb_bins.sum(axis=1), wr_bins.sum(axis=1)
    s2b, s2r = stack("sum_w2", 0).sum(axis=1), stack("sum_w2", 1).sum(axis=1)
    yb_bins, yr_bins = stack("sum_y", 0), stack("sum_y", 1)
    yb, yr = yb_bins.sum(axis=1), yr_bins.sum(axis=1)
    nb, nr = stack("count", 0).sum(axis=1), stack("count", 1).sum(axis=1)
    gap_b = np.abs(yb_bins - stack("sum_conf", 0)).sum(axis=1)
    gap_r = np.abs(yr_bins - stack("sum_conf", 1)).sum(axis=1)
    used = np.count_nonzero((wb_bins > 0) | (wr_bins > 0), axis=1)
    # PSI of the pairs with weight in both windows and no negative weight (psi's own rules)
    ok = (wb > 0) & (wr > 0) & (wb_bins.min(axis=1) >= 0) & (wr_bins.min(axis=1) >= 0)
    rows = np.flatnonzero(ok)
    psis = np.full(n, np.nan)
    if rows.size:
        scale = 1 + k * PSI_EPSILON
        pb = (wb_bins[rows] / wb[rows, None] + PSI_EPSILON) / scale
        pr = (wr_bins[rows] / wr[rows, None] + PSI_EPSILON) / scale
        psis[rows] = ((pr - pb) * np.log(pr / pb)).sum(axis=1)
    # the per-pair scalars as Python floats at once (indexing arrays element by element
    # costs more than the arithmetic); the arithmetic below is that of window_totals
    wb_, wr_, s2b_, s2r_ = wb.tolist(), wr.tolist(), s2b.tolist(), s2r.tolist()
    yb_, yr_, gb_, gr_ = yb.tolist(), yr.tolist(), gap_b.tolist(), gap_r.tolist()
    nb_, nr_, psis_, used_, ok_ = (
        nb.tolist(),
        nr.tolist(),
        psis.tolist(),
        used.tolist(),
        ok.tolist(),
    )
    ne: list[tuple[float, float] | None] = []  # None: a pair window_totals takes (and raises)
    chi: dict[int, tuple[int, float]] = {}  # pair -> (degrees of freedom, PSI's chi-square)
    for i in range(n):
        w_b, w_r = wb_[i], wr_[i]
        empty = not (w_b > 0 and w_r > 0)
        if not empty and not ok_[i]:
            ne.append(None)
            continue
        s2_b, s2_r = s2b_[i], s2r_[i]
        ne_b = w_b**2 / s2_b if s2_b > 0 else 0.0
        ne_r = w_r**2 / s2_r if s2_r > 0 else 0.0
        ne.append((ne_b, ne_r))
        if not (empty or min(ne_b, ne_r) <= 0 or used_[i] < 2):
            chi[i] = (used_[i] - 1, psis_[i] * ne_b * ne_r / (ne_b + ne_r))
    # PSI's p-values in one ufunc call (each element's value is the scalar call's)
    pvs = dict(
        zip(
            chi,
            special.chdtrc(
                np.array([c[0] for c in chi.values()], dtype=np.float64),
                np.array([c[1] for c in chi.values()], dtype=np.float64),
            ).tolist()
            if chi
            else [],
            strict=True,
        )
    )
    out = []
    for i, (base, rec) in enumerate(windows):
        sizes = ne[i]
        if sizes is None:
            out.append(window_totals(base, rec))  # raises as psi does
            continue
        ne_b, ne_r = sizes
        w_b, w_r = wb_[i], wr_[i]
        empty = not (w_b > 0 and w_r > 0)
        out.append(
            WindowTotals(
                ne_b=ne_b,
                ne_r=ne_r,
                w_b=w_b,
                w_r=w_r,
                n_b=int(nb_[i]),
                n_r=int(nr_[i]),
                psi=None if empty else psis_[i],
                psi_pvalue=None if empty else pvs.get(i, 1.0),
                acc_b=None if empty else min(1.0, yb_[i] / w_b),
                acc_r=None if empty else min(1.0, yr_[i] / w_r),
                ece_b=None if empty else gb_[i] / w_b,
                ece_r=None if empty else gr_[i] / w_r,
            )
        )
    return out


def _check(
    method: Literal["raw", "sums"],
    base: BinSums,
    rec: BinSums,
    ks: StatResult | None,
    ece: StatResult | None,
    n_bins: int,
    alpha: float,
    min_samples: int,
    psi_threshold: float,
    n_resamples: int,
    seed: int,
    use_holm: bool = True,
    test_min: Mapping[str, float] | None = TEST_MIN_SAMPLES,
    surprise: StatResult | None = None,
    surprise_log_threshold: float = SURPRISE_LOG_THRESHOLD,
    min_reference: float = 0.0,
    totals: WindowTotals | None = None,
) -> DriftCheck:
    tot = window_totals(base, rec) if totals is None else totals
    ne_b, ne_r, w_b, w_r = tot.ne_b, tot.ne_r, tot.w_b, tot.w_r
    p, p_psi, acc_b, acc_r = tot.psi, tot.psi_pvalue, tot.acc_b, tot.acc_r
    acc = (
        None
        if acc_b is None or acc_r is None
        else two_proportion_z(acc_b * ne_b, ne_b, acc_r * ne_r, ne_r)
    )
    pvalues: dict[str, float | None] = {
        "psi": p_psi if p is not None and p > psi_threshold else (None if p is None else 1.0),
        "ks": None if ks is None else ks.pvalue,
        "accuracy_drop": None if acc is None else acc.pvalue,
        "ece_increase": None if ece is None else ece.pvalue,
    }
    smaller = min(ne_b, ne_r)
    skipped = [
        t
        for t, v in pvalues.items()
        if v is not None
        and test_min is not None
        and smaller < max(min_samples, test_min.get(t, 0.0))
    ]
    for t in skipped:
        pvalues[t] = None
    if use_holm:
        fired = list(holm_reject(pvalues, alpha))
    else:  # the uncorrected decision (kept to measure it against): any test below alpha
        fired = [t for t, v in pvalues.items() if v is not None and v < alpha]
    if surprise is not None and surprise.statistic >= surprise_log_threshold:
        fired.append("surprise")  # its own false-alarm control, outside the Holm family
    note = f" (too few samples for {', '.join(skipped)})" if skipped else ""
    if smaller < min_samples:
        fired = []
        reason = (
            f"too few samples: n_eff baseline {ne_b:.1f}, recent {ne_r:.1f} "
            f"< min_samples {min_samples}"
        )
    elif ne_b < min_reference:
        fired = []
        reason = f"reference too small: n_eff {ne_b:.1f} < min_reference {min_reference:g}"
    elif fired:
        how = "family-wise alpha {} (Holm)" if use_holm else "alpha {} (uncorrected)"
        reason = f"fired at {how.format(alpha)}: {', '.join(fired)}{note}"
        if surprise is not None and "surprise" in fired:
            log_e, bound = surprise.statistic, surprise_log_threshold
            reason += f" (surprise: log e-value {log_e:.1f} >= {bound:.1f})"
    else:
        how = "family-wise alpha {} (Holm" if use_holm else "alpha {} (uncorrected"
        reason = f"no test fired at {how.format(alpha)}; psi threshold {psi_threshold}){note}"
    return DriftCheck(
        method=method,
        n_bins=n_bins,
        alpha=alpha,
        min_samples=min_samples,
        psi_threshold=psi_threshold,
        n_baseline=tot.n_b,
        n_recent=tot.n_r,
        n_eff_baseline=ne_b,
        n_eff_recent=ne_r,
        weight_baseline=w_b,
        weight_recent=w_r,
        psi=p,
        psi_level=None if p is None else psi_level(p),
        psi_pvalue=p_psi,
        ks_statistic=None if ks is None else ks.statistic,
        ks_pvalue=None if ks is None else ks.pvalue,
        accuracy_baseline=acc_b,
        accuracy_recent=acc_r,
        accuracy_z=None if acc is None else acc.statistic,
        accuracy_pvalue=None if acc is None else acc.pvalue,
        ece_baseline=tot.ece_b,
        ece_recent=tot.ece_r,
        ece_delta=None if ece is None else ece.statistic,
        ece_pvalue=None if ece is None else ece.pvalue,
        surprise_log_e=None if surprise is None else surprise.statistic,
        n_resamples=n_resamples,
        seed=seed,
        fired=bool(fired),
        fired_tests=tuple(fired),
        reason=reason,
    )


def check_drift_raw(
    baseline: LabelledItems,
    recent: LabelledItems,
    *,
    n_bins: int = DEFAULT_BINS,
    alpha: float = 0.01,
    min_samples: int = 100,
    psi_threshold: float = 0.25,
    n_resamples: int = 2000,
    seed: int = 0,
) -> DriftCheck:
    """Drift check from the two windows' raw items (raw KS and the permutation ECE test).
    Raises ValueError on malformed items."""
    base, rec = baseline.sums(n_bins), recent.sums(n_bins)
    ks = ece = None
    if base.total_weight > 0 and rec.total_weight > 0:
        ks = ks_raw(baseline.conf, recent.conf)
        ece = ece_change_permutation(
            baseline, recent, n_bins=n_bins, n_resamples=n_resamples, seed=seed
        )
    return _check(
        "raw", base, rec, ks, ece, n_bins, alpha, min_samples, psi_threshold, n_resamples, seed
    )


def check_drift_sums(
    baseline: BinSums,
    recent: BinSums,
    *,
    alpha: float = 0.01,
    min_samples: int = 100,
    psi_threshold: float = 0.25,
    n_resamples: int = 2000,
    seed: int = 0,
    holm: bool = True,
    test_min_samples: Mapping[str, float] | None = TEST_MIN_SAMPLES,
    scan: Sequence[BinSums] = (),
    min_reference: float = 0.0,
    concentrations: Sequence[float] = SURPRISE_CONCENTRATIONS,
    groups: int = SURPRISE_GROUPS,
    thetas: Sequence[float] = (),
    ks: StatResult | None = None,
    totals: WindowTotals | None = None,
) -> DriftCheck:
    """Drift check from per-bin sums of the two windows (same number of bins, else
    ValueError): binned KS and the parametric-bootstrap ECE test. ``ks``: the binned KS of
    these windows when already computed (:func:`check_drift_many` computes a round's at once);
    ``totals``: their :class:`WindowTotals` when already computed (likewise).

    ``holm=False`` and ``test_min_samples=None`` give the uncorrected, unguarded decision of
    earlier versions (any test below ``alpha``), kept so benchmarks can measure the change.

    ``min_reference``: a baseline with n_eff below it never fires (every check until the
    reference grows would share its sampling error; the worker passes
    :data:`monitor.analytics.drift_policy.MIN_REFERENCE`).

    ``scan``: the windows since candidate change points, each ending with ``recent`` (the
    worker's :data:`monitor.analytics.drift_policy.SCAN_WINDOWS`); given and with a baseline of
    n_eff >= :data:`monitor.analytics.drift_policy.SURPRISE_MIN_REFERENCE`, the sequential
    ``surprise`` test (:func:`surprise_e_detector`) runs too and fires on its own threshold.
    ``thetas``, ``concentrations``, ``groups``: its two families (``()``: without that family;
    ``groups`` >= bins: unmerged bins; kept so benchmarks can measure the change)."""
    n_bins = len(_vec(baseline.weight))
    if len(_vec(recent.weight)) != n_bins:
        raise ValueError("baseline and recent have different numbers of bins")
    ece = None
    if totals is None:
        totals = window_totals(baseline, recent)
    ne_b, ne_r = totals.ne_b, totals.ne_r
    if not (ne_b > 0 and ne_r > 0):
        ks = None
    elif ks is None:
        ks = ks_binned(baseline.weight, recent.weight, ne_b, ne_r)
    if ne_b > 0 and ne_r > 0:
        ece_min = 0.0 if test_min_samples is None else test_min_samples.get("ece_increase", 0.0)
        if min(ne_b, ne_r) >= max(min_samples, ece_min):  # else the test is not used
            ece = ece_change_bootstrap(baseline, recent, n_resamples=n_resamples, seed=seed)
    surprise = (
        surprise_e_detector(baseline, scan, thetas, concentrations, groups)
        if scan and runs_surprise(baseline)
        else None
    )
    return _check(
        "sums",
        baseline,
        recent,
        ks,
        ece,
        n_bins,
        alpha,
        min_samples,
        psi_threshold,
        n_resamples,
        seed,
        holm,
        test_min_samples,
        surprise,
        min_reference=min_reference,
        totals=totals,
    )


def check_drift_many(
    windows: Sequence[tuple[BinSums, BinSums, Sequence[BinSums]]],
    *,
    alpha: float = 0.01,
    min_samples: int = 100,
    min_reference: float = 0.0,
) -> list[DriftCheck]:
    """:func:`check_drift_sums` of each ``(baseline, recent, scan)`` (default settings
    otherwise), the binned KS p-values of all of them computed in one vectorised call
    (:func:`~monitor.analytics.drift_tests.ks_binned_many`) and the per-window sums, PSIs and
    ECEs on stacked arrays (:func:`window_totals_many`): the same checks, in the same order, at
    a fraction of the cost per segment of a round over thousands of segments."""
    pairs = [(b, r) for b, r, _ in windows]
    k = {len(_vec(s.weight)) for pair in pairs for s in pair}
    # windows of different lengths fail as they did, each in its own check
    totals: list[WindowTotals | None] = (
        list(window_totals_many(pairs)) if len(k) <= 1 else [None] * len(pairs)
    )
    sizes = [
        (t.ne_b, t.ne_r) if t is not None else (_n_eff_total(b), _n_eff_total(r))
        for t, (b, r) in zip(totals, pairs, strict=True)
    ]
    tested = [i for i, (nb, nr) in enumerate(sizes) if nb > 0 and nr > 0]
    found = ks_binned_many(
        [(windows[i][0].weight, windows[i][1].weight, *sizes[i]) for i in tested]
    )
    ks: dict[int, StatResult] = dict(zip(tested, found, strict=True))
    return [
        check_drift_sums(
            base,
            rec,
            alpha=alpha,
            min_samples=min_samples,
            scan=scan,
            min_reference=min_reference,
            ks=ks.get(i),
            totals=totals[i],
        )
        for i, (base, rec, scan) in enumerate(windows)
    ]
