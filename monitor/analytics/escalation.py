"""Escalation analytics against confidence (pure math, no I/O; docs/design.md).

Input: one :class:`ConversationEscalation` per conversation (its minimum assistant confidence,
whether it was escalated to a human, its outcome if known, its sampling weight = inverse
inclusion probability, and when it escalated).  Rates and quantiles are weighted; tests and
Wilson intervals use Kish's effective size n_eff = (Σw)^2 / Σw^2 (the raw count for unit weights).
Conversations without a confidence are left out of everything that bins or thresholds on it.

- :func:`escalation_by_bin`: weighted escalation rate per fixed confidence bin (the bin
  convention of :mod:`monitor.analytics.bins`) with Wilson score intervals on n_eff.
- :func:`inversion_test`: escalation should fall as confidence rises.  Two one-sided rank tests
  of a *positive* association: Spearman between bin mean confidence and bin escalation rate
  (bins with at least ``min_bin_conversations`` conversations, >= 3 bins) and Kendall tau-b
  between conversation confidence and the 0/1 escalation flag (unweighted; the test with the
  power).  An inversion is flagged when a test has a positive correlation and p < alpha / m,
  m = number of tests that could be computed (Bonferroni, family-wise false alarm <= alpha).
- :func:`time_to_escalation`: median and p90 of turns and seconds (:func:`weighted_quantile`).
- :func:`missed_escalations`: min confidence < threshold, not escalated, failed.
- the threshold what-if and advisor live in :mod:`monitor.analytics.thresholds` and
  :mod:`monitor.analytics.advisor` (they take this module's :class:`ConversationEscalation`).

Malformed input raises ValueError.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from monitor.analytics.bins import DEFAULT_BINS, bin_index
from monitor.analytics.calibration import wilson_interval
from monitor.core.lazy import lazy_module

stats = lazy_module("scipy.stats")  # imported at first use (slow to import)

FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True)
class ConversationEscalation:
    """One conversation.  ``min_confidence`` in [0, 1] or None; ``success`` None when the
    outcome is unknown; ``weight`` finite and > 0; ``escalation_turn`` (>= 0) and
    ``escalation_seconds`` (>= 0, from the conversation's first event) only mean anything when
    ``escalated``.  Invalid values raise ValueError."""

    min_confidence: float | None
    escalated: bool
    success: bool | None
    weight: float = 1.0
    escalation_turn: int | None = None
    escalation_seconds: float | None = None

    def __post_init__(self) -> None:
        c = self.min_confidence
        if c is not None and not (math.isfinite(c) and 0.0 <= c <= 1.0):
            raise ValueError(f"min_confidence must be in [0, 1], got {c!r}")
        if not (math.isfinite(self.weight) and self.weight > 0):
            raise ValueError(f"weight must be finite and > 0, got {self.weight!r}")
        if self.escalation_turn is not None and self.escalation_turn < 0:
            raise ValueError("escalation_turn must be >= 0")
        s = self.escalation_seconds
        if s is not None and not (math.isfinite(s) and s >= 0):
            raise ValueError("escalation_seconds must be finite and >= 0")


def _kish(w: FloatArray) -> float:
    s2 = float((w * w).sum())
    return float(w.sum()) ** 2 / s2 if s2 > 0 else 0.0


def weighted_quantile(
    values: npt.ArrayLike, q: float, weights: npt.ArrayLike | None = None
) -> float:
    """Weighted quantile ``q`` in [0, 1], generalising numpy's default ("linear") method.

    Weights (> 0) are rescaled so the smallest is 1; sorted value i then covers the index
    range [S_i - w_i, S_i - 1] of a virtual sample of size W = Σw (S_i the cumulative weight),
    and the quantile is read at index q·(W - 1) with linear interpolation between neighbours.
    Unit weights give exactly ``numpy.percentile(values, 100·q)``; weights that are integer
    multiples of the smallest give the same as repeating the values.  Raises ValueError for
    no values, mismatched lengths, q outside [0, 1], non-finite values or weights <= 0."""
    x = np.asarray(values, dtype=np.float64).reshape(-1)
    w = np.ones_like(x) if weights is None else np.asarray(weights, np.float64).reshape(-1)
    if x.size == 0 or w.shape != x.shape or not 0.0 <= q <= 1.0:
        raise ValueError("weighted_quantile needs values, equal-length weights, q in [0, 1]")
    if not (np.all(np.isfinite(x)) and np.all(np.isfinite(w)) and w.min() > 0):
        raise ValueError("values must be finite and weights finite and > 0")
    order = np.argsort(x, kind="stable")
    x, w = x[order], w[order] / w.min()
    s = np.cumsum(w)
    pos = np.column_stack([s - w, s - 1]).reshape(-1)
    return float(np.interp(q * (s[-1] - 1), pos, np.repeat(x, 2)))


@dataclass(frozen=True)
class EscalationBin:
    """Escalation in one confidence bin [lower, upper): ``n`` conversations, ``weight`` their
    weighted count; ``rate`` and the Wilson interval are None for an empty bin."""

    index: int
    lower: float
    upper: float
    n: int
    weight: float
    escalated_weight: float
    mean_confidence: float | None
    rate: float | None
    ci_low: float | None
    ci_high: float | None


def _arrays(convs: Sequence[ConversationEscalation]) -> tuple[FloatArray, FloatArray, FloatArray]:
    known = [c for c in convs if c.min_confidence is not None]
    conf = np.array([c.min_confidence for c in known], dtype=np.float64)
    esc = np.array([c.escalated for c in known], dtype=np.float64)
    return conf, esc, np.array([c.weight for c in known], dtype=np.float64)


def escalation_by_bin(
    convs: Iterable[ConversationEscalation], n_bins: int = DEFAULT_BINS, confidence: float = 0.95
) -> list[EscalationBin]:
    """Weighted escalation rate per fixed confidence bin, ``n_bins`` rows in bin order."""
    conf, esc, w = _arrays(list(convs))
    idx = bin_index(conf, n_bins)
    out = []
    for b in range(n_bins):
        sel = idx == b
        wb, n = w[sel], int(sel.sum())
        tot = float(wb.sum())
        rate = float((wb * esc[sel]).sum()) / tot if n else None
        lo, hi = wilson_interval(rate, _kish(wb), confidence) if rate is not None else (None, None)
        out.append(
            EscalationBin(
                b,
                b / n_bins,
                (b + 1) / n_bins,
                n,
                tot,
                float((wb * esc[sel]).sum()),
                float((wb * conf[sel]).sum()) / tot if n else None,
                rate,
                lo,
                hi,
            )
        )
    return out


@dataclass(frozen=True)
class InversionTest:
    """Result of :func:`inversion_test`; p-values are one-sided (H1: positive correlation) and
    None when the test cannot be computed (too few bins, constant data)."""

    spearman_rho: float | None
    spearman_pvalue: float | None
    n_bins_used: int
    kendall_tau: float | None
    kendall_pvalue: float | None
    n_conversations: int
    alpha: float
    inverted: bool
    reason: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _finite(x: Any) -> float | None:
    v = float(x)
    return v if math.isfinite(v) else None


def inversion_test(
    convs: Iterable[ConversationEscalation],
    *,
    n_bins: int = DEFAULT_BINS,
    alpha: float = 0.01,
    min_conversations: int = 30,
    min_bin_conversations: int = 5,
) -> InversionTest:
    """Flag escalation rising with confidence (module docstring).  Never flags below
    ``min_conversations`` conversations with a confidence."""
    convs = list(convs)
    conf, esc, _ = _arrays(convs)
    rows = [b for b in escalation_by_bin(convs, n_bins) if b.n >= max(1, min_bin_conversations)]
    rho = p_rho = tau = p_tau = None
    if len(rows) >= 3 and len({b.rate for b in rows}) > 1:
        res = stats.spearmanr(
            [b.mean_confidence for b in rows], [b.rate for b in rows], alternative="greater"
        )
        rho, p_rho = _finite(res.statistic), _finite(res.pvalue)
    if len(conf) >= 2 and np.ptp(conf) > 0 and np.ptp(esc) > 0:
        res = stats.kendalltau(conf, esc, alternative="greater")
        tau, p_tau = _finite(res.statistic), _finite(res.pvalue)
    tests = [
        (n, r, p)
        for n, r, p in (("spearman", rho, p_rho), ("kendall", tau, p_tau))
        if r is not None and p is not None
    ]
    fired = [n for n, r, p in tests if r > 0 and p < alpha / len(tests)]
    if len(conf) < min_conversations:
        reason, fired = f"too few conversations: {len(conf)} < {min_conversations}", []
    elif not tests:
        reason = "no rank test computable (constant confidence or escalation)"
    elif fired:
        reason = f"inversion: {', '.join(fired)} positive, p < {alpha}/{len(tests)}"
    else:
        reason = f"no significant positive correlation at alpha {alpha}/{len(tests)}"
    return InversionTest(rho, p_rho, len(rows), tau, p_tau, len(conf), alpha, bool(fired), reason)


@dataclass(frozen=True)
class EscalationTiming:
    """Median and p90 time to escalation over escalated conversations that report it
    (``n_turns`` / ``n_seconds`` of them; the quantiles are None when there are none)."""

    n_turns: int
    median_turns: float | None
    p90_turns: float | None
    n_seconds: int
    median_seconds: float | None
    p90_seconds: float | None


def time_to_escalation(convs: Iterable[ConversationEscalation]) -> EscalationTiming:
    """Weighted median and p90 of escalation turn and seconds from the first event."""
    esc = [c for c in convs if c.escalated]
    out: list[Any] = []
    for attr in ("escalation_turn", "escalation_seconds"):
        vals = [(getattr(c, attr), c.weight) for c in esc if getattr(c, attr) is not None]
        v, w = [a for a, _ in vals], [b for _, b in vals]
        out += [len(vals), *((weighted_quantile(v, q, w) if vals else None) for q in (0.5, 0.9))]
    return EscalationTiming(*out)


@dataclass(frozen=True)
class MissedEscalations:
    """Conversations with min confidence < ``threshold``, not escalated, failed: ``count``
    (raw), ``weight`` (weighted); ``rate`` = their weight / weight of all conversations below
    the threshold with a known outcome (None when there are none)."""

    threshold: float
    count: int
    weight: float
    low_confidence_known_weight: float
    rate: float | None


def missed_escalations(
    convs: Iterable[ConversationEscalation], threshold: float
) -> MissedEscalations:
    """Count and rate of missed escalations at ``threshold`` (see :class:`MissedEscalations`)."""
    low = [
        c
        for c in convs
        if c.min_confidence is not None and c.min_confidence < threshold and c.success is not None
    ]
    missed = [c for c in low if not c.escalated and c.success is False]
    den = sum(c.weight for c in low)
    num = sum(c.weight for c in missed)
    return MissedEscalations(threshold, len(missed), num, den, num / den if den else None)
