"""Escalation analytics against independent computations (numpy, scipy, hand tables)."""

from __future__ import annotations

import json
from dataclasses import asdict

import numpy as np
import pytest
from scipy import stats

from monitor.analytics.calibration import wilson_interval
from monitor.analytics.escalation import (
    ConversationEscalation as Conv,
)
from monitor.analytics.escalation import (
    escalation_by_bin,
    inversion_test,
    missed_escalations,
    time_to_escalation,
    weighted_quantile,
)
from monitor.analytics.thresholds import threshold_table

# --- weighted quantiles and Wilson ---------------------------------------------------------


def test_weighted_quantile_unit_weights_equal_numpy_percentile() -> None:
    rng = np.random.default_rng(3)
    for n in (1, 2, 3, 10, 101):
        x = rng.normal(size=n) * 10
        for q in (0.0, 0.1, 0.25, 0.5, 0.9, 0.99, 1.0):
            assert weighted_quantile(x, q) == pytest.approx(np.percentile(x, 100 * q), abs=1e-12)
            assert weighted_quantile(x, q, np.full(n, 3.7)) == pytest.approx(
                np.percentile(x, 100 * q), abs=1e-12
            )  # scale-free


def test_weighted_quantile_integer_weights_equal_repetition() -> None:
    rng = np.random.default_rng(4)
    x = rng.integers(0, 50, size=20).astype(float)
    w = rng.integers(1, 5, size=20)
    rep = np.repeat(x, w)
    for q in (0.1, 0.5, 0.9):
        assert weighted_quantile(x, q, w) == pytest.approx(np.percentile(rep, 100 * q))
    with pytest.raises(ValueError):
        weighted_quantile([], 0.5)
    with pytest.raises(ValueError):
        weighted_quantile([1.0, 2.0], 0.5, [1.0, 0.0])
    with pytest.raises(ValueError):
        weighted_quantile([1.0], 1.5)


def test_wilson_matches_scipy_binomtest() -> None:
    for k, n in ((0, 10), (3, 10), (50, 100), (99, 100), (7, 7)):
        ci = stats.binomtest(k, n).proportion_ci(confidence_level=0.95, method="wilson")
        lo, hi = wilson_interval(k / n, n)
        assert (lo, hi) == pytest.approx((ci.low, ci.high), abs=1e-12)


# --- escalation per bin and inversion --------------------------------------------------------


def _population(seed: int, n: int, slope: float) -> list[Conv]:
    """P(escalate) = 0.5 + slope * (conf - 0.5): slope < 0 is healthy, > 0 inverted."""
    rng = np.random.default_rng(seed)
    conf = rng.uniform(0, 1, n)
    esc = rng.random(n) < 0.5 + slope * (conf - 0.5)
    return [Conv(float(c), bool(e), None) for c, e in zip(conf, esc, strict=True)]


def test_escalation_by_bin_against_direct_weighted_loop() -> None:
    rng = np.random.default_rng(5)
    convs = [
        Conv(float(c), bool(rng.random() < 0.3), None, float(w))
        for c, w in zip(rng.uniform(0, 1, 400), rng.uniform(1, 10, 400), strict=True)
    ]
    convs.append(Conv(None, True, False))  # no confidence: ignored
    bins = escalation_by_bin(convs, n_bins=5)
    assert [b.index for b in bins] == list(range(5))
    for b in bins:
        members = [
            c
            for c in convs
            if c.min_confidence is not None and b.lower <= c.min_confidence < b.upper
        ]
        w = np.array([c.weight for c in members])
        e = np.array([c.escalated for c in members], dtype=float)
        assert b.n == len(members)
        assert b.rate == pytest.approx(float((w * e).sum() / w.sum()))
        n_eff = w.sum() ** 2 / (w**2).sum()
        assert (b.ci_low, b.ci_high) == pytest.approx(wilson_interval(b.rate, n_eff))
        assert b.ci_low <= b.rate <= b.ci_high


def test_inversion_fires_on_inverted_data_only() -> None:
    inverted = inversion_test(_population(1, 600, +0.6))
    assert inverted.inverted, inverted.reason
    assert inverted.kendall_tau is not None and inverted.kendall_tau > 0
    assert inverted.spearman_rho is not None and inverted.spearman_rho > 0.7
    healthy = inversion_test(_population(1, 600, -0.6))
    assert not healthy.inverted and healthy.kendall_tau is not None and healthy.kendall_tau < 0
    flat = inversion_test(_population(2, 600, 0.0))
    assert not flat.inverted, flat.reason
    json.dumps(inverted.to_dict())


def test_inversion_statistics_equal_scipy_and_hand_ranks() -> None:
    convs = _population(8, 500, +0.4)
    res = inversion_test(convs, alpha=0.05)
    conf = np.array([c.min_confidence for c in convs])
    esc = np.array([c.escalated for c in convs], dtype=float)
    tau = stats.kendalltau(conf, esc, alternative="greater")
    assert (res.kendall_tau, res.kendall_pvalue) == pytest.approx((tau.statistic, tau.pvalue))
    bins = [b for b in escalation_by_bin(convs) if b.n >= 5]
    rx = stats.rankdata([b.mean_confidence for b in bins])
    ry = stats.rankdata([b.rate for b in bins])
    # Spearman = Pearson on ranks
    assert res.spearman_rho == pytest.approx(np.corrcoef(rx, ry)[0, 1])
    assert res.n_bins_used == len(bins) == 10


def test_inversion_needs_enough_conversations() -> None:
    small = inversion_test(_population(1, 20, +1.0))
    assert not small.inverted and "too few" in small.reason
    const = inversion_test([Conv(0.5, i % 2 == 0, None) for i in range(50)])
    assert const.kendall_tau is None and not const.inverted


# --- time to escalation and missed escalations ----------------------------------------------


def test_time_to_escalation_against_numpy() -> None:
    rng = np.random.default_rng(6)
    turns = rng.integers(0, 30, 99)
    secs = rng.exponential(120, 99)
    convs = [Conv(0.5, True, None, 1.0, int(t), float(s)) for t, s in zip(turns, secs, strict=True)]
    convs += [Conv(0.5, False, None, 1.0, 3, 5.0), Conv(0.5, True, None, 1.0, None, None)]
    t = time_to_escalation(convs)
    assert (t.n_turns, t.n_seconds) == (99, 99)
    assert t.median_turns == pytest.approx(np.percentile(turns, 50))
    assert t.p90_turns == pytest.approx(np.percentile(turns, 90))
    assert t.median_seconds == pytest.approx(np.percentile(secs, 50))
    assert t.p90_seconds == pytest.approx(np.percentile(secs, 90))
    none = time_to_escalation([Conv(0.5, False, None)])
    assert none.n_turns == 0 and none.median_turns is None and none.p90_seconds is None


# A hand-computed table: (min conf, escalated, success, weight).
TABLE = [
    Conv(0.2, False, False, 1.0),  # A: low, not escalated, failed -> missed
    Conv(0.4, False, True, 1.0),  # B
    Conv(0.5, True, False, 2.0),  # C
    Conv(0.7, False, True, 1.0),  # D
    Conv(0.9, False, True, 1.0),  # E
    Conv(0.9, True, False, 1.0),  # F
    Conv(0.8, False, None, 1.0),  # H: outcome unknown
    Conv(None, False, False, 5.0),  # G: no confidence, ignored
]


def test_missed_escalations_hand_table() -> None:
    m = missed_escalations(TABLE, 0.6)
    assert (m.count, m.weight, m.low_confidence_known_weight) == (1, 1.0, 4.0)
    assert m.rate == pytest.approx(0.25)
    assert missed_escalations(TABLE, 0.1).rate is None


def test_threshold_table_hand_computed() -> None:
    rows = threshold_table(TABLE, [0.95, 0.3, 0.6]).rows
    got = [
        (
            r.threshold,
            r.escalation_rate,
            r.residual_failure_rate,
            r.failures_caught,
            r.failures_caught_share,
            r.n_escalated,
            r.n_remaining_known,
        )
        for r in rows
    ]
    assert got == [
        pytest.approx((0.3, 1 / 8, 3 / 6, 1.0, 1 / 4, 1, 5)),
        pytest.approx((0.6, 4 / 8, 1 / 3, 3.0, 3 / 4, 3, 3)),
        (0.95, 1.0, None, 4.0, 1.0, 7, 0),
    ]
    grid = threshold_table(TABLE)
    assert len(grid.rows) == 101 and grid.rows[0].threshold == 0.0
    assert grid.rows[0].escalation_rate == 0.0
    assert grid.rows[0].residual_failure_rate == pytest.approx(4 / 7)  # A, C, F of 7 known


def test_recommend_hand_computed() -> None:
    table = threshold_table(TABLE, [0.3, 0.6, 0.95])
    assert table.recommend(target_residual_failure=0.4).threshold == 0.6
    assert table.recommend(escalation_budget=0.2).threshold == 0.3
    assert table.recommend(target_residual_failure=0.4, escalation_budget=0.6).threshold == 0.6
    none = table.recommend(target_residual_failure=0.2)
    assert none.threshold is None and none.row is None
    assert none.reason == "no candidate threshold meets target residual failure 0.2"  # no None
    over = table.recommend(escalation_budget=0.1)
    assert over.threshold is None
    assert over.reason == "no candidate threshold meets escalation budget 0.1"
    both = table.recommend(target_residual_failure=0.2, escalation_budget=0.1).reason
    assert both.endswith("target residual failure 0.2 and escalation budget 0.1")
    with pytest.raises(ValueError):
        table.recommend()


def test_threshold_table_against_brute_force() -> None:
    rng = np.random.default_rng(9)
    convs = [
        Conv(
            float(c),
            False,
            None if rng.random() < 0.1 else bool(rng.random() < c),
            float(rng.uniform(1, 4)),
        )
        for c in rng.uniform(0, 1, 300)
    ]
    for row in threshold_table(convs).rows:
        t = row.threshold
        esc = [c for c in convs if c.min_confidence < t]  # type: ignore[operator]
        rest = [c for c in convs if c.min_confidence >= t and c.success is not None]  # type: ignore[operator]
        total = sum(c.weight for c in convs)
        assert row.escalation_rate == pytest.approx(sum(c.weight for c in esc) / total)
        if rest:
            fail = sum(c.weight for c in rest if not c.success)
            assert row.residual_failure_rate == pytest.approx(fail / sum(c.weight for c in rest))
        assert row.failures_caught == pytest.approx(
            sum(c.weight for c in esc if c.success is False)
        )
    rec = threshold_table(convs).recommend(target_residual_failure=0.2)
    assert rec.row is not None and rec.row.residual_failure_rate is not None
    assert rec.row.residual_failure_rate <= 0.2
    assert all(
        r.escalation_rate >= rec.row.escalation_rate
        for r in threshold_table(convs).rows
        if r.residual_failure_rate is not None and r.residual_failure_rate <= 0.2
    )
    json.dumps(asdict(rec))


def test_conversation_validation() -> None:
    for bad in (
        dict(min_confidence=1.2),
        dict(weight=0.0),
        dict(escalation_turn=-1),
        dict(escalation_seconds=float("nan")),
    ):
        with pytest.raises(ValueError):
            Conv(**{"min_confidence": 0.5, "escalated": True, "success": None, **bad})  # type: ignore[arg-type]
