"""The single drift tests behind :class:`monitor.analytics.drift.DriftCheck` (pure math, no I/O).

Each compares a baseline window with a recent window and is callable alone; all are also
re-exported from :mod:`monitor.analytics.drift`.

- :func:`psi`: population stability index of the weighted confidence distribution over the fixed
  bins, Σ (r_b - b_b)·ln(r_b / b_b) on bin shares.  Empty bins would make it infinite, so both
  share vectors are smoothed as p' = (p + ε) / (1 + B·ε) with ε = 1e-4 (still sums to 1).  Read
  as < 0.1 stable, 0.1-0.25 moderate, > 0.25 major (:func:`psi_level`).  No p-value.
- :func:`ks_raw` / :func:`ks_binned`: two-sample Kolmogorov-Smirnov.  From raw items it is
  ``scipy.stats.ks_2samp`` on the raw confidences (unweighted: scipy's test has no weights).
  From sums it is the binned approximation: D = max |F_recent - F_baseline| of the weighted CDFs
  evaluated at the bin edges only, with the asymptotic p-value ``kstwo.sf(D, round(n1·n2/(n1+n2)))``
  (scipy's ``asymp`` method) on effective sizes.  Binned D <= raw D (the CDFs are not seen inside
  a bin), so the binned test is conservative and converges to the raw one as bins get finer.
- :func:`two_proportion_z`: one-sided pooled two-proportion z-test, H1: recent accuracy <
  baseline; z = (p_recent - p_base) / sqrt(p(1-p)(1/n1 + 1/n2)), p-value = Φ(z).
- :func:`ece_change_permutation` / :func:`ece_change_bootstrap`: one-sided test of ΔECE =
  ECE_recent - ECE_baseline > 0 (ECE as in docs/design.md, :func:`ece_of`).  Raw items:
  permutation test (items, with their weights, reshuffled between the windows;
  p = (1 + #{Δ* >= Δ}) / (1 + R), seeded).  Sums: parametric bootstrap under H0 "both windows
  have the bin's pooled accuracy": per window and bin, acc* = Binomial(n_b, p_pooled_b) / n_b
  with n_b the bin's effective size (rounded, >= 1), bin weights and mean confidences held fixed.

Malformed input raises ValueError.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from monitor.analytics.bins import DEFAULT_BINS, BinSums, bin_index
from monitor.core.lazy import lazy_module

stats = lazy_module("scipy.stats")  # imported at first use (slow to import)
special = lazy_module("scipy.special")

FloatArray = npt.NDArray[np.float64]
PSI_EPSILON = 1e-4


@dataclass(frozen=True)
class StatResult:
    """A test statistic and its p-value."""

    statistic: float
    pvalue: float


def _vec(x: npt.ArrayLike) -> FloatArray:
    return np.asarray(x, dtype=np.float64).reshape(-1)


def _rows(vectors: Sequence[npt.NDArray[Any]], k: int) -> FloatArray:
    """1-d arrays of length ``k`` (the caller checks) as the float rows of one array:
    ``np.stack``'s values, filled row by row (``np.stack`` wraps and checks each of thousands
    of arrays first, several times the cost)."""
    out = np.empty((len(vectors), k), dtype=np.float64)
    for i, v in enumerate(vectors):
        out[i] = v
    return out


@dataclass(frozen=True)
class LabelledItems:
    """One window's raw labelled items (what :class:`~monitor.analytics.bins.BinSums` sums):
    confidences in [0, 1], labels ``y`` in [0, 1] (normally 0/1), sampling weights >= 0 (1 each
    when ``weight`` is None). The raw-item tests take two of them, as the binned ones take two
    ``BinSums``."""

    conf: npt.ArrayLike
    y: npt.ArrayLike
    weight: npt.ArrayLike | None = None

    @property
    def weights(self) -> FloatArray:
        """``weight`` as a float vector, or 1 for each item when it is None."""
        return np.ones(len(_vec(self.conf))) if self.weight is None else _vec(self.weight)

    def sums(self, n_bins: int = DEFAULT_BINS) -> BinSums:
        """The window's per-bin sums. Raises ValueError on malformed items."""
        return BinSums.from_items(self.conf, self.y, self.weights, n_bins)


def psi_level(value: float) -> str:
    """Conventional reading of a PSI: ``stable`` (< 0.1), ``moderate`` (<= 0.25), ``major``."""
    return "stable" if value < 0.1 else "moderate" if value <= 0.25 else "major"


def psi(
    baseline_weights: npt.ArrayLike, recent_weights: npt.ArrayLike, epsilon: float = PSI_EPSILON
) -> float:
    """PSI between two per-bin weight vectors (same length, >= 0, each with a positive sum).

    Shares are smoothed with ``epsilon`` as in the module docstring.  Raises ValueError."""
    b, r = _vec(baseline_weights), _vec(recent_weights)
    if (
        b.shape != r.shape
        or b.size == 0
        or min(b.min(), r.min()) < 0
        or not (b.sum() > 0 and r.sum() > 0)
    ):
        raise ValueError("psi needs two non-negative weight vectors of equal length, sums > 0")
    k = b.size
    pb = (b / b.sum() + epsilon) / (1 + k * epsilon)
    pr = (r / r.sum() + epsilon) / (1 + k * epsilon)
    return float(np.sum((pr - pb) * np.log(pr / pb)))


def psi_pvalue(
    value: float,
    baseline_weights: npt.ArrayLike,
    recent_weights: npt.ArrayLike,
    n_baseline: float,
    n_recent: float,
) -> float:
    """P-value of a PSI under "same distribution": ``PSI * n_b n_r / (n_b + n_r)`` is
    asymptotically chi-square with (bins used by either window - 1) degrees of freedom (PSI is
    the symmetric, Jeffreys divergence). Small samples have large PSIs by chance alone (about
    (k - 1)(1/n_b + 1/n_r) on average), so a PSI above its threshold only counts as drift when
    this p-value is small too. 1.0 when either size is 0 or only one bin is used."""
    used = int(np.count_nonzero((_vec(baseline_weights) > 0) | (_vec(recent_weights) > 0)))
    if min(n_baseline, n_recent) <= 0 or used < 2:
        return 1.0
    scaled = value * n_baseline * n_recent / (n_baseline + n_recent)
    # chi2.sf's own function, without the distribution object's per-call overhead (50 us)
    return float(special.chdtrc(used - 1, scaled))


def ks_raw(baseline_conf: npt.ArrayLike, recent_conf: npt.ArrayLike) -> StatResult:
    """Two-sided two-sample KS on raw confidences: exactly ``scipy.stats.ks_2samp``."""
    res = stats.ks_2samp(_vec(baseline_conf), _vec(recent_conf))
    return StatResult(float(res.statistic), float(res.pvalue))


def ks_binned(
    baseline_weights: npt.ArrayLike,
    recent_weights: npt.ArrayLike,
    n_baseline: float,
    n_recent: float,
) -> StatResult:
    """Binned KS approximation from per-bin weights and (effective) sample sizes > 0."""
    return ks_binned_many([(baseline_weights, recent_weights, n_baseline, n_recent)])[0]


def ks_binned_many(
    windows: Sequence[tuple[npt.ArrayLike, npt.ArrayLike, float, float]],
) -> list[StatResult]:
    """:func:`ks_binned` of each ``(baseline_weights, recent_weights, n_baseline, n_recent)``,
    the p-values in one vectorised ``kstwo.sf`` call, each distinct ``(D, n)`` computed once:
    the exact two-sided distribution costs 0.1-0.5 ms per value, which a round over thousands
    of segments would otherwise pay for every one (most share a few sizes and statistics)."""
    if not len(windows):
        return []
    bad = "ks_binned needs equal-length weights with positive sums and n > 0"
    en = np.empty(len(windows), dtype=np.float64)
    for i, (_, _, n_baseline, n_recent) in enumerate(windows):
        if min(n_baseline, n_recent) <= 0:
            raise ValueError(bad)
        en[i] = max(1.0, round(n_baseline * n_recent / (n_baseline + n_recent)))
    bs, rs = [_vec(w[0]) for w in windows], [_vec(w[1]) for w in windows]
    k = len(bs[0])
    if all(len(x) == k for x in bs) and all(len(x) == k for x in rs):
        # one shape: the statistics row by row at once
        b, r = _rows(bs, k), _rows(rs, k)
        sb, sr = b.sum(axis=1), r.sum(axis=1)
        if not (np.all(sb > 0) and np.all(sr > 0)):
            raise ValueError(bad)
        cdf_gap = np.cumsum(r, axis=1) / sr[:, None] - np.cumsum(b, axis=1) / sb[:, None]
        d = np.abs(cdf_gap).max(axis=1)
    else:
        d = np.empty(len(windows), dtype=np.float64)
        for i, (bi, ri) in enumerate(zip(bs, rs, strict=True)):
            if bi.shape != ri.shape or not (bi.sum() > 0 and ri.sum() > 0):
                raise ValueError(bad)
            d[i] = np.max(np.abs(np.cumsum(ri) / ri.sum() - np.cumsum(bi) / bi.sum()))
    pairs, back = np.unique(np.stack([d, en], axis=1), axis=0, return_inverse=True)
    p = np.clip(np.asarray(stats.kstwo.sf(pairs[:, 0], pairs[:, 1]), dtype=np.float64), 0, 1)
    return [StatResult(float(di), float(pi)) for di, pi in zip(d, p[back.reshape(-1)], strict=True)]


def two_proportion_z(
    successes_baseline: float, n_baseline: float, successes_recent: float, n_recent: float
) -> StatResult:
    """Pooled two-proportion z-test, one-sided H1: recent proportion < baseline.

    Counts may be fractional (weighted share * effective size); need n > 0 and
    0 <= successes <= n, else ValueError.  With a pooled proportion of 0 or 1 there is no
    variance and no evidence of a drop: z = 0, p = 1."""
    if min(n_baseline, n_recent) <= 0 or not (
        0 <= successes_baseline <= n_baseline and 0 <= successes_recent <= n_recent
    ):
        raise ValueError("two_proportion_z needs n > 0 and 0 <= successes <= n")
    p1, p2 = successes_baseline / n_baseline, successes_recent / n_recent
    pool = (successes_baseline + successes_recent) / (n_baseline + n_recent)
    se = math.sqrt(pool * (1 - pool) * (1 / n_baseline + 1 / n_recent))
    if se == 0:
        return StatResult(0.0, 1.0)
    z = (p2 - p1) / se
    return StatResult(z, float(special.ndtr(z)))  # norm.cdf's own function


def ece_of(sums: BinSums) -> float:
    """ECE = Σ_b (W_b/W)|acc_b - conf_b| = Σ_b |Σw·y - Σw·conf|_b / W.  ValueError if W = 0."""
    w = _vec(sums.weight)
    if not w.sum() > 0:
        raise ValueError("ECE of an empty window")
    return float(np.abs(_vec(sums.sum_y) - _vec(sums.sum_conf)).sum() / w.sum())


def _n_eff(weight: npt.ArrayLike, sum_w2: npt.ArrayLike) -> FloatArray:
    w, s2 = _vec(weight), _vec(sum_w2)
    return np.divide(w * w, s2, out=np.zeros_like(w), where=s2 > 0)


def ece_change_permutation(
    baseline: LabelledItems,
    recent: LabelledItems,
    *,
    n_bins: int = DEFAULT_BINS,
    n_resamples: int = 2000,
    seed: int = 0,
) -> StatResult:
    """Permutation test of ΔECE > 0 from raw items (module docstring); statistic = ΔECE.

    Both windows need a positive total weight (else ValueError)."""
    cb, cr = _vec(baseline.conf), _vec(recent.conf)
    wb, wr = baseline.weights, recent.weights
    c, w = np.concatenate([cb, cr]), np.concatenate([wb, wr])
    d = w * (np.concatenate([_vec(baseline.y), _vec(recent.y)]) - c)
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


def ece_change_bootstrap(
    baseline: BinSums, recent: BinSums, *, n_resamples: int, seed: int
) -> StatResult:
    """Parametric bootstrap test of ΔECE > 0 from per-bin sums (see module docstring)."""
    wb, wr = _vec(baseline.weight), _vec(recent.weight)
    pooled_w = wb + wr
    pooled = np.divide(
        _vec(baseline.sum_y) + _vec(recent.sum_y),
        pooled_w,
        out=np.zeros_like(pooled_w),
        where=pooled_w > 0,
    ).clip(0.0, 1.0)
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


SURPRISE_THETAS = (0.25, 0.5, 1.0, 2.0)
"""Tilt sizes of the surprise family of :func:`surprise_e_detector` (equal weights) when it is
asked for; the default leaves it out (on the real-answer bench it paged no change earlier than
the Dirichlet family alone, and sharing the weight with it delayed the gap change 35 min)."""
SURPRISE_CONCENTRATIONS = (4.0, 16.0, 64.0, 256.0, 1024.0)
"""Dirichlet concentrations of the whole-distribution family of :func:`surprise_e_detector`
(equal weights): small ones fit a large change of a few cells, large ones a small change of
many."""
SURPRISE_GROUPS = 4
"""Cells of the whole-distribution family of :func:`surprise_e_detector`: the confidence bins
merged into this many runs of consecutive bins of about equal reference mass (quartiles), each
with its two outcomes. Fewer cells cost a mixture less (about half a nat per cell and doubling
of n); 3 groups merged bins whose accuracy moved apart, 5 and the 10 bins paid more than they
saw (measured on the real-answer bench, docs/analytics.md)."""
SURPRISE_PSEUDOCOUNT = 0.5
"""Added to each (bin, outcome) cell of the reference before it is read as ``p0`` (Jeffreys):
a cell the reference never saw keeps a small probability, so one such answer is a large
surprise but not an infinite e-value."""
SURPRISE_LOG_THRESHOLD = math.log(1e5)
"""``log c`` of :func:`surprise_e_detector`: on a stationary segment the expected number of
items before a false alarm is at least ``c`` = 100,000 (about 28 days at 150 answers an hour)."""


def surprise_e_detector(
    reference: BinSums,
    windows: Sequence[BinSums],
    thetas: Sequence[float] = (),
    concentrations: Sequence[float] = SURPRISE_CONCENTRATIONS,
    groups: int = SURPRISE_GROUPS,
) -> StatResult:
    """Sequential test that the answers' (confidence bin, outcome) distribution is no longer
    the reference's (always valid).

    ``p0`` is the reference's distribution over the cells (bin, y), each cell's effective
    count plus :data:`SURPRISE_PSEUDOCOUNT`. For the counts ``k`` of one window (``n`` answers)
    two families of likelihood ratios against ``p0`` are mixed, half the weight each (each
    family's members equally; an empty family gives its half to the other; by default only
    the first):

    - *whole distribution* (``concentrations`` κ): on the cells (group, y), the bins merged
      into ``groups`` runs of about equal reference mass (the reference's quantiles, fixed
      before the window is seen; ``groups`` >= the number of bins: no merging), the Bayes
      factor of a Dirichlet(κ·p0) prior on the post-change cell probabilities, the
      Dirichlet-multinomial
      ``Γ(κ)/Γ(κ+n)·Π Γ(κp_i+k_i)/Γ(κp_i) / Π p_i^k_i`` (``scipy.special.gammaln``): the
      product over answers of the predictable plug-in ``(κp_i + k_i so far)/(κ + t) / p_i``.
      It sees a change of the confidence distribution and of the accuracy in any group, in
      any direction.
    - *surprise* (``thetas`` θ, e.g. :data:`SURPRISE_THETAS`): per answer
      ``T = -log p0(y | bin)`` (bin accuracy clipped to [0.01, 0.99]), tilted
      ``exp(θ·ΣT - n·ψ(θ))``, ``ψ(θ) = log E_p0 exp(θT)``: answers wrong where the reference
      was nearly always right.

    Each is a likelihood ratio of the window's answers against ``p0``, so under "nothing
    changed" (H0) each has mean 1 and so has the mixture: an e-process over the window.
    ``windows`` are the answers since a few candidate change points, each ending now (for
    example the last 15 min, 30 min, 1 h, ..., 6 h); ``statistic`` is ``max_W log E_W`` and
    ``pvalue`` its Ville bound ``min(1, 1/max E_W)``. The maximum over change points is bounded
    by the Shiryaev-Roberts sum over all of them, so firing at ``log E >= log c`` gives an
    expected run of at least ``c`` items before a false alarm on a stationary segment (Shin,
    Ramdas and Rinaldo, "E-detectors", 2023), whatever the check interval. The reference is an
    estimate, not the true p0: the bound holds as its size grows (callers require a large
    reference).

    Sizes are Kish effective sizes (window shares times n_eff). With an empty reference, no
    non-empty window or both families empty the result is ``(0, 1)``."""
    rw = _vec(reference.weight)
    th, kappa = np.asarray(thetas, dtype=np.float64), np.asarray(concentrations, dtype=np.float64)
    if not (rw.sum() > 0 and (th.size or kappa.size)):
        return StatResult(0.0, 1.0)
    ref_cells = _cells(reference)
    smoothed = ref_cells + SURPRISE_PSEUDOCOUNT
    p0 = smoothed.ravel() / smoothed.sum()  # cells (b, y=0), (b, y=1)
    acc = np.clip(smoothed[1] / smoothed.sum(axis=0), 0.01, 0.99)
    t = np.concatenate([-np.log1p(-acc), -np.log(acc)])
    psi_ = np.asarray([float(special.logsumexp(x * t, b=p0)) for x in th], dtype=np.float64)
    group = _mass_groups(ref_cells.sum(axis=0), groups)
    merged = _merge(ref_cells, group) + SURPRISE_PSEUDOCOUNT
    g0 = merged.ravel() / merged.sum()
    log_g0, a = np.log(g0), kappa[:, None] * g0[None, :]
    families = int(th.size > 0) + int(kappa.size > 0)
    best = 0.0
    for w in windows:
        if not float(_vec(w.weight).sum()) > 0 or _n_eff_total_sums(w) <= 0:
            continue
        k = _cells(w)
        n = float(k.sum())
        kg = _merge(k, group).ravel()
        dirichlet = (
            special.gammaln(kappa)
            - special.gammaln(kappa + n)
            + (special.gammaln(a + kg) - special.gammaln(a)).sum(axis=1)
            - float(kg @ log_g0)
        )
        k = k.ravel()
        tilt = th * float(k @ t) - n * psi_
        comps = np.concatenate(
            [dirichlet - math.log(max(kappa.size, 1)), tilt - math.log(max(th.size, 1))]
        )
        log_e = float(special.logsumexp(comps)) - math.log(families)
        best = max(best, log_e)
    return StatResult(best, min(1.0, math.exp(-best)))


def _mass_groups(mass: FloatArray, groups: int) -> npt.NDArray[np.intp]:
    """Group of each bin: bins whose cumulative reference mass at their middle falls in the
    same 1/``groups`` quantile share one (consecutive runs; empty groups dropped)."""
    if groups >= mass.size or not mass.sum() > 0:
        return np.arange(mass.size)
    share = mass / mass.sum()
    mid = np.cumsum(share) - share / 2
    raw = np.minimum((mid * groups).astype(np.intp), groups - 1)
    return np.asarray(np.unique(raw, return_inverse=True)[1], dtype=np.intp)


def _merge(cells: FloatArray, group: npt.NDArray[np.intp]) -> FloatArray:
    """Cell counts (2, bins) summed into (2, groups)."""
    n = int(group.max()) + 1
    return np.stack([np.bincount(group, row, minlength=n) for row in cells])


def _cells(s: BinSums) -> FloatArray:
    """Effective counts of the cells (y=0 row, y=1 row) by bin: shares times Kish n_eff."""
    w, y = _vec(s.weight), _vec(s.sum_y)
    total = float(w.sum())
    scale = _n_eff_total_sums(s) / total if total > 0 else 0.0
    return np.stack([(w - y).clip(min=0.0), y.clip(min=0.0)]) * scale


def _n_eff_total_sums(s: BinSums) -> float:
    s2 = float(_vec(s.sum_w2).sum())
    return float(_vec(s.weight).sum()) ** 2 / s2 if s2 > 0 else 0.0
