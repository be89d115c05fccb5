"""Bootstrap intervals for ECE and Brier (pure numpy, no I/O; docs/design.md, "Metric definitions").

Both give two-sided percentile intervals at level ``confidence`` (default 0.95) as a
:class:`BootstrapResult`; both are deterministic for a given ``seed`` (``numpy.random.Generator``).
They are used by :mod:`monitor.analytics.calibration`, which re-exports them.

- From sums (:func:`parametric_bootstrap`, ``method="bin-parametric-bootstrap"``): sums hold no
  items, so no item bootstrap.  Each non-empty bin's accuracy is redrawn as
  ``Binomial(m_b, acc_b) / m_b`` with ``m_b = max(1, round(n_eff_b))``, bin masses and mean
  confidences held fixed, and ECE recomputed per draw.  Brier moves to first order: relabelling
  weight ΔY at confidence ≈ conf_b changes Σw·(conf - y)² by ΔY·(1 - 2·conf_b) for 0/1 labels.
  It captures label noise (the dominant term), not the variance of bin membership or within-bin
  confidences, so it is a little narrow for tiny bins.
- From raw items (:func:`bootstrap_from_items`, ``method="item-bootstrap"``): classic
  nonparametric bootstrap, items resampled with replacement (keeping their weights).  Use it
  whenever the items are at hand (recalibration, offline reports).

Both ECE intervals inherit ECE's upward small-sample bias; see :mod:`monitor.analytics.calibration`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from statistics import NormalDist
from typing import Any

import numpy as np
import numpy.typing as npt

from monitor.analytics.bins import DEFAULT_BINS, BinSums, FloatArray, bin_index

DEFAULT_CONFIDENCE = 0.95
DEFAULT_N_BOOT = 1000
NAN = math.nan

Interval = tuple[float, float]
_NAN_INTERVAL: Interval = (NAN, NAN)
_PARAMETRIC, _ITEMS = "bin-parametric-bootstrap", "item-bootstrap"


def two_sided_z(confidence: float) -> float:
    """Standard normal quantile of a two-sided ``confidence`` level; ValueError unless it is
    in (0, 1)."""
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    return NormalDist().inv_cdf(0.5 + confidence / 2.0)


def _plain(value: Any) -> Any:
    if isinstance(value, float):
        return None if math.isnan(value) else value
    if isinstance(value, tuple | list):
        return [_plain(v) for v in value]
    return value


@dataclass(frozen=True)
class BootstrapResult:
    """Percentile intervals from :func:`bootstrap_from_items` or the bin-parametric bootstrap."""

    ece_ci: Interval
    brier_ci: Interval
    method: str
    n_boot: int
    seed: int
    confidence_level: float

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready dict: NaN becomes None, tuples become lists."""
        return {f.name: _plain(getattr(self, f.name)) for f in fields(self)}


def _check_boot(n_boot: int, confidence: float) -> None:
    two_sided_z(confidence)
    if n_boot < 1:
        raise ValueError("n_boot must be >= 1")


def _percentile(draws: FloatArray, confidence: float) -> Interval:
    draws = draws[~np.isnan(draws)]
    if draws.size == 0:
        return _NAN_INTERVAL
    a = (1.0 - confidence) / 2.0
    lo, hi = np.quantile(draws, [a, 1.0 - a])
    return (float(lo), float(hi))


def parametric_bootstrap(
    sums: BinSums,
    n_boot: int = DEFAULT_N_BOOT,
    seed: int = 0,
    confidence: float = DEFAULT_CONFIDENCE,
) -> BootstrapResult:
    """ECE and Brier intervals from sums alone (the bin-level parametric bootstrap described
    in the module docstring).  Deterministic for a given ``seed``.  NaN intervals when the
    total weight is 0.  Raises ValueError for ``n_boot < 1`` or a bad ``confidence``."""
    _check_boot(n_boot, confidence)
    nz = sums.weight > 0
    total = sums.total_weight
    if not nz.any() or total <= 0:
        return BootstrapResult(_NAN_INTERVAL, _NAN_INTERVAL, _PARAMETRIC, n_boot, seed, confidence)
    w = sums.weight[nz]
    acc = np.clip(sums.sum_y[nz] / w, 0.0, 1.0)
    conf = sums.sum_conf[nz] / w
    m = np.maximum(1, np.rint(sums.n_eff()[nz])).astype(np.int64)
    rng = np.random.default_rng(seed)
    acc_star = rng.binomial(m, acc, size=(n_boot, len(m))) / m
    ece_draws = (np.abs(acc_star - conf) * w).sum(axis=1) / total
    sq = float(sums.sum_sq_err.sum()) + ((acc_star - acc) * w * (1.0 - 2.0 * conf)).sum(axis=1)
    brier_draws = np.clip(sq / total, 0.0, 1.0)
    return BootstrapResult(
        _percentile(ece_draws, confidence),
        _percentile(brier_draws, confidence),
        _PARAMETRIC,
        n_boot,
        seed,
        confidence,
    )


def bootstrap_from_items(
    conf: npt.ArrayLike,
    y: npt.ArrayLike,
    weight: npt.ArrayLike | None = None,
    n_boot: int = DEFAULT_N_BOOT,
    seed: int = 0,
    n_bins: int = DEFAULT_BINS,
    confidence: float = DEFAULT_CONFIDENCE,
) -> BootstrapResult:
    """Nonparametric item bootstrap of ECE and Brier (percentile intervals).

    Items (validated as in :meth:`BinSums.from_items`) are resampled with replacement, keeping
    their weights; deterministic for a given ``seed``.  Raises ValueError for no items,
    ``n_boot < 1`` or a bad ``confidence``.
    """
    _check_boot(n_boot, confidence)
    base = BinSums.from_items(conf, y, weight, n_bins)  # validates everything
    c = np.asarray(conf, dtype=np.float64).reshape(-1)
    yy = np.asarray(y, dtype=np.float64).reshape(-1)
    w = np.ones_like(c) if weight is None else np.asarray(weight, np.float64).reshape(-1)
    n = base.total_count
    if n == 0:
        raise ValueError("bootstrap_from_items needs at least one item")
    b = bin_index(c, n_bins)
    wy_minus_wc, wsq = w * (yy - c), w * (c - yy) ** 2
    rng = np.random.default_rng(seed)
    ece_draws = np.empty(n_boot)
    brier_draws = np.empty(n_boot)
    for i in range(n_boot):
        idx = rng.integers(0, n, n)
        total = float(w[idx].sum())
        if total <= 0:
            ece_draws[i] = brier_draws[i] = NAN
            continue
        per_bin = np.bincount(b[idx], weights=wy_minus_wc[idx], minlength=n_bins)
        ece_draws[i] = float(np.abs(per_bin).sum()) / total
        brier_draws[i] = float(wsq[idx].sum()) / total
    return BootstrapResult(
        _percentile(ece_draws, confidence),
        _percentile(brier_draws, confidence),
        _ITEMS,
        n_boot,
        seed,
        confidence,
    )
