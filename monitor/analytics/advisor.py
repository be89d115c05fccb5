"""The threshold advisor: answers "which cut, and what does it buy?" (pure math, no I/O).

Input: conversations (:class:`~monitor.analytics.escalation.ConversationEscalation`) with a
minimum confidence, an outcome (``success`` or None) and a sampling weight. A threshold ``t``
escalates every conversation whose minimum confidence is ``< t`` and keeps the others.
Candidate thresholds are the observed distinct confidences (the smallest escalates nothing), so
the answer is an exact cut on the data, not a grid point.

Questions (:func:`advise`):

- ``keep=q``: keep the ``q`` most confident share, escalate the rest: the largest threshold
  whose escalated share is ``<= 1 - q`` (the least confident first);
- ``budget=b``: escalate at most the share ``b``: the largest threshold whose escalated share is
  ``<= b`` (escalating more never prevents fewer failures, so this prevents the most failures
  the budget allows); ``keep=q`` is ``budget=1-q``;
- ``target=e``: the smallest threshold (fewest escalations) whose residual error rate among the
  kept conversations with an outcome is ``<= e``;
- ``target`` and ``budget`` (or ``keep``): the smallest threshold meeting the target among those
  within the budget; when none does, no threshold and the reason.

Every answer reports the escalated share, the residual error rate among the kept, the share of
failures prevented relative to no escalation (failures among the escalated / all failures) and
the relative reduction of the error rate (``1 - residual / base``, Cleanlab's "reduce incorrect
responses by up to N %"), each rate with a Wilson interval on the Kish effective sample size of
its denominator. Ties: conversations whose confidence equals the cut are kept (the rule is
``< t``); how many there are and what the escalated share would be with them escalated is
reported, because with ties an exact share cannot be met.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from monitor.analytics.calibration import wilson_interval

if TYPE_CHECKING:
    from monitor.analytics.escalation import ConversationEscalation

_EPS = 1e-12


@dataclass(frozen=True)
class WeightedProportion:
    """A weighted proportion with its Wilson interval (``n_eff``: Kish effective size of the
    denominator). ``value`` is None when the denominator is empty."""

    value: float | None
    low: float | None
    high: float | None
    n_eff: float


@dataclass(frozen=True)
class Advice:
    """The answer to one question (see the module docstring); ``threshold`` None means no
    candidate answers it, and ``reason`` says why. ``question`` states the options given."""

    question: str
    threshold: float | None
    reason: str
    escalated_share: WeightedProportion | None = None
    residual_error: WeightedProportion | None = None
    failures_prevented: WeightedProportion | None = None
    error_rate_reduction: float | None = None
    base_error: WeightedProportion | None = None
    n_conversations: int = 0
    n_escalated: int = 0
    n_kept_with_outcome: int = 0
    tied_at_cut: int = 0
    escalated_share_with_ties: float | None = None


def _rate(num_w: float, den: np.ndarray) -> WeightedProportion:
    total = float(den.sum())
    if total <= 0:
        return WeightedProportion(None, None, None, 0.0)
    n_eff = total**2 / float((den * den).sum())
    p = min(max(num_w / total, 0.0), 1.0)
    lo, hi = wilson_interval(p, n_eff)
    return WeightedProportion(p, lo, hi, n_eff)


def question_text(keep: float | None, budget: float | None, target: float | None) -> str:
    """The options as the user gave them (only those given), e.g. ``"keep 0.8"``."""
    parts = [
        f"{n} {v:g}"
        for n, v in (("keep", keep), ("budget", budget), ("target", target))
        if v is not None
    ]
    return ", ".join(parts) or "none"


def advise(
    convs: Iterable[ConversationEscalation],
    *,
    keep: float | None = None,
    budget: float | None = None,
    target: float | None = None,
) -> Advice:
    """Answer one question (module docstring). ``keep`` and ``budget`` are shares in [0, 1]
    and exclusive of each other; ``target`` an error rate in [0, 1]. Raises ValueError when no
    option or both ``keep`` and ``budget`` are given, or a value is outside [0, 1].
    Conversations without a confidence are ignored."""
    given = [v for v in (keep, budget, target) if v is not None]
    if not given:
        raise ValueError("give keep, budget and/or target")
    if keep is not None and budget is not None:
        raise ValueError("keep and budget are two ways to say the same thing: give one")
    if any(not 0.0 <= v <= 1.0 for v in given):
        raise ValueError("keep, budget and target are shares in [0, 1]")
    question = question_text(keep, budget, target)
    limit = 1.0 - keep if keep is not None else budget
    known = [c for c in convs if c.min_confidence is not None]
    if not known:
        return Advice(question, None, "no conversation with a confidence in the range")
    conf = np.array([c.min_confidence for c in known], dtype=np.float64)
    w = np.array([c.weight for c in known], dtype=np.float64)
    has = np.array([c.success is not None for c in known], dtype=bool)
    failed = np.array([c.success is False for c in known], dtype=bool)
    total = float(w.sum())
    cuts = np.unique(conf)
    esc_share = np.array([float(w[conf < t].sum()) / total for t in cuts])
    residual: list[float | None] = []
    for t in cuts:
        kept = (conf >= t) & has
        kw = float(w[kept].sum())
        residual.append(float(w[kept & failed].sum()) / kw if kw > 0 else None)
    ok = np.ones(len(cuts), dtype=bool)
    if limit is not None:
        ok &= esc_share <= limit + _EPS
    if target is not None:
        ok &= np.array([r is not None and r <= target + _EPS for r in residual])
    if not ok.any():
        what = f"no threshold keeps the residual error <= {target:g}" + (
            f" within an escalated share of {limit:g}" if limit is not None else ""
        )
        return Advice(question, None, what, n_conversations=len(known))
    idx = np.flatnonzero(ok)
    i = int(idx[-1] if target is None else idx[0])
    t = float(cuts[i])
    below = conf < t
    tied = conf == t
    kept_known = ~below & has
    all_fail = float(w[failed].sum())
    caught = float(w[below & failed].sum())
    base = _rate(all_fail, w[has])
    res = _rate(float(w[kept_known & failed].sum()), w[kept_known])
    reduction = 1.0 - res.value / base.value if base.value and res.value is not None else None
    if target is None:
        why = f"the most escalations within an escalated share of {limit:g} (least confident first)"
    else:
        why = f"the fewest escalations with residual error <= {target:g}" + (
            f" within an escalated share of {limit:g}" if limit is not None else ""
        )
    return Advice(
        question,
        t,
        why,
        escalated_share=_rate(float(w[below].sum()), w),
        residual_error=res,
        failures_prevented=_rate(caught, w[failed]),
        error_rate_reduction=reduction,
        base_error=base,
        n_conversations=len(known),
        n_escalated=int(below.sum()),
        n_kept_with_outcome=int(kept_known.sum()),
        tied_at_cut=int(tied.sum()),
        escalated_share_with_ties=float(w[below | tied].sum()) / total,
    )
