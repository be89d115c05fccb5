"""Estimators that undo stratified conversation sampling.  Pure: no I/O, no events.

They take the per-conversation decisions of :mod:`monitor.sampling.policy` (which re-exports this
module) through the :class:`WeightedDecision` protocol, so they depend on nothing but the
weight each decision gives.  The two weight modes, and when ``rule_stratum`` is unbiased, are
described in the :mod:`monitor.sampling.policy` docstring.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal, Protocol

WeightMode = Literal["probability_sample", "rule_stratum"]


class WeightedDecision(Protocol):
    """What an estimator needs from a sampling decision: its weight in the estimates."""

    def estimation_weight(self, mode: WeightMode = "probability_sample") -> float:
        """The weight of this conversation in additive sums (0.0 = excluded)."""
        ...


@dataclass(frozen=True, slots=True)
class Estimate:
    """A weighted (Hájek) estimate of a population mean.

    ``mean`` and ``std_error`` are NaN when no item has positive weight; ``n`` counts the items
    with positive weight; ``weight_total`` is the estimated population size sum(w).
    """

    mean: float
    std_error: float
    n: int
    weight_total: float


def weighted_mean(
    values: Iterable[float],
    decisions: Iterable[WeightedDecision],
    mode: WeightMode = "probability_sample",
) -> Estimate:
    """Estimate the population mean of ``values`` from sampled conversations.

    ``values[i]`` is the measurement of the conversation decided by ``decisions[i]`` (a
    :class:`monitor.sampling.policy.SamplingDecision` or anything with its
    ``estimation_weight``; both of
    the same length; unsampled or zero-weight entries are ignored). The estimator is Hájek's:
    sum(w*y) / sum(w) with ``w = decision.estimation_weight(mode)``, i.e. the Horvitz-Thompson
    total over the Horvitz-Thompson population size. Its standard error is the linearised
    variance under Poisson sampling (each conversation drawn independently by its hash):
    sum((1 - 1/w) * w**2 * (y - mean)**2) / sum(w)**2. Units drawn with probability 1 add no
    variance.

    Raises ValueError on a length mismatch or a non-finite value.
    """
    ws: list[float] = []
    ys: list[float] = []
    for y, decision in zip(values, decisions, strict=True):
        w = decision.estimation_weight(mode)
        if w > 0.0:
            if not math.isfinite(y):
                raise ValueError(f"values must be finite, got {y!r}")
            ws.append(w)
            ys.append(float(y))
    total = math.fsum(ws)
    if not ws:
        return Estimate(math.nan, math.nan, 0, 0.0)
    mean = math.fsum(w * y for w, y in zip(ws, ys, strict=True)) / total
    var = math.fsum((1.0 - 1.0 / w) * w * w * (y - mean) ** 2 for w, y in zip(ws, ys, strict=True))
    return Estimate(mean, math.sqrt(max(var, 0.0)) / total, len(ws), total)
