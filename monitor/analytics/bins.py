"""Fixed equal-width confidence bins and their additive sums (docs/design.md, "Metric definitions").

Pure numpy; no I/O.  The store keeps one row per (window, segment, bin) holding the fields of
:class:`BinSums`; because every field is a plain sum over items, any time range or segment
roll-up is the elementwise sum of rows, and a relabelled item is moved by subtracting its old
contribution and adding its new one.

Bin convention: ``n_bins`` equal-width bins with edges ``k / n_bins`` (computed by exact
division, so the edge 0.3 is the double nearest 0.3, not ``3 * 0.1``).  Bin ``b`` holds
``edges[b] <= conf < edges[b + 1]`` (left-closed, like Postgres ``width_bucket``), and
``conf == 1.0`` goes to the last bin.  A verbalized confidence of exactly 0.3 is therefore in bin
3.  (scikit-learn's ``calibration_curve`` closes bins on the right instead; the two agree for
every value that is not exactly on an interior edge.)
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

DEFAULT_BINS = 10

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

#: Column order of a row tuple, as used by :meth:`BinSums.to_rows` / :meth:`BinSums.from_rows`.
ROW_FIELDS: tuple[str, ...] = (
    "bin",
    "weight",
    "sum_conf",
    "sum_y",
    "sum_sq_err",
    "sum_w2",
    "count",
)
_SUM_FIELDS = ROW_FIELDS[1:]


def _check_n_bins(n_bins: int) -> None:
    if not isinstance(n_bins, int) or isinstance(n_bins, bool) or n_bins < 1:
        raise ValueError(f"n_bins must be a positive int, got {n_bins!r}")


def bin_edges(n_bins: int = DEFAULT_BINS) -> FloatArray:
    """The ``n_bins + 1`` edges ``[0, 1/n, ..., 1]`` (exact division). Raises ValueError."""
    _check_n_bins(n_bins)
    return np.arange(n_bins + 1, dtype=np.float64) / n_bins


def _as_unit(name: str, values: npt.ArrayLike) -> FloatArray:
    arr = np.asarray(values, dtype=np.float64).reshape(-1)
    if arr.size and (not np.all(np.isfinite(arr)) or arr.min() < 0.0 or arr.max() > 1.0):
        raise ValueError(f"{name} must be finite and within [0, 1]")
    return arr


def bin_index(conf: npt.ArrayLike, n_bins: int = DEFAULT_BINS) -> IntArray:
    """Bin index (0 .. n_bins-1) of each confidence; vectorised, returns a 1-d int64 array.

    ``conf`` is a scalar or array of probabilities in [0, 1]; NaN, infinities and values outside
    [0, 1] raise ValueError (a confidence outside the unit interval is a contract violation,
    not something to clip silently).
    """
    c = _as_unit("conf", conf)
    edges = bin_edges(n_bins)
    idx = np.searchsorted(edges, c, side="right") - 1
    return np.minimum(idx, n_bins - 1).astype(np.int64)


@dataclass(frozen=True, eq=False)
class BinSums:
    """Additive per-bin sums of labelled, weighted items (all arrays of length ``n_bins``).

    - ``weight``: W_b = Σw (the estimated number of items in the population, when ``w`` is the
      inverse inclusion probability).
    - ``sum_conf``: Σw·conf; ``sum_y``: Σw·y; ``sum_sq_err``: Σw·(conf - y)².
    - ``sum_w2``: Σw², for the effective sample size n_eff = W² / Σw² of weighted items.
    - ``count``: the unweighted number of items (zero-weight items included).

    Instances are immutable (the arrays are read-only).  ``+`` merges (elementwise sum, the
    roll-up of any windows or segments); ``-`` removes items previously added.
    """

    weight: FloatArray
    sum_conf: FloatArray
    sum_y: FloatArray
    sum_sq_err: FloatArray
    sum_w2: FloatArray
    count: IntArray

    def __post_init__(self) -> None:
        n = len(self.count)
        if n < 1:
            raise ValueError("BinSums needs at least one bin")
        for name in _SUM_FIELDS:
            arr = getattr(self, name)
            if arr.shape != (n,):
                raise ValueError(f"{name} has shape {arr.shape}, expected ({n},)")
            arr.flags.writeable = False

    # -- construction -------------------------------------------------------------------------
    @classmethod
    def empty(cls, n_bins: int = DEFAULT_BINS) -> BinSums:
        """All-zero sums (the identity of ``+``)."""
        _check_n_bins(n_bins)
        z = np.zeros(n_bins, dtype=np.float64)
        return cls(z, z.copy(), z.copy(), z.copy(), z.copy(), np.zeros(n_bins, dtype=np.int64))

    @classmethod
    def from_items(
        cls,
        conf: npt.ArrayLike,
        y: npt.ArrayLike,
        weight: npt.ArrayLike | None = None,
        n_bins: int = DEFAULT_BINS,
    ) -> BinSums:
        """Sums of items ``(conf_i, y_i, w_i)``; vectorised (``np.bincount``).

        ``conf`` and ``y`` in [0, 1] (``y`` is normally 0/1; a fractional reward is accepted and
        summed as is); ``weight`` finite and >= 0, default 1 for every item.  Arrays of equal
        length; an empty input gives :meth:`empty`.  Raises ValueError on any violation.
        """
        c = _as_unit("conf", conf)
        yy = _as_unit("y", y)
        if weight is None:
            w = np.ones_like(c)
        else:
            w = np.asarray(weight, dtype=np.float64).reshape(-1)
            if w.size and (not np.all(np.isfinite(w)) or w.min() < 0.0):
                raise ValueError("weight must be finite and >= 0")
        if not (len(c) == len(yy) == len(w)):
            raise ValueError(f"length mismatch: conf {len(c)}, y {len(yy)}, weight {len(w)}")
        idx = bin_index(c, n_bins)

        def bc(x: FloatArray) -> FloatArray:
            return np.bincount(idx, weights=x, minlength=n_bins).astype(np.float64)

        return cls(
            weight=bc(w),
            sum_conf=bc(w * c),
            sum_y=bc(w * yy),
            sum_sq_err=bc(w * (c - yy) ** 2),
            sum_w2=bc(w * w),
            count=np.bincount(idx, minlength=n_bins).astype(np.int64),
        )

    @classmethod
    def from_rows(
        cls,
        rows: Iterable[Mapping[str, Any] | Sequence[Any]],
        n_bins: int = DEFAULT_BINS,
    ) -> BinSums:
        """Sums from stored rows: dicts keyed by :data:`ROW_FIELDS`, or tuples in that order.

        Several rows for the same bin are *added*, so the rows of any set of windows and
        segments can be passed straight from a query; bins without a row are zero.  Raises
        ValueError for a bin index outside ``0 .. n_bins-1`` or a malformed row.
        """
        out = cls.empty(n_bins)
        acc = {name: np.array(getattr(out, name)) for name in _SUM_FIELDS}
        for row in rows:
            if isinstance(row, Mapping):
                values = [row[f] for f in ROW_FIELDS]
            else:
                if len(row) != len(ROW_FIELDS):
                    raise ValueError(f"row {row!r} must have {len(ROW_FIELDS)} fields")
                values = list(row)
            b = int(values[0])
            if not 0 <= b < n_bins:
                raise ValueError(f"bin {b} outside 0..{n_bins - 1}")
            for name, v in zip(_SUM_FIELDS, values[1:], strict=True):
                acc[name][b] += int(v) if name == "count" else float(v)
        return cls(**acc)

    @classmethod
    def grouped(
        cls,
        rows: Sequence[Sequence[Any]],
        key_len: int,
        n_bins: int = DEFAULT_BINS,
        design_effects: Mapping[tuple[Any, ...], float] | None = None,
    ) -> dict[tuple[Any, ...], BinSums]:
        """Sums per group from rows ``(*key, bin, weight, sum_conf, sum_y, sum_sq_err, sum_w2,
        count)`` holding at most one row per (key, bin) (a query grouped by key and bin), in
        one vectorised pass: a round over thousands of segments builds them at the cost of a
        few array operations, not of a loop per row and field (:meth:`from_rows`, which adds
        repeated bins). Each group's sums are read-only views of shared arrays.
        ``design_effects``: each group's sums :meth:`with_design_effect` of its value (groups
        absent: 1), the same numbers without a second instance per group. Raises ValueError
        for a bin outside ``0 .. n_bins-1``, a (key, bin) given twice or a design effect < 1."""
        _check_n_bins(n_bins)
        if not rows:
            return {}
        # column by column (one C-level transpose), not field by field of each row
        cols = list(zip(*rows, strict=True))
        if len(cols) != key_len + len(ROW_FIELDS):
            raise ValueError(f"rows must have {key_len} key fields and {ROW_FIELDS}")
        groups: dict[tuple[Any, ...], int] = {}
        # zip() of no columns is empty: without key fields every row is of the one group ()
        keys = zip(*cols[:key_len], strict=True) if key_len else itertools.repeat((), len(rows))
        index = np.fromiter(
            (groups.setdefault(k, len(groups)) for k in keys),
            dtype=np.intp,
            count=len(rows),
        )
        values = np.array(cols[key_len:], dtype=np.float64)
        bins = values[0].astype(np.intp)
        if bins.min() < 0 or bins.max() >= n_bins:
            raise ValueError(f"bin outside 0..{n_bins - 1}")
        cell = index * n_bins + bins
        if np.unique(cell).size != cell.size:
            raise ValueError("a (key, bin) is given twice")
        acc = np.zeros((len(_SUM_FIELDS), len(groups) * n_bins), dtype=np.float64)
        acc[:, cell] = values[1:]
        sums = acc.reshape(len(_SUM_FIELDS), len(groups), n_bins)
        counts = sums[-1].astype(np.int64)
        if design_effects is not None:
            deff = np.fromiter(
                (design_effects.get(k, 1.0) for k in groups), dtype=np.float64, count=len(groups)
            )
            if not np.all(deff >= 1.0):
                raise ValueError("design effect must be >= 1")
            sums[4] *= deff[:, None]  # each product as with_design_effect's, bit for bit
        sums.flags.writeable = False  # their views below are read-only too
        counts.flags.writeable = False
        w, c, y, e, w2 = sums[0], sums[1], sums[2], sums[3], sums[4]
        return {
            key: cls._valid(w[g], c[g], y[g], e[g], w2[g], counts[g]) for key, g in groups.items()
        }

    @classmethod
    def _valid(
        cls,
        weight: FloatArray,
        sum_conf: FloatArray,
        sum_y: FloatArray,
        sum_sq_err: FloatArray,
        sum_w2: FloatArray,
        count: IntArray,
    ) -> BinSums:
        """An instance of read-only arrays of one shape >= 1 the caller guarantees, without the
        per-instance checks of ``__post_init__`` (a round over thousands of segments builds
        several instances per segment; the checks were a third of that cost)."""
        out = object.__new__(cls)
        # the instance dict written at once (a frozen dataclass's fields live there; one
        # object.__setattr__ per field cost as much again)
        out.__dict__.update(
            weight=weight,
            sum_conf=sum_conf,
            sum_y=sum_y,
            sum_sq_err=sum_sq_err,
            sum_w2=sum_w2,
            count=count,
        )
        return out

    # -- accessors ----------------------------------------------------------------------------
    @property
    def n_bins(self) -> int:
        return len(self.count)

    @property
    def total_weight(self) -> float:
        return float(self.weight.sum())

    @property
    def total_count(self) -> int:
        return int(self.count.sum())

    def n_eff(self) -> FloatArray:
        """Per-bin effective sample size W_b² / Σw²_b (0 where the bin has no weight)."""
        out = np.zeros(self.n_bins, dtype=np.float64)
        nz = self.sum_w2 > 0
        out[nz] = self.weight[nz] ** 2 / self.sum_w2[nz]
        return out

    def total_n_eff(self) -> float:
        """Overall effective sample size W² / Σw² (0.0 when there is no weight)."""
        s2 = float(self.sum_w2.sum())
        return self.total_weight**2 / s2 if s2 > 0 else 0.0

    def with_design_effect(self, deff: float) -> BinSums:
        """The same sums with every effective sample size divided by ``deff`` (>= 1).

        Items that are not independent (the messages of one conversation share its outcome
        label) carry less information than their count: with a design effect ``deff`` (for
        labels shared within a conversation, the mean number of items per conversation) the
        tests and intervals must use ``n_eff / deff``. Implemented by scaling ``sum_w2``; the
        point estimates (ECE, Brier, accuracy) do not change. Raises ValueError for deff < 1.
        """
        if not deff >= 1.0:
            raise ValueError(f"design effect must be >= 1, got {deff!r}")
        sum_w2 = self.sum_w2 * deff  # the shape of this instance's (checked) arrays
        sum_w2.flags.writeable = False
        return BinSums._valid(
            self.weight, self.sum_conf, self.sum_y, self.sum_sq_err, sum_w2, self.count
        )

    def to_rows(self, include_empty: bool = False) -> list[dict[str, float | int]]:
        """One dict per bin (keys :data:`ROW_FIELDS`); bins with ``count == 0`` are skipped
        unless ``include_empty``."""
        rows: list[dict[str, float | int]] = []
        for b in range(self.n_bins):
            if self.count[b] == 0 and not include_empty:
                continue
            row: dict[str, float | int] = {"bin": b}
            for name in _SUM_FIELDS:
                v = getattr(self, name)[b]
                row[name] = int(v) if name == "count" else float(v)
            rows.append(row)
        return rows

    # -- algebra ------------------------------------------------------------------------------
    def _check_same(self, other: object) -> BinSums:
        if not isinstance(other, BinSums):
            raise TypeError(f"expected BinSums, got {type(other).__name__}")
        if other.n_bins != self.n_bins:
            raise ValueError(f"bin counts differ: {self.n_bins} vs {other.n_bins}")
        return other

    def __add__(self, other: BinSums) -> BinSums:
        o = self._check_same(other)
        return BinSums(**{n: getattr(self, n) + getattr(o, n) for n in _SUM_FIELDS})

    def __sub__(self, other: BinSums) -> BinSums:
        """Remove items previously added (e.g. a judge label replaced by the ground truth).

        Raises ValueError if a bin's count would go negative (removing what was never added).
        A bin whose count reaches 0 is reset to exact zeros, and float sums are clamped at 0,
        so rounding residue never shows up as a phantom bin or a negative weight.
        """
        o = self._check_same(other)
        count = self.count - o.count
        if np.any(count < 0):
            raise ValueError("subtraction would make a bin count negative")
        vals: dict[str, Any] = {"count": count}
        for name in _SUM_FIELDS[:-1]:
            v = np.maximum(getattr(self, name) - getattr(o, name), 0.0)
            v[count == 0] = 0.0
            vals[name] = v
        return BinSums(**vals)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, BinSums) or other.n_bins != self.n_bins:
            return False
        return all(np.array_equal(getattr(self, n), getattr(other, n)) for n in _SUM_FIELDS)

    def isclose(self, other: BinSums, rtol: float = 1e-12, atol: float = 1e-12) -> bool:
        """Equal up to float rounding (counts exactly)."""
        o = self._check_same(other)
        return bool(np.array_equal(self.count, o.count)) and all(
            np.allclose(getattr(self, n), getattr(o, n), rtol=rtol, atol=atol)
            for n in _SUM_FIELDS[:-1]
        )

    __hash__ = None  # type: ignore[assignment]


def sum_all(parts: Iterable[BinSums], n_bins: int = DEFAULT_BINS) -> BinSums:
    """Roll-up of any number of sums (``BinSums.empty(n_bins)`` for none)."""
    total = BinSums.empty(n_bins)
    for p in parts:
        total = total + p
    return total
