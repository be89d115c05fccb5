"""Escalation-threshold what-if and advisor (pure math, no I/O; docs/design.md).

:func:`threshold_table` answers "what if every conversation with min confidence < t were
escalated?" for a grid of thresholds t, on the weighted :class:`ConversationEscalation` input of
:mod:`monitor.analytics.escalation`; :meth:`ThresholdTable.recommend` picks a threshold from those
rows given a target residual failure rate and/or an escalation budget.  Conversations without a
confidence are ignored.  Also re-exported from :mod:`monitor.analytics.escalation`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # the input type only; escalation.py re-exports this module at runtime
    from monitor.analytics.escalation import ConversationEscalation


@dataclass(frozen=True)
class ThresholdRow:
    """What-if for threshold ``t``: escalate every conversation with min confidence < t.

    ``escalation_rate``: weighted share escalated (None-confidence conversations excluded);
    ``residual_failure_rate``: weighted failure rate among the rest with a known outcome (None
    when none remain); ``failures_caught``: weighted failures among the escalated, and
    ``failures_caught_share`` their share of all known failures (None without failures)."""

    threshold: float
    escalation_rate: float
    residual_failure_rate: float | None
    failures_caught: float
    failures_caught_share: float | None
    n_escalated: int
    n_remaining_known: int


@dataclass(frozen=True)
class Recommendation:
    """A recommended threshold and its row, or ``threshold=None`` with the reason why not."""

    threshold: float | None
    row: ThresholdRow | None
    reason: str


@dataclass(frozen=True)
class ThresholdTable:
    """Rows of :func:`threshold_table` in increasing threshold order."""

    rows: tuple[ThresholdRow, ...]

    def recommend(
        self, target_residual_failure: float | None = None, escalation_budget: float | None = None
    ) -> Recommendation:
        """Pick a threshold.

        - target only: among rows with residual failure rate <= target, the lowest escalation
          rate (ties: the smallest threshold);
        - budget only: among rows with escalation rate <= budget, the lowest residual failure
          rate (ties: lowest escalation rate, then smallest threshold);
        - both: rows meeting both, lowest escalation rate.
        Rows with an unknown residual failure rate never qualify.  Neither given: ValueError.
        """
        if target_residual_failure is None and escalation_budget is None:
            raise ValueError("give target_residual_failure and/or escalation_budget")
        ok = [
            r
            for r in self.rows
            if r.residual_failure_rate is not None
            and (
                target_residual_failure is None
                or r.residual_failure_rate <= target_residual_failure
            )
            and (escalation_budget is None or r.escalation_rate <= escalation_budget)
        ]
        if not ok:
            asked = [
                f"{name} {v:g}"
                for name, v in (
                    ("target residual failure", target_residual_failure),
                    ("escalation budget", escalation_budget),
                )
                if v is not None
            ]
            return Recommendation(None, None, f"no candidate threshold meets {' and '.join(asked)}")
        if target_residual_failure is None:
            best = min(ok, key=lambda r: (r.residual_failure_rate, r.escalation_rate, r.threshold))
            why = f"lowest residual failure within escalation budget {escalation_budget}"
        else:
            best = min(ok, key=lambda r: (r.escalation_rate, r.threshold))
            why = f"lowest escalation rate meeting residual failure <= {target_residual_failure}"
        return Recommendation(best.threshold, best, why)


def threshold_table(
    convs: Iterable[ConversationEscalation], thresholds: Sequence[float] | None = None
) -> ThresholdTable:
    """What-if rows for ``thresholds`` (default 0.00, 0.01, ..., 1.00).  Conversations
    without a confidence are ignored; an empty input gives rows with escalation rate 0."""
    ts = (
        np.arange(101) / 100
        if thresholds is None
        else np.sort(np.asarray(thresholds, dtype=np.float64))
    )
    known = [c for c in convs if c.min_confidence is not None]
    conf = np.array([c.min_confidence for c in known], dtype=np.float64)
    w = np.array([c.weight for c in known], dtype=np.float64)
    has_outcome = np.array([c.success is not None for c in known], dtype=bool)
    failed = np.array([c.success is False for c in known], dtype=bool)
    total, all_fail = float(w.sum()), float(w[failed].sum())
    rows = []
    for t in ts:
        below = conf < t
        rest = ~below & has_outcome
        rest_w = float(w[rest].sum())
        caught = float(w[below & failed].sum())
        rows.append(
            ThresholdRow(
                float(t),
                float(w[below].sum()) / total if total else 0.0,
                float(w[rest & failed].sum()) / rest_w if rest.any() else None,
                caught,
                caught / all_fail if all_fail else None,
                int(below.sum()),
                int(rest.sum()),
            )
        )
    return ThresholdTable(tuple(rows))
