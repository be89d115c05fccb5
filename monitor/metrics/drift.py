"""Drift of one segment: a recent window against a baseline window (pure math, no I/O).

Two entry points return the same :class:`DriftCheck`: :func:`check_drift_raw` from labelled
items (confidence, 0/1 label, sampling weight) and :func:`check_drift_sums` from the per-bin
additive sums the store keeps (:class:`monitor.metrics.bins.BinSums`).

The four tests (each also callable alone):

- ``psi``: population stability index of the weighted confidence distribution over the fixed
  bins, Σ (r_b - b_b)·ln(r_b / b_b) on bin shares.  Empty bins would make it infinite, so both
  share vectors are smoothed as p' = (p + ε) / (1 + B·ε) with ε = 1e-4 (still sums to 1).  Read
  as < 0.1 stable, 0.1-0.25 moderate, > 0.25 major; fires at ``psi_threshold`` (0.25).  No p-value.
- ``ks``: two-sample Kolmogorov-Smirnov.  From raw items it is ``scipy.stats.ks_2samp`` on the
  raw confidences (unweighted: scipy's test has no weights).  From sums it is the binned
  approximation: D = max |F_recent - F_baseline| of the weighted CDFs evaluated at the bin edges
  only, with the asymptotic p-value ``kstwo.sf(D, round(n1·n2/(n1+n2)))`` (scipy's ``asymp``
  method) on effective sizes.  Binned D <= raw D (the CDFs are not seen inside a bin), so the
  binned test is conservative and converges to the raw one as bins get finer.
- ``accuracy_drop``: one-sided pooled two-proportion z-test, H1: recent accuracy < baseline;
  z = (p_recent - p_base) / sqrt(p(1-p)(1/n1 + 1/n2)), p-value = Φ(z).
- ``ece_increase``: one-sided test of ΔECE = ECE_recent - ECE_baseline > 0 (ECE as DESIGN §4).
  Raw items: permutation test (items, with their weights, reshuffled between the windows;
  p = (1 + #{Δ* >= Δ}) / (1 + R), seeded).  Sums: parametric bootstrap under H0 "both windows
  have the bin's pooled accuracy": per window and bin, acc* = Binomial(n_b, p_pooled_b) / n_b with
  n_b the bin's effective size (rounded, >= 1), bin weights and mean confidences held fixed.

Sample sizes: proportions and distributions use the weights (inverse inclusion probabilities);
tests use Kish's effective size n_eff = (Σw)² / Σw² (the raw count for unit weights).  A check
whose smaller window has n_eff < ``min_samples`` still reports its statistics but never fires.
Malformed input raises ValueError; small or empty windows are not errors.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any, Literal

import numpy as np
import numpy.typing as npt
from scipy import stats  # type: ignore[import-untyped, unused-ignore]

from monitor.metrics.bins import DEFAULT_BINS, BinSums, bin_index

FloatArray = npt.NDArray[np.float64]
PSI_EPSILON = 1e-4
TEST_NAMES = ("psi", "ks", "accuracy_drop", "ece_increase")


@dataclass(frozen=True)
class StatResult:
    """A test statistic and its p-value."""

    statistic: float
    pvalue: float


def _vec(x: npt.ArrayLike) -> FloatArray:
    return np.asarray(x, dtype=np.float64).reshape(-1)


def psi_level(value: float) -> str:
    """Conventional reading of a PSI: ``stable`` (< 0.1), ``moderate`` (<= 0.25), ``major``."""
    return "stable" if value < 0.1 else "moderate" if value <= 0.25 else "major"


def psi(baseline_weights: npt.ArrayLike, recent_weights: npt.ArrayLike,
        epsilon: float = PSI_EPSILON) -> float:
    """PSI between two per-bin weight vectors (same length, >= 0, each with a positive sum).

    Shares are smoothed with ``epsilon`` as in the module docstring.  Raises ValueError."""
    b, r = _vec(baseline_weights), _vec(recent_weights)
    if b.shape != r.shape or b.size == 0 or min(b.min(), r.min()) < 0 or not (
            b.sum() > 0 and r.sum() > 0):
        raise ValueError("psi needs two non-negative weight vectors of equal length, sums > 0")
    k = b.size
    pb = (b / b.sum() + epsilon) / (1 + k * epsilon)
    pr = (r / r.sum() + epsilon) / (1 + k * epsilon)
    return float(np.sum((pr - pb) * np.log(pr / pb)))


def ks_raw(baseline_conf: npt.ArrayLike, recent_conf: npt.ArrayLike) -> StatResult:
    """Two-sided two-sample KS on raw confidences: exactly ``scipy.stats.ks_2samp``."""
    res = stats.ks_2samp(_vec(baseline_conf), _vec(recent_conf))
    return StatResult(float(res.statistic), float(res.pvalue))


def ks_binned(baseline_weights: npt.ArrayLike, recent_weights: npt.ArrayLike,
              n_baseline: float, n_recent: float) -> StatResult:
    """Binned KS approximation from per-bin weights and (effective) sample sizes > 0."""
    b, r = _vec(baseline_weights), _vec(recent_weights)
    if b.shape != r.shape or not (b.sum() > 0 and r.sum() > 0) or min(n_baseline, n_recent) <= 0:
        raise ValueError("ks_binned needs equal-length weights with positive sums and n > 0")
    d = float(np.max(np.abs(np.cumsum(r) / r.sum() - np.cumsum(b) / b.sum())))
    en = max(1.0, round(n_baseline * n_recent / (n_baseline + n_recent)))
    p = float(stats.kstwo.sf(d, en))
    return StatResult(d, min(max(p, 0.0), 1.0))


def two_proportion_z(successes_baseline: float, n_baseline: float,
                     successes_recent: float, n_recent: float) -> StatResult:
    """Pooled two-proportion z-test, one-sided H1: recent proportion < baseline.

    Counts may be fractional (weighted share * effective size); need n > 0 and
    0 <= successes <= n, else ValueError.  With a pooled proportion of 0 or 1 there is no
    variance and no evidence of a drop: z = 0, p = 1."""
    if min(n_baseline, n_recent) <= 0 or not (0 <= successes_baseline <= n_baseline and
                                              0 <= successes_recent <= n_recent):
        raise ValueError("two_proportion_z needs n > 0 and 0 <= successes <= n")
    p1, p2 = successes_baseline / n_baseline, successes_recent / n_recent
    pool = (successes_baseline + successes_recent) / (n_baseline + n_recent)
    se = math.sqrt(pool * (1 - pool) * (1 / n_baseline + 1 / n_recent))
    if se == 0:
        return StatResult(0.0, 1.0)
    z = (p2 - p1) / se
    return StatResult(z, float(stats.norm.cdf(z)))


def ece_of(sums: BinSums) -> float:
    """ECE = Σ_b (W_b/W)|acc_b - conf_b| = Σ_b |Σw·y - Σw·conf|_b / W.  ValueError if W = 0."""
    w = _vec(sums.weight)
    if not w.sum() > 0:
        raise ValueError("ECE of an empty window")
    return float(np.abs(_vec(sums.sum_y) - _vec(sums.sum_conf)).sum() / w.sum())


def _n_eff(weight: npt.ArrayLike, sum_w2: npt.ArrayLike) -> FloatArray:
    w, s2 = _vec(weight), _vec(sum_w2)
    return np.divide(w * w, s2, out=np.zeros_like(w), where=s2 > 0)


def ece_change_permutation(baseline_conf: npt.ArrayLike, baseline_y: npt.ArrayLike,
                           recent_conf: npt.ArrayLike, recent_y: npt.ArrayLike, *,
                           baseline_weight: npt.ArrayLike | None = None,
                           recent_weight: npt.ArrayLike | None = None,
                           n_bins: int = DEFAULT_BINS, n_resamples: int = 2000,
                           seed: int = 0) -> StatResult:
    """Permutation test of ΔECE > 0 from raw items (module docstring); statistic = ΔECE.

    Items as in :func:`check_drift_raw`; both windows need a positive total weight."""
    cb, cr = _vec(baseline_conf), _vec(recent_conf)
    wb = np.ones_like(cb) if baseline_weight is None else _vec(baseline_weight)
    wr = np.ones_like(cr) if recent_weight is None else _vec(recent_weight)
    c, w = np.concatenate([cb, cr]), np.concatenate([wb, wr])
    d = w * (np.concatenate([_vec(baseline_y), _vec(recent_y)]) - c)
    if not (len(c) == len(d) and wb.sum() > 0 and wr.sum() > 0):
        raise ValueError("ece_change_permutation needs aligned items and positive weights")
    idx, n1 = bin_index(c, n_bins), len(cb)

    def ece(sel: npt.NDArray[np.intp]) -> float:
        total = float(w[sel].sum())
        return float(np.abs(np.bincount(idx[sel], d[sel], n_bins)).sum()) / total if total else 0.0

    observed = ece(np.arange(n1, len(c))) - ece(np.arange(n1))
    rng, hits = np.random.default_rng(seed), 0
    for _ in range(n_resamples):
        perm = rng.permutation(len(c))
        hits += ece(perm[n1:]) - ece(perm[:n1]) >= observed - 1e-12
    return StatResult(observed, (1 + hits) / (1 + n_resamples))


def ece_change_bootstrap(baseline: BinSums, recent: BinSums, *, n_resamples: int,
                         seed: int) -> StatResult:
    """Parametric bootstrap test of ΔECE > 0 from per-bin sums (see module docstring)."""
    wb, wr = _vec(baseline.weight), _vec(recent.weight)
    pooled_w = wb + wr
    pooled = np.divide(_vec(baseline.sum_y) + _vec(recent.sum_y), pooled_w,
                       out=np.zeros_like(pooled_w), where=pooled_w > 0).clip(0.0, 1.0)
    rng = np.random.default_rng(seed)

    def simulate(s: BinSums) -> FloatArray:
        w = _vec(s.weight)
        conf = np.divide(_vec(s.sum_conf), w, out=np.zeros_like(w), where=w > 0)
        n = np.where(w > 0, np.maximum(1, np.rint(_n_eff(s.weight, s.sum_w2))), 1).astype(int)
        acc = rng.binomial(n, pooled, size=(n_resamples, len(w))) / n
        return np.asarray((w * np.abs(acc - conf)).sum(axis=1) / w.sum(), dtype=np.float64)

    observed = ece_of(recent) - ece_of(baseline)
    deltas = simulate(recent) - simulate(baseline)
    hits = int(np.sum(deltas >= observed - 1e-12))
    return StatResult(observed, (1 + hits) / (1 + n_resamples))


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
    n_resamples: int
    seed: int
    fired: bool
    fired_tests: tuple[str, ...]
    reason: str

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready dict (``fired_tests`` as a list; no NaN anywhere)."""
        out = asdict(self)
        out["fired_tests"] = list(self.fired_tests)
        return out


def _n_eff_total(s: BinSums) -> float:
    s2 = float(_vec(s.sum_w2).sum())
    return float(_vec(s.weight).sum()) ** 2 / s2 if s2 > 0 else 0.0


def _check(method: Literal["raw", "sums"], base: BinSums, rec: BinSums,
           ks: StatResult | None, ece: StatResult | None, n_bins: int, alpha: float,
           min_samples: int, psi_threshold: float, n_resamples: int, seed: int) -> DriftCheck:
    ne_b, ne_r = _n_eff_total(base), _n_eff_total(rec)
    w_b, w_r = float(_vec(base.weight).sum()), float(_vec(rec.weight).sum())
    empty = not (w_b > 0 and w_r > 0)
    p = None if empty else psi(base.weight, rec.weight)
    acc_b = None if empty else min(1.0, float(_vec(base.sum_y).sum()) / w_b)  # no ulp > 1
    acc_r = None if empty else min(1.0, float(_vec(rec.sum_y).sum()) / w_r)
    acc = None if acc_b is None or acc_r is None else two_proportion_z(
        acc_b * ne_b, ne_b, acc_r * ne_r, ne_r)
    fired: list[str] = []
    if p is not None and p > psi_threshold:
        fired.append("psi")
    for name, res in (("ks", ks), ("accuracy_drop", acc), ("ece_increase", ece)):
        if res is not None and res.pvalue < alpha:
            fired.append(name)
    if min(ne_b, ne_r) < min_samples:
        reason, fired = (f"too few samples: n_eff baseline {ne_b:.1f}, recent {ne_r:.1f} "
                         f"< min_samples {min_samples}"), []
    elif fired:
        reason = f"fired at alpha {alpha}: {', '.join(fired)}"
    else:
        reason = f"no test fired at alpha {alpha} (psi threshold {psi_threshold})"
    return DriftCheck(
        method=method, n_bins=n_bins, alpha=alpha, min_samples=min_samples,
        psi_threshold=psi_threshold, n_baseline=int(_vec(base.count).sum()),
        n_recent=int(_vec(rec.count).sum()),
        n_eff_baseline=ne_b, n_eff_recent=ne_r, weight_baseline=w_b, weight_recent=w_r,
        psi=p, psi_level=None if p is None else psi_level(p),
        ks_statistic=None if ks is None else ks.statistic,
        ks_pvalue=None if ks is None else ks.pvalue,
        accuracy_baseline=acc_b, accuracy_recent=acc_r,
        accuracy_z=None if acc is None else acc.statistic,
        accuracy_pvalue=None if acc is None else acc.pvalue,
        ece_baseline=None if empty else ece_of(base), ece_recent=None if empty else ece_of(rec),
        ece_delta=None if ece is None else ece.statistic,
        ece_pvalue=None if ece is None else ece.pvalue,
        n_resamples=n_resamples, seed=seed, fired=bool(fired), fired_tests=tuple(fired),
        reason=reason)


def check_drift_raw(baseline_conf: npt.ArrayLike, baseline_y: npt.ArrayLike,
                    recent_conf: npt.ArrayLike, recent_y: npt.ArrayLike, *,
                    baseline_weight: npt.ArrayLike | None = None,
                    recent_weight: npt.ArrayLike | None = None, n_bins: int = DEFAULT_BINS,
                    alpha: float = 0.01, min_samples: int = 100, psi_threshold: float = 0.25,
                    n_resamples: int = 2000, seed: int = 0) -> DriftCheck:
    """Drift check from raw items: confidences in [0, 1], labels y in [0, 1] (normally 0/1),
    optional weights >= 0 (default 1).  Raises ValueError on malformed items."""
    wb = np.ones(len(_vec(baseline_conf))) if baseline_weight is None else _vec(baseline_weight)
    wr = np.ones(len(_vec(recent_conf))) if recent_weight is None else _vec(recent_weight)
    base = BinSums.from_items(baseline_conf, baseline_y, wb, n_bins)
    rec = BinSums.from_items(recent_conf, recent_y, wr, n_bins)
    ks = ece = None
    if base.total_weight > 0 and rec.total_weight > 0:
        ks = ks_raw(baseline_conf, recent_conf)
        ece = ece_change_permutation(baseline_conf, baseline_y, recent_conf, recent_y,
                                     baseline_weight=wb, recent_weight=wr, n_bins=n_bins,
                                     n_resamples=n_resamples, seed=seed)
    return _check("raw", base, rec, ks, ece, n_bins, alpha, min_samples, psi_threshold,
                  n_resamples, seed)


def check_drift_sums(baseline: BinSums, recent: BinSums, *, alpha: float = 0.01,
                     min_samples: int = 100, psi_threshold: float = 0.25,
                     n_resamples: int = 2000, seed: int = 0) -> DriftCheck:
    """Drift check from per-bin sums of the two windows (same number of bins, else
    ValueError): binned KS and the parametric-bootstrap ECE test."""
    n_bins = len(_vec(baseline.weight))
    if len(_vec(recent.weight)) != n_bins:
        raise ValueError("baseline and recent have different numbers of bins")
    ks = ece = None
    ne_b, ne_r = _n_eff_total(baseline), _n_eff_total(recent)
    if ne_b > 0 and ne_r > 0:
        ks = ks_binned(baseline.weight, recent.weight, ne_b, ne_r)
        ece = ece_change_bootstrap(baseline, recent, n_resamples=n_resamples, seed=seed)
    return _check("sums", baseline, recent, ks, ece, n_bins, alpha, min_samples,
                  psi_threshold, n_resamples, seed)
