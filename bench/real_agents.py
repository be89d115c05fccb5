"""The real-answer agents of the alert benchmarks (``bench/alert_quality.py``,
``bench/nannyml_drift.py``): tier-3 agents resampled from ``tests/data/answers`` near each
calibration rule's threshold, with one change, and with a recovery (see alert_quality's
docstring); and the oracle change detector their drift pages are held against."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np

from monitor.analytics.drift_tests import SURPRISE_PSEUDOCOUNT
from monitor.sim.answers import (
    METRICS,
    AnswerAgent,
    Mixture,
    Pool,
    parse_pools,
    population_metric,
    tune,
)

T0 = datetime(2026, 3, 2, tzinfo=UTC)
ANSWERS = Path(__file__).resolve().parents[1] / "tests/data/answers/stated_confidence_answers.csv"
CALIBRATED = Mixture(
    (("lsat_gemini-1.5-flash", 0.4), ("sciq_claude-3-haiku", 0.2), ("sciq_gemini-1.5-flash", 0.4))
)
TIER3 = {
    "ece_tier3": ("ece", 0.05, "lsat_gpt-4", 0.13),
    "overconfidence_tier3": ("overconfidence_gap", 0.1, "lsat_gpt-3.5-turbo", 0.2),
    "brier_tier3": ("brier", 0.2, "lsat_gpt-3.5-turbo", 0.25),
}
REAL_HOURS = 48
PER_HOUR = 150


def real_agents() -> tuple[dict[str, AnswerAgent], dict[str, dict[str, float]]]:
    """The real-answer agents (module docstring) and, per agent, its population metrics."""
    pools = parse_pools(ANSWERS.read_text())
    change = T0 + timedelta(hours=24)
    agents: dict[str, AnswerAgent] = {}
    sharp = Mixture((("sciq_gemini-1.5-flash", 1.0),))  # the lowest Brier of the pools
    for rule, (metric, thr, worse, edge) in TIER3.items():
        for name, target in (("under", thr * 2 / 3), ("over", thr * 4 / 3), ("edge", edge)):
            if name == "under" and metric == "ece":
                mix = CALIBRATED  # ECE 0.038: the lowest these answers can mix to
            elif name == "under" and metric == "brier":
                mix = tune(pools, sharp, CALIBRATED, metric, target)
            else:
                mix = tune(pools, CALIBRATED, Mixture(((worse, 1.0),)), metric, target)
            agents[f"{rule}:{name}"] = AnswerAgent(f"{rule}:{name}", 3, "qa", ((None, mix),))
    over = tune(
        pools, CALIBRATED, Mixture((("lsat_gpt-3.5-turbo", 1.0),)), "overconfidence_gap", 0.2
    )
    ece_edge = tune(pools, CALIBRATED, Mixture((("lsat_gpt-4", 1.0),)), "ece", 0.13)
    agents["changed:overconfident"] = AnswerAgent(
        "changed:overconfident", 3, "qa", ((None, CALIBRATED), (change, over))
    )
    agents["changed:ece"] = AnswerAgent(
        "changed:ece", 3, "qa", ((None, CALIBRATED), (change, ece_edge))
    )
    phases = (
        (None, CALIBRATED),
        (T0 + timedelta(hours=12), over),
        (T0 + timedelta(hours=30), CALIBRATED),
    )
    agents["recovers"] = AnswerAgent("recovers", 3, "qa", phases)
    facts = {
        k: {m: round(population_metric(m, pools, a.phases[-1][1]), 3) for m in METRICS}
        for k, a in agents.items()
    }
    return agents, facts


SURPRISE_LOG_C = math.log(1e5)
"""The drift sequential test's threshold (false alarm at most once per 100,000 answers): the
oracle below is held to the same bound."""


def cell_probabilities(pools: dict[str, Pool], mix: Mixture, n_bins: int = 10) -> np.ndarray:
    """P(confidence bin, correct) of a mixture's answer population, shape ``(n_bins, 2)``
    (equal-width bins, as the monitor's)."""
    out = np.zeros((n_bins, 2))
    for name, p in mix.weights:
        if p > 0:
            pool = pools[name]
            bins = np.minimum((pool.conf * n_bins).astype(int), n_bins - 1)
            np.add.at(out, (bins, pool.y.astype(int)), p / len(pool.conf))
    return out


REFERENCE_ANSWERS = 24 * PER_HOUR
"""Answers in the drift check's 24 h reference at :data:`PER_HOUR`."""


def as_reference_sees(cells: np.ndarray, n: int = REFERENCE_ANSWERS) -> np.ndarray:
    """``cells`` (a ``cell_probabilities`` table) as a reference of ``n`` answers estimates
    them: each cell's expected count plus the sequential test's 0.5 pseudocount
    (``SURPRISE_PSEUDOCOUNT``), renormalised. A cell the resampled pools never produce has
    probability 0, so the plain oracle reads one answer there as ``log(after / 1e-12)`` (21
    nats and more, set by the floor, not by the answers): it pages at that answer whatever
    its threshold. No detector that learns the before distribution from answers can; this
    oracle is the same detector with that one advantage removed."""
    smoothed = cells * n + SURPRISE_PSEUDOCOUNT
    return np.asarray(smoothed / smoothed.sum(), dtype=np.float64)


def oracle_delay(
    items: list[tuple[datetime, float, int]],
    change: datetime,
    before: np.ndarray,
    after: np.ndarray,
    threshold: float = SURPRISE_LOG_C,
) -> float | None:
    """Minutes from ``change`` to the answer at which the oracle detector fires: it knows the
    change time and both (bin, correct) distributions, and sums the log likelihood ratio
    ``log after/before`` of each answer since the change until it reaches ``threshold`` (a
    sequential probability ratio test at the same false-alarm bound as the drift check);
    None when it never does."""
    n_bins = before.shape[0]
    llr = np.log(np.maximum(after, 1e-12)) - np.log(np.maximum(before, 1e-12))
    total = 0.0
    for at, conf, y in items:
        if at < change:
            continue
        total += float(llr[min(int(conf * n_bins), n_bins - 1), y])
        if total >= threshold:
            return (at - change) / timedelta(minutes=1)
    return None
