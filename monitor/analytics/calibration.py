"""Calibration metrics from additive bin sums (docs/design.md). Pure numpy; no I/O.

Definitions, with W_b, Σw·conf, Σw·y and Σw·(conf - y)² the sums of bin ``b`` (see
:mod:`monitor.analytics.bins`), ``acc_b = Σw·y / W_b`` and ``conf_b = Σw·conf / W_b``:

- ECE   = Σ_b (W_b / W) · |acc_b - conf_b|  (= Σ_b |Σw·y - Σw·conf|_b / W; empty bins add 0)
- MCE   = max_b |acc_b - conf_b| over bins with W_b > 0
- Brier = Σw·(conf - y)² / W
- accuracy = Σw·y / W; mean confidence = Σw·conf / W;
  overconfidence gap = mean confidence - accuracy (positive: the agent is overconfident).

Undefined values (no weight at all, an empty bin) are ``math.nan`` in the dataclasses and
``None`` in :meth:`CalibrationReport.to_dict`.

Confidence intervals (all two-sided, level ``confidence``, default 0.95):

- Accuracy, overall and per bin: Wilson score interval with the *effective* sample size
  n_eff = W² / Σw² in place of n (for unit weights n_eff = n and this is the textbook Wilson
  interval; for inverse-probability weights it is Kish's design-effect adjustment).
  :class:`Proportion` is the unweighted case: ``k`` of ``n`` with its Wilson interval.
- ECE and Brier from sums (``ci_method="bin-parametric-bootstrap"``,
  :func:`parametric_bootstrap`) or from raw items (``ci_method="item-bootstrap"``,
  :func:`bootstrap_from_items`): percentile bootstrap intervals, described in
  :mod:`monitor.analytics.bootstrap` (re-exported here).  Both ECE intervals inherit ECE's upward
  small-sample bias: simulated coverage of the true ECE is ~0.94 for a miscalibrated agent (true
  ECE 0.1, 2000 items) but ~0 for a calibrated one (true ECE ~0.001; the whole interval sits
  above it).  Read them as "how large could the miscalibration be", never as proof of
  calibration.  Brier and Wilson cover ~0.95.

Below ``min_samples`` effective items a report is still computed but flagged
``meaningful=False`` with a ``reason``; dashboards and alerts must not act on it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Any

import numpy as np
import numpy.typing as npt

from monitor.analytics.bins import DEFAULT_BINS, BinSums, bin_edges
from monitor.analytics.bootstrap import DEFAULT_CONFIDENCE as DEFAULT_CONFIDENCE
from monitor.analytics.bootstrap import DEFAULT_N_BOOT as DEFAULT_N_BOOT
from monitor.analytics.bootstrap import NAN as NAN
from monitor.analytics.bootstrap import BootstrapResult as BootstrapResult
from monitor.analytics.bootstrap import Interval as Interval
from monitor.analytics.bootstrap import bootstrap_from_items as bootstrap_from_items
from monitor.analytics.bootstrap import parametric_bootstrap as parametric_bootstrap
from monitor.analytics.bootstrap import two_sided_z

DEFAULT_MIN_SAMPLES = 100.0
_NAN_INTERVAL: Interval = (NAN, NAN)


def wilson_interval(p: float, n: float, confidence: float = DEFAULT_CONFIDENCE) -> Interval:
    """Wilson score interval for a proportion ``p`` observed over ``n`` (possibly effective,
    non-integer) trials.  Returns ``(nan, nan)`` when ``n <= 0`` or ``p`` is NaN; ``p`` is
    clipped to [0, 1].  Raises ValueError unless ``0 < confidence < 1``."""
    z = two_sided_z(confidence)
    if not n > 0 or math.isnan(p):
        return _NAN_INTERVAL
    p = min(max(p, 0.0), 1.0)
    z2n = z * z / n
    denom = 1.0 + z2n
    centre = (p + z2n / 2.0) / denom
    half = z / denom * math.sqrt(p * (1.0 - p) / n + z2n / (4.0 * n))
    return (max(0.0, centre - half), min(1.0, centre + half))


@dataclass(frozen=True)
class Proportion:
    """``k`` of ``n`` counted (unweighted) trials with its 95 % Wilson interval: ``value`` is
    ``k / n`` and ``[low, high]`` the interval; all three None when ``n <= 0``."""

    k: int
    n: int
    value: float | None
    low: float | None
    high: float | None

    @classmethod
    def of(cls, k: int, n: int) -> Proportion:
        if n <= 0:
            return cls(k, n, None, None, None)
        lo, hi = wilson_interval(k / n, n)
        return cls(k, n, k / n, lo, hi)


def _div(num: float, den: float) -> float:
    return num / den if den > 0 else NAN


def ece(sums: BinSums) -> float:
    """Expected calibration error in [0, 1]; NaN when the total weight is 0."""
    return _div(float(np.abs(sums.sum_y - sums.sum_conf).sum()), sums.total_weight)


def mce(sums: BinSums) -> float:
    """Maximum calibration error over bins with positive weight; NaN if there are none."""
    nz = sums.weight > 0
    if not nz.any():
        return NAN
    return float(np.max(np.abs(sums.sum_y[nz] - sums.sum_conf[nz]) / sums.weight[nz]))


def brier(sums: BinSums) -> float:
    """Weighted Brier score Σw(conf - y)² / W in [0, 1]; NaN when the total weight is 0."""
    return _div(float(sums.sum_sq_err.sum()), sums.total_weight)


def accuracy(sums: BinSums) -> float:
    """Weighted share of correct items Σw·y / W; NaN when the total weight is 0."""
    return _div(float(sums.sum_y.sum()), sums.total_weight)


def mean_confidence(sums: BinSums) -> float:
    """Weighted mean confidence Σw·conf / W; NaN when the total weight is 0."""
    return _div(float(sums.sum_conf.sum()), sums.total_weight)


def _jsonable(value: Any) -> Any:
    if isinstance(value, float):
        return None if math.isnan(value) else value
    if isinstance(value, tuple | list):
        return [_jsonable(v) for v in value]
    return value.to_dict() if isinstance(value, _ToDict) else value


class _ToDict:
    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready dict: NaN becomes None, tuples become lists."""
        return {f.name: _jsonable(getattr(self, f.name)) for f in fields(self)}  # type: ignore[arg-type]


@dataclass(frozen=True)
class ReliabilityBin(_ToDict):
    """One row of the reliability diagram; NaN statistics for a bin with no weight."""

    index: int
    lo: float
    hi: float
    mean_confidence: float
    accuracy: float
    gap: float  # mean_confidence - accuracy
    weight: float
    count: int
    n_eff: float
    accuracy_ci: Interval


@dataclass(frozen=True)
class CalibrationReport(_ToDict):
    """Every calibration number of one (window range, segment) with its intervals."""

    n_bins: int
    count: int
    weight: float
    n_eff: float
    ece: float
    mce: float
    brier: float
    accuracy: float
    mean_confidence: float
    overconfidence_gap: float
    accuracy_ci: Interval
    ece_ci: Interval
    brier_ci: Interval
    ci_method: str
    confidence_level: float
    min_samples: float
    meaningful: bool
    reason: str | None
    bins: tuple[ReliabilityBin, ...]


def reliability_bins(
    sums: BinSums, confidence: float = DEFAULT_CONFIDENCE
) -> tuple[ReliabilityBin, ...]:
    """All ``n_bins`` rows of the reliability diagram, empty bins included (NaN statistics)."""
    edges = bin_edges(sums.n_bins)
    n_eff = sums.n_eff()
    out = []
    for b in range(sums.n_bins):
        w = float(sums.weight[b])
        acc = _div(float(sums.sum_y[b]), w)
        conf = _div(float(sums.sum_conf[b]), w)
        out.append(
            ReliabilityBin(
                index=b,
                lo=float(edges[b]),
                hi=float(edges[b + 1]),
                mean_confidence=conf,
                accuracy=acc,
                gap=conf - acc,
                weight=w,
                count=int(sums.count[b]),
                n_eff=float(n_eff[b]),
                accuracy_ci=wilson_interval(acc, float(n_eff[b]), confidence),
            )
        )
    return tuple(out)


def calibration_report(
    sums: BinSums,
    *,
    min_samples: float = DEFAULT_MIN_SAMPLES,
    confidence: float = DEFAULT_CONFIDENCE,
    n_boot: int = DEFAULT_N_BOOT,
    seed: int = 0,
    intervals: BootstrapResult | None = None,
) -> CalibrationReport:
    """The full report of ``sums``.  ECE/Brier intervals come from ``intervals`` when given
    (e.g. :func:`bootstrap_from_items` on the same items), else from
    :func:`parametric_bootstrap`.  ``meaningful`` is False, with a ``reason``, when the total
    weight is 0 or the effective sample size is below ``min_samples``."""
    n_eff = sums.total_n_eff()
    if intervals is None:
        intervals = parametric_bootstrap(sums, n_boot, seed, confidence)
    acc, mconf = accuracy(sums), mean_confidence(sums)
    reason: str | None = None
    if sums.total_weight <= 0:
        reason = "no labelled items with positive weight"
    elif n_eff < min_samples:
        reason = f"effective sample size {n_eff:.1f} is below min_samples {min_samples:g}"
    return CalibrationReport(
        n_bins=sums.n_bins,
        count=sums.total_count,
        weight=sums.total_weight,
        n_eff=n_eff,
        ece=ece(sums),
        mce=mce(sums),
        brier=brier(sums),
        accuracy=acc,
        mean_confidence=mconf,
        overconfidence_gap=mconf - acc,
        accuracy_ci=wilson_interval(acc, n_eff, confidence),
        ece_ci=intervals.ece_ci,
        brier_ci=intervals.brier_ci,
        ci_method=intervals.method,
        confidence_level=confidence,
        min_samples=min_samples,
        meaningful=reason is None,
        reason=reason,
        bins=reliability_bins(sums, confidence),
    )


def report_from_items(
    conf: npt.ArrayLike,
    y: npt.ArrayLike,
    weight: npt.ArrayLike | None = None,
    *,
    n_bins: int = DEFAULT_BINS,
    min_samples: float = DEFAULT_MIN_SAMPLES,
    confidence: float = DEFAULT_CONFIDENCE,
    n_boot: int = DEFAULT_N_BOOT,
    seed: int = 0,
) -> CalibrationReport:
    """:func:`calibration_report` of raw items, with item-bootstrap intervals (an empty input
    gives a not-meaningful report with NaN intervals)."""
    sums = BinSums.from_items(conf, y, weight, n_bins)
    boot = None
    if sums.total_count > 0:
        boot = bootstrap_from_items(conf, y, weight, n_boot, seed, n_bins, confidence)
    return calibration_report(
        sums,
        min_samples=min_samples,
        confidence=confidence,
        n_boot=n_boot,
        seed=seed,
        intervals=boot,
    )
