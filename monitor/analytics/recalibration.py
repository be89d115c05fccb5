"""Isotonic recalibration maps: fit with scikit-learn, store and apply without it.

Pure (numpy + scikit-learn, no I/O).  :func:`fit_isotonic` fits a monotone map from stated
confidence to observed accuracy on a seeded, deterministic train split and reports ECE and Brier
before and after on the held-out items; the returned :class:`IsotonicMap` is just the fitted
breakpoints, stored as two JSON arrays (e.g. a Postgres ``jsonb``) and applied anywhere with
linear interpolation (``np.interp``), which is exactly what ``IsotonicRegression.predict`` does
with ``out_of_bounds="clip"``.

The map is fitted on the training part only (not refitted on all items) so the held-out
numbers describe precisely the map that gets deployed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from monitor.analytics.bins import DEFAULT_BINS, BinSums, FloatArray
from monitor.analytics.calibration import brier, ece
from monitor.core.lazy import lazy_module

isotonic = lazy_module("sklearn.isotonic")  # imported at first use (slow to import)

DEFAULT_MIN_ITEMS = 200
DEFAULT_HOLDOUT_FRACTION = 0.3
MAP_METHOD = "isotonic"


@dataclass(frozen=True)
class IsotonicMap:
    """A monotone non-decreasing piecewise-linear map [0, 1] -> [0, 1].

    ``xs``: strictly increasing breakpoints in [0, 1]; ``ys``: non-decreasing values in [0, 1];
    same length >= 1.  Below ``xs[0]`` the map is ``ys[0]``, above ``xs[-1]`` it is ``ys[-1]``
    (clipping).  Raises ValueError on any violation.
    """

    xs: tuple[float, ...]
    ys: tuple[float, ...]

    def __post_init__(self) -> None:
        x = np.asarray(self.xs, dtype=np.float64)
        y = np.asarray(self.ys, dtype=np.float64)
        if x.ndim != 1 or x.shape != y.shape or x.size == 0:
            raise ValueError("xs and ys must be non-empty sequences of equal length")
        if not (np.all(np.isfinite(x)) and np.all(np.isfinite(y))):
            raise ValueError("breakpoints must be finite")
        if np.any(np.diff(x) <= 0):
            raise ValueError("xs must be strictly increasing")
        if np.any(np.diff(y) < 0):
            raise ValueError("ys must be non-decreasing")
        if x.min() < 0 or x.max() > 1 or y.min() < 0 or y.max() > 1:
            raise ValueError("breakpoints must lie in [0, 1]")

    @classmethod
    def identity(cls) -> IsotonicMap:
        """The map that changes nothing (for agents without a fitted map)."""
        return cls((0.0, 1.0), (0.0, 1.0))

    @classmethod
    def from_regression(cls, model: Any) -> IsotonicMap:
        """Breakpoints of a fitted ``IsotonicRegression`` (``X_thresholds_``,
        ``y_thresholds_``), clipped to [0, 1] to absorb float rounding."""
        xs = np.clip(np.asarray(model.X_thresholds_, dtype=np.float64), 0.0, 1.0)
        ys = np.clip(np.asarray(model.y_thresholds_, dtype=np.float64), 0.0, 1.0)
        return cls(tuple(float(v) for v in xs), tuple(float(v) for v in ys))

    def apply(self, conf: npt.ArrayLike) -> FloatArray:
        """Recalibrated confidences, float64 array shaped like ``conf``; values outside the
        breakpoints are clipped to the end values.  NaN in gives NaN out."""
        c = np.asarray(conf, dtype=np.float64)
        return np.asarray(np.interp(c, self.xs, self.ys), dtype=np.float64)

    def apply_one(self, conf: float) -> float:
        """:meth:`apply` for one number."""
        return float(np.interp(conf, self.xs, self.ys))

    def to_dict(self) -> dict[str, Any]:
        """``{"method": "isotonic", "xs": [...], "ys": [...]}``: JSON for storage and the API."""
        return {"method": MAP_METHOD, "xs": list(self.xs), "ys": list(self.ys)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> IsotonicMap:
        """Inverse of :meth:`to_dict`; raises ValueError for another method or bad points."""
        if data.get("method", MAP_METHOD) != MAP_METHOD:
            raise ValueError(f"not an isotonic map: method {data.get('method')!r}")
        return cls(tuple(float(v) for v in data["xs"]), tuple(float(v) for v in data["ys"]))


@dataclass(frozen=True)
class RecalibrationResult:
    """A fitted map and how it does on held-out items (weighted metrics, ``n_bins`` bins)."""

    map: IsotonicMap
    n_train: int
    n_holdout: int
    ece_before: float
    ece_after: float
    brier_before: float
    brier_after: float
    seed: int
    holdout_fraction: float
    n_bins: int

    def to_dict(self) -> dict[str, Any]:
        d = {k: v for k, v in self.__dict__.items() if k != "map"}
        d["map"] = self.map.to_dict()
        return d


def split_indices(
    n: int, holdout_fraction: float = DEFAULT_HOLDOUT_FRACTION, seed: int = 0
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """Deterministic (train, holdout) index arrays, both sorted, from a seeded permutation.

    The split depends only on ``n``, ``holdout_fraction`` and ``seed``: pass items in a stable
    order (e.g. sorted by event id) to get the same split on every run.  The holdout gets
    ``round(n * holdout_fraction)`` items, at least 1 and leaving at least 1 for training.
    Raises ValueError for ``n < 2`` or a fraction outside (0, 1).
    """
    if not 0.0 < holdout_fraction < 1.0:
        raise ValueError("holdout_fraction must be in (0, 1)")
    if n < 2:
        raise ValueError("need at least 2 items to split")
    n_hold = min(max(1, round(n * holdout_fraction)), n - 1)
    perm = np.random.default_rng(seed).permutation(n)
    return np.sort(perm[n_hold:]).astype(np.int64), np.sort(perm[:n_hold]).astype(np.int64)


def fit_isotonic_map(
    conf: npt.ArrayLike, y: npt.ArrayLike, weight: npt.ArrayLike | None = None
) -> IsotonicMap:
    """Fit on all given items (no split, no minimum); see :func:`fit_isotonic`."""
    c = np.asarray(conf, dtype=np.float64).reshape(-1)
    yy = np.asarray(y, dtype=np.float64).reshape(-1)
    BinSums.from_items(c, yy, weight)  # validation only: ranges, lengths, weights
    if c.size == 0:
        raise ValueError("cannot fit an isotonic map to no items")
    w = None if weight is None else np.asarray(weight, dtype=np.float64).reshape(-1)
    if w is not None and not np.any(w > 0):
        raise ValueError("cannot fit an isotonic map: every weight is 0")
    model = isotonic.IsotonicRegression(increasing=True, out_of_bounds="clip", y_min=0.0, y_max=1.0)
    model.fit(c, yy, sample_weight=w)
    return IsotonicMap.from_regression(model)


def fit_isotonic(
    conf: npt.ArrayLike,
    y: npt.ArrayLike,
    weight: npt.ArrayLike | None = None,
    *,
    min_items: int = DEFAULT_MIN_ITEMS,
    holdout_fraction: float = DEFAULT_HOLDOUT_FRACTION,
    seed: int = 0,
    n_bins: int = DEFAULT_BINS,
) -> RecalibrationResult:
    """Fit an isotonic map on a seeded train split and evaluate it on the held-out split.

    Inputs: confidences and labels in [0, 1] (labels normally 0/1), optional weights >= 0
    (inverse inclusion probabilities), all of equal length.  The fit uses
    ``IsotonicRegression(increasing=True, out_of_bounds="clip", y_min=0, y_max=1)`` with the
    weights; ECE and Brier before (raw confidences) and after (mapped) are weighted metrics on
    the held-out items.  Raises ValueError with fewer than ``min_items`` items (a map fitted
    on a handful of items would be noise), or on invalid input.
    """
    c = np.asarray(conf, dtype=np.float64).reshape(-1)
    yy = np.asarray(y, dtype=np.float64).reshape(-1)
    w = np.ones_like(c) if weight is None else np.asarray(weight, dtype=np.float64).reshape(-1)
    BinSums.from_items(c, yy, w, n_bins)  # validation only
    if c.size < max(min_items, 2):
        raise ValueError(
            f"need at least {max(min_items, 2)} labelled items to fit a map, got {c.size}"
        )
    train, hold = split_indices(c.size, holdout_fraction, seed)
    fitted = fit_isotonic_map(c[train], yy[train], w[train])
    before = BinSums.from_items(c[hold], yy[hold], w[hold], n_bins)
    after = BinSums.from_items(fitted.apply(c[hold]), yy[hold], w[hold], n_bins)
    return RecalibrationResult(
        map=fitted,
        n_train=int(train.size),
        n_holdout=int(hold.size),
        ece_before=ece(before),
        ece_after=ece(after),
        brier_before=brier(before),
        brier_after=brier(after),
        seed=seed,
        holdout_fraction=holdout_fraction,
        n_bins=n_bins,
    )
