"""Agreement of a judge with ground truth: accuracy and Cohen's kappa (pure; no I/O).

Inputs are paired binary labels (judge, truth) of the same items. Cohen's kappa is
``(p_o - p_e) / (1 - p_e)`` with ``p_o`` the observed agreement and ``p_e`` the agreement
expected by chance from the two marginals (scikit-learn's ``cohen_kappa_score``). When both
raters use a single class, ``p_e == 1`` and kappa is undefined: reported as None, with the
reason. Confusion counts use 1 = "correct" (a judge's label 1, a successful outcome).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from monitor.core.lazy import lazy_module

sk_metrics = lazy_module("sklearn.metrics")  # imported at first use (slow to import)

DEFAULT_MIN_PAIRS = 20


@dataclass(frozen=True)
class Agreement:
    """A judge against ground truth on ``n`` paired items."""

    n: int
    accuracy: float | None
    kappa: float | None
    true_pos: int  # judge 1, truth 1
    true_neg: int  # judge 0, truth 0
    false_pos: int  # judge 1, truth 0 (the judge missed a failure)
    false_neg: int  # judge 0, truth 1 (the judge flagged a good item)
    meaningful: bool
    reason: str | None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def agreement(
    judge: Sequence[int], truth: Sequence[int], min_pairs: int = DEFAULT_MIN_PAIRS
) -> Agreement:
    """Accuracy and kappa of ``judge`` against ``truth`` (equal-length 0/1 sequences).

    ``meaningful`` is False below ``min_pairs`` pairs or when kappa is undefined. Raises
    ValueError for unequal lengths or labels other than 0 and 1.
    """
    if len(judge) != len(truth):
        raise ValueError(f"length mismatch: {len(judge)} judge labels, {len(truth)} truths")
    if any(v not in (0, 1) for v in (*judge, *truth)):
        raise ValueError("labels must be 0 or 1")
    n = len(judge)
    pairs = list(zip(judge, truth, strict=True))
    tp = sum(1 for j, t in pairs if j == 1 and t == 1)
    tn = sum(1 for j, t in pairs if j == 0 and t == 0)
    fp = sum(1 for j, t in pairs if j == 1 and t == 0)
    fn = n - tp - tn - fp
    acc = (tp + tn) / n if n else None
    kappa: float | None = None
    reason: str | None = None
    if n == 0:
        reason = "no item has both a verdict and a ground-truth label"
    elif len(set(judge) | set(truth)) < 2:
        reason = "every label is the same class: kappa is undefined"
    else:
        k = float(sk_metrics.cohen_kappa_score(list(judge), list(truth)))
        kappa = k if math.isfinite(k) else None
        if kappa is None:
            reason = "kappa is undefined (chance agreement is 1)"
    if reason is None and n < min_pairs:
        reason = f"only {n} paired items (< {min_pairs})"
    return Agreement(n, acc, kappa, tp, tn, fp, fn, reason is None, reason)
