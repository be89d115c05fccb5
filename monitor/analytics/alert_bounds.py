"""One-sided lower bounds of calibration metrics, for alert rules with ``estimate: lower_bound``
(pure numpy, no I/O).

A rule that compares a point estimate with a threshold pages on noise: the ECE of a small
sample is biased upward (a perfectly calibrated agent with 200 items in 10 bins shows an ECE
near 0.08), so ``ece > 0.08`` fires on a calibrated agent about half the time. With
``estimate: lower_bound`` the rule compares the bound below, which the true metric exceeds
with probability about ``level`` (default 0.99: an alert is evaluated hundreds of times a day,
so a 5 % miss rate per evaluation would still page on noise), instead:

- ``ece``: ECE minus the ``level`` quantile of the ECE a perfectly calibrated agent would show
  with the same bins, bin weights, mean confidences and effective sizes (parametric bootstrap:
  per bin, acc* = Binomial(n_eff_b, conf_b) / n_eff_b, ``n_boot`` draws, seeded). Conservative:
  it removes the whole noise level, not only the bias, so it fires only on miscalibration
  larger than what chance can produce at this sample size.
- ``brier``: the lower end of the parametric-bootstrap interval of the Brier score
  (:func:`monitor.analytics.bootstrap.parametric_bootstrap`, one-sided ``level``).
- ``overconfidence_gap``: mean confidence minus the upper Wilson bound of accuracy (one-sided
  ``level``, effective size).

:func:`upper_bound` is the matching bound above, on which a firing rule resolves (hysteresis,
:mod:`monitor.alerts.lifecycle`): for ``ece`` the ECE less the median ECE of a calibrated agent
with these bins (chance's typical share, removed), plus the spread of the ECE's own parametric
bootstrap above its median (per bin acc* = Binomial(n_eff_b, acc_b) / n_eff_b; ``level``
quantile minus median), so a sample whose errors happen to cancel does not look recovered; for
``brier`` the upper end of the bootstrap interval; for ``overconfidence_gap`` mean confidence
minus the lower Wilson bound of accuracy.

Effective sizes include the design effect the caller applied to the sums. Undefined (no
weight): None.
"""

from __future__ import annotations

import math

import numpy as np

from monitor.analytics import calibration as cal
from monitor.analytics.bins import BinSums
from monitor.analytics.bootstrap import parametric_bootstrap

BOUND_METRICS = ("ece", "brier", "overconfidence_gap")
LEVEL = 0.99
"""Default one-sided level of the bounds."""


def ece_null_quantile(
    sums: BinSums, level: float = LEVEL, n_boot: int = 400, seed: int = 0
) -> float:
    """The ``level`` quantile of the ECE of a perfectly calibrated agent with these bins
    (``level`` in (0, 1))."""
    nz = sums.weight > 0
    w = sums.weight[nz]
    conf = np.clip(sums.sum_conf[nz] / w, 0.0, 1.0)
    m = np.maximum(1, np.rint(sums.n_eff()[nz])).astype(np.int64)
    rng = np.random.default_rng(seed)
    acc = rng.binomial(m, conf, size=(n_boot, len(m))) / m
    draws = (np.abs(acc - conf) * w).sum(axis=1) / w.sum()
    return float(np.quantile(draws, level))


def _ece_spread(sums: BinSums, level: float, n_boot: int, seed: int) -> float:
    """``level`` quantile minus median of the ECE's parametric bootstrap (observed accuracies)."""
    nz = sums.weight > 0
    w = sums.weight[nz]
    conf = np.clip(sums.sum_conf[nz] / w, 0.0, 1.0)
    acc = np.clip(sums.sum_y[nz] / w, 0.0, 1.0)
    m = np.maximum(1, np.rint(sums.n_eff()[nz])).astype(np.int64)
    rng = np.random.default_rng(seed + 1)
    boot = rng.binomial(m, acc, size=(n_boot, len(m))) / m
    draws = (np.abs(boot - conf) * w).sum(axis=1) / w.sum()
    return float(np.quantile(draws, level) - np.quantile(draws, 0.5))


def _bounded(metric: str, sums: BinSums, level: float, side: str) -> bool:
    """Whether ``sums`` has the weight a bound needs; raises ValueError for a metric without a
    ``side`` bound or a ``level`` outside (0.5, 1)."""
    if metric not in BOUND_METRICS:
        raise ValueError(f"no {side} bound for {metric!r}")
    if not 0.5 < level < 1.0:
        raise ValueError("level must be in (0.5, 1)")
    return sums.total_weight > 0


def _interval(
    metric: str, sums: BinSums, level: float, n_boot: int, seed: int
) -> tuple[float | None, float | None]:
    """The two-sided ``2 * level - 1`` interval of ``brier`` (parametric bootstrap) or of the
    confidence gap (mean confidence minus the accuracy's Wilson interval; an end that is not
    finite is None): each end is a one-sided bound at ``level``."""
    if metric == "brier":
        lo, hi = parametric_bootstrap(sums, n_boot, seed, 2 * level - 1).brier_ci
        return float(lo), float(hi)
    acc_lo, acc_hi = cal.wilson_interval(cal.accuracy(sums), sums.total_n_eff(), 2 * level - 1)
    ends = (cal.mean_confidence(sums) - acc_hi, cal.mean_confidence(sums) - acc_lo)
    low, high = (e if math.isfinite(e) else None for e in ends)
    return low, high


def lower_bound(
    metric: str, sums: BinSums, level: float = LEVEL, n_boot: int = 400, seed: int = 0
) -> float | None:
    """The one-sided lower bound of ``metric`` (one of :data:`BOUND_METRICS`) at ``level``.

    None when ``sums`` has no weight. Raises ValueError for another metric or a ``level``
    outside (0.5, 1)."""
    if not _bounded(metric, sums, level, "lower"):
        return None
    if metric == "ece":
        return cal.ece(sums) - ece_null_quantile(sums, level, n_boot, seed)
    return _interval(metric, sums, level, n_boot, seed)[0]


def upper_bound(
    metric: str, sums: BinSums, level: float = LEVEL, n_boot: int = 400, seed: int = 0
) -> float | None:
    """The one-sided upper bound of ``metric`` (one of :data:`BOUND_METRICS`) at ``level``
    (module docstring). None when ``sums`` has no weight. Raises ValueError like
    :func:`lower_bound`."""
    if not _bounded(metric, sums, level, "upper"):
        return None
    if metric == "ece":
        return (
            cal.ece(sums)
            - ece_null_quantile(sums, 0.5, n_boot, seed)
            + _ece_spread(sums, level, n_boot, seed)
        )
    return _interval(metric, sums, level, n_boot, seed)[1]
