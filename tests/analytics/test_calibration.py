"""Calibration math: every metric against an independent implementation.

Independent references: plain Python loops over the raw items, scikit-learn's
``calibration_curve`` / ``brier_score_loss`` / ``IsotonicRegression`` and scipy's Wilson interval.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.stats import binomtest
from sklearn.calibration import calibration_curve
from sklearn.isotonic import IsotonicRegression
from sklearn.metrics import brier_score_loss

from monitor.analytics.bins import ROW_FIELDS, BinSums, bin_edges, bin_index, sum_all
from monitor.analytics.calibration import (
    Proportion,
    bootstrap_from_items,
    brier,
    calibration_report,
    ece,
    mce,
    parametric_bootstrap,
    report_from_items,
    wilson_interval,
)
from monitor.analytics.recalibration import IsotonicMap, fit_isotonic, fit_isotonic_map

RTOL = 1e-12


def _items(n: int, seed: int = 0, shift: float = 0.0, weighted: bool = True):
    rng = np.random.default_rng(seed)
    conf = rng.beta(4.0, 2.0, n)
    y = (rng.random(n) < np.clip(conf - shift, 0.0, 1.0)).astype(float)
    w = rng.uniform(0.5, 20.0, n) if weighted else np.ones(n)
    return conf, y, w


def _reference(conf, y, w, n_bins=10):
    """Direct loop over raw items: per bin W, Σw·conf, Σw·y, then ECE/MCE/Brier textbook-style."""
    W = [0.0] * n_bins
    C = [0.0] * n_bins
    Y = [0.0] * n_bins
    N = [0] * n_bins
    W2 = [0.0] * n_bins
    sq = 0.0
    for c, yy, ww in zip(conf.tolist(), y.tolist(), w.tolist(), strict=True):
        b = max(k for k in range(n_bins) if k / n_bins <= c)  # left-closed, 1.0 -> last bin
        W[b] += ww
        C[b] += ww * c
        Y[b] += ww * yy
        W2[b] += ww * ww
        N[b] += 1
        sq += ww * (c - yy) ** 2
    total = sum(W)
    bins = []
    for b in range(n_bins):
        if W[b] > 0:
            bins.append((b, C[b] / W[b], Y[b] / W[b], W[b], N[b], W[b] ** 2 / W2[b]))
    e = sum(wb / total * abs(acc - cf) for _, cf, acc, wb, _, _ in bins)
    m = max(abs(acc - cf) for _, cf, acc, _, _, _ in bins)
    return {
        "ece": e,
        "mce": m,
        "brier": sq / total,
        "bins": bins,
        "accuracy": sum(Y) / total,
        "mean_conf": sum(C) / total,
    }


# -- bins -------------------------------------------------------------------------------------


def test_bin_convention_left_closed_with_one_in_last_bin():
    vals = [0.0, 0.05, 0.1, 0.3, 0.5, 0.7, 0.6, 0.9999, 1.0]
    assert bin_index(vals).tolist() == [0, 0, 1, 3, 5, 7, 6, 9, 9]
    assert bin_index([0.5, 1.0], n_bins=2).tolist() == [1, 1]
    assert bin_edges(10)[3] == 0.3  # exact division, not 3 * 0.1
    for bad in ([math.nan], [-0.01], [1.01], [math.inf]):
        with pytest.raises(ValueError):
            bin_index(bad)
    with pytest.raises(ValueError):
        bin_edges(0)


def test_from_items_validates():
    with pytest.raises(ValueError):
        BinSums.from_items([0.5], [1.0], [-1.0])
    with pytest.raises(ValueError):
        BinSums.from_items([0.5, 0.6], [1.0])
    with pytest.raises(ValueError):
        BinSums.from_items([0.5], [2.0])
    assert BinSums.from_items([], []) == BinSums.empty()


def test_rows_round_trip_and_duplicate_rows_are_summed():
    s = BinSums.from_items(*_items(500, seed=1))
    assert BinSums.from_rows(s.to_rows()) == s
    tuples = [tuple(r[f] for f in ROW_FIELDS) for r in s.to_rows()]  # rows as the store gives
    assert BinSums.from_rows(tuples) == s
    assert len(s.to_rows(include_empty=True)) == 10
    json.dumps(s.to_rows())
    doubled = BinSums.from_rows(s.to_rows() + tuples)
    assert doubled.isclose(s + s)
    with pytest.raises(ValueError):
        BinSums.from_rows([(10, 1.0, 0.5, 1.0, 0.25, 1.0, 1)])
    assert BinSums.from_items([0.35], [1.0], [2.0]).to_rows() == [
        {
            "bin": 3,
            "weight": 2.0,
            "sum_conf": 0.7,
            "sum_y": 2.0,
            "sum_sq_err": 2.0 * 0.65**2,
            "sum_w2": 4.0,
            "count": 1,
        }
    ]


# -- metrics against independent implementations ---------------------------------------------


@pytest.mark.parametrize("weighted", [False, True])
def test_metrics_match_direct_loop(weighted):
    conf, y, w = _items(3000, seed=2, shift=0.1, weighted=weighted)
    conf[:3] = [0.0, 0.3, 1.0]  # edge values take the documented bins in both implementations
    ref = _reference(conf, y, w)
    rep = calibration_report(BinSums.from_items(conf, y, w))
    assert np.isclose(rep.ece, ref["ece"], rtol=RTOL)
    assert np.isclose(rep.mce, ref["mce"], rtol=RTOL)
    assert np.isclose(rep.brier, ref["brier"], rtol=RTOL)
    assert np.isclose(rep.accuracy, ref["accuracy"], rtol=RTOL)
    assert np.isclose(rep.overconfidence_gap, ref["mean_conf"] - ref["accuracy"], rtol=1e-9)
    got = [r for r in rep.bins if r.weight > 0]
    assert [r.index for r in got] == [b[0] for b in ref["bins"]]
    for r, (b, cf, acc, wb, nb, neff) in zip(got, ref["bins"], strict=True):
        assert (r.lo, r.hi) == (b / 10, (b + 1) / 10)
        assert np.isclose(r.mean_confidence, cf, rtol=RTOL)
        assert np.isclose(r.accuracy, acc, rtol=RTOL)
        assert np.isclose(r.weight, wb, rtol=RTOL) and r.count == nb
        assert np.isclose(r.n_eff, neff, rtol=1e-9)
        assert np.allclose(r.accuracy_ci, wilson_interval(acc, neff), rtol=1e-9)


def test_reliability_bins_and_ece_match_sklearn_calibration_curve():
    rng = np.random.default_rng(3)
    conf = rng.uniform(0.0, 0.85, 4000)  # the last bin stays empty: sklearn drops it
    y = (rng.random(4000) < conf**1.5).astype(int)
    edges = np.linspace(0.0, 1.0, 11)
    # sklearn closes bins on the right, we on the left: identical unless a value sits on an edge
    assert not np.isin(conf, edges).any() and not np.isin(conf, bin_edges(10)).any()
    prob_true, prob_pred = calibration_curve(y, conf, n_bins=10, strategy="uniform")
    rep = calibration_report(BinSums.from_items(conf, y))
    nonempty = [r for r in rep.bins if r.count > 0]
    assert len(nonempty) == len(prob_true) == 9
    assert np.allclose([r.accuracy for r in nonempty], prob_true, rtol=RTOL)
    assert np.allclose([r.mean_confidence for r in nonempty], prob_pred, rtol=RTOL)
    counts = np.histogram(conf, bins=edges)[0]
    counts = counts[counts > 0]
    sk_ece = float(np.sum(counts / counts.sum() * np.abs(prob_true - prob_pred)))
    assert np.isclose(rep.ece, sk_ece, rtol=RTOL)
    assert np.isclose(rep.mce, float(np.max(np.abs(prob_true - prob_pred))), rtol=RTOL)


@pytest.mark.parametrize("weighted", [False, True])
def test_brier_matches_sklearn(weighted):
    conf, y, w = _items(5000, seed=4, shift=0.15, weighted=weighted)
    got = brier(BinSums.from_items(conf, y, w))
    assert np.isclose(got, brier_score_loss(y, conf, sample_weight=w), rtol=RTOL)


@pytest.mark.parametrize(("k", "n"), [(0, 10), (3, 10), (10, 10), (57, 120), (1, 1), (990, 1000)])
@pytest.mark.parametrize("level", [0.9, 0.95, 0.99])
def test_wilson_matches_scipy(k, n, level):
    ref = binomtest(k, n).proportion_ci(confidence_level=level, method="wilson")
    lo, hi = wilson_interval(k / n, n, level)
    assert np.isclose(lo, ref.low, atol=1e-12) and np.isclose(hi, ref.high, atol=1e-12)


def test_wilson_edge_cases():
    assert all(math.isnan(v) for v in wilson_interval(0.5, 0))
    assert all(math.isnan(v) for v in wilson_interval(math.nan, 10))
    with pytest.raises(ValueError):
        wilson_interval(0.5, 10, confidence=1.0)


def test_proportion_is_k_of_n_with_its_wilson_interval():
    p = Proportion.of(3, 10)
    assert (p.k, p.n, p.value) == (3, 10, 0.3)
    assert (p.low, p.high) == wilson_interval(0.3, 10)
    assert Proportion.of(0, 0) == Proportion(0, 0, None, None, None)
    assert Proportion.of(0, -1).value is None


# -- mergeability and subtraction -------------------------------------------------------------


def test_summed_hourly_rows_equal_all_items_at_once():
    conf, y, w = _items(24_000, seed=5, shift=0.05)
    hour = np.random.default_rng(6).integers(0, 24, conf.size)
    hourly = [BinSums.from_items(conf[hour == h], y[hour == h], w[hour == h]) for h in range(24)]
    rows = [row for s in hourly for row in s.to_rows()]  # as a SQL roll-up would return them
    whole = BinSums.from_items(conf, y, w)
    for merged in (sum_all(hourly), BinSums.from_rows(rows), sum_all(reversed(hourly))):
        assert merged.isclose(whole)
        a, b = calibration_report(merged), calibration_report(whole)
        for name in ("ece", "mce", "brier", "accuracy", "mean_confidence", "n_eff", "weight"):
            assert np.isclose(getattr(a, name), getattr(b, name), rtol=RTOL, atol=0), name
        for ra, rb in zip(a.bins, b.bins, strict=True):
            assert np.isclose(ra.accuracy, rb.accuracy, rtol=RTOL, equal_nan=True)


def test_subtraction_round_trips_and_moves_a_relabelled_item():
    conf, y, w = _items(1000, seed=7)
    base = BinSums.from_items(conf, y, w)
    extra = BinSums.from_items([0.83], [1.0], [3.5])
    assert ((base + extra) - extra).isclose(base)
    # a late ground-truth label replaces the judge's: subtract the old item, add the new one
    judged = BinSums.from_items(conf, y, w)
    old = BinSums.from_items(conf[:1], y[:1], w[:1])
    new = BinSums.from_items(conf[:1], 1.0 - y[:1], w[:1])
    y2 = y.copy()
    y2[0] = 1.0 - y2[0]
    assert (judged - old + new).isclose(BinSums.from_items(conf, y2, w))
    # removing every item leaves exact zeros (no rounding residue), removing more raises
    assert base - base == BinSums.empty()
    assert (extra + extra - extra - extra) == BinSums.empty()
    with pytest.raises(ValueError):
        _ = base - (base + extra)
    with pytest.raises(ValueError):
        _ = base + BinSums.empty(5)


# -- statistical checks -----------------------------------------------------------------------


def test_calibrated_population_has_low_ece_and_overconfident_one_a_positive_gap():
    rng = np.random.default_rng(8)
    conf = rng.uniform(0.0, 1.0, 20_000)
    good = calibration_report(BinSums.from_items(conf, (rng.random(conf.size) < conf)))
    assert good.meaningful and good.reason is None
    assert good.ece < 0.03 and abs(good.overconfidence_gap) < 0.02
    conf = rng.uniform(0.3, 1.0, 20_000)
    bad = calibration_report(BinSums.from_items(conf, rng.random(conf.size) < conf - 0.2))
    assert abs(bad.overconfidence_gap - 0.2) < 0.015 and bad.overconfidence_gap > 0
    assert abs(bad.ece - 0.2) < 0.02 and bad.ece_ci[0] > 0.15
    under = calibration_report(BinSums.from_items(conf * 0.7, rng.random(conf.size) < conf))
    assert under.overconfidence_gap < -0.1


def test_stratified_sample_with_inverse_probability_weights_estimates_population():
    """Stratum A (10% of traffic) is badly overconfident and oversampled at 50%; stratum B is
    calibrated and sampled at 2%.  Unweighted, the sample looks terrible; weighted, it matches."""
    rng = np.random.default_rng(9)
    n_a, n_b = 20_000, 180_000
    conf = rng.uniform(0.6, 1.0, n_a + n_b)
    is_a = np.arange(conf.size) < n_a
    y = (rng.random(conf.size) < np.where(is_a, conf - 0.4, conf)).astype(float)
    pop = BinSums.from_items(conf, y)
    rate = np.where(is_a, 0.5, 0.02)
    take = rng.random(conf.size) < rate
    weighted = BinSums.from_items(conf[take], y[take], 1.0 / rate[take])
    unweighted = BinSums.from_items(conf[take], y[take])
    for metric, tol in ((ece, 0.015), (brier, 0.01)):
        err_w = abs(metric(weighted) - metric(pop))
        err_u = abs(metric(unweighted) - metric(pop))
        assert err_w < tol and err_u > 10 * err_w, (metric.__name__, err_w, err_u)
    acc_pop = float(pop.sum_y.sum() / pop.weight.sum())
    rep = calibration_report(weighted)
    assert abs(rep.accuracy - acc_pop) < 0.01
    assert rep.accuracy_ci[0] < acc_pop < rep.accuracy_ci[1]
    assert rep.n_eff < weighted.total_count  # unequal weights cost effective sample size


def test_intervals_from_sums_and_from_items_agree_and_are_seeded():
    conf, y, w = _items(8000, seed=10, shift=0.1)
    sums = BinSums.from_items(conf, y, w)
    par = parametric_bootstrap(sums, n_boot=500, seed=1)
    assert par == parametric_bootstrap(sums, n_boot=500, seed=1)
    items = bootstrap_from_items(conf, y, w, n_boot=300, seed=1)
    assert items == bootstrap_from_items(conf, y, w, n_boot=300, seed=1)
    for p, i, point in (
        (par.ece_ci, items.ece_ci, ece(sums)),
        (par.brier_ci, items.brier_ci, brier(sums)),
    ):
        assert p[0] < point < p[1] and i[0] < point < i[1]
        width_p, width_i = p[1] - p[0], i[1] - i[0]
        assert 0.4 < width_p / width_i < 2.5, (p, i)
    rep = report_from_items(conf, y, w, n_boot=200)
    assert rep.ci_method == "item-bootstrap"
    assert calibration_report(sums, n_boot=200).ci_method == "bin-parametric-bootstrap"


def test_below_min_samples_is_flagged_not_meaningful():
    conf, y, _ = _items(60, seed=11)
    rep = calibration_report(BinSums.from_items(conf, y))
    assert not rep.meaningful and "below min_samples" in (rep.reason or "")
    assert math.isfinite(rep.ece)  # still computed, but flagged
    # 200 items whose weights are very unequal have an effective size below 100
    conf, y, _ = _items(200, seed=12)
    w = np.where(np.arange(200) < 5, 1000.0, 1.0)
    assert not calibration_report(BinSums.from_items(conf, y, w)).meaningful
    assert calibration_report(BinSums.from_items(conf, y, w), min_samples=1).meaningful
    empty = calibration_report(BinSums.empty())
    assert not empty.meaningful and math.isnan(empty.ece) and math.isnan(empty.mce)
    d = json.loads(json.dumps(empty.to_dict(), allow_nan=False))
    assert d["ece"] is None and d["bins"][0]["accuracy"] is None and d["meaningful"] is False
    full = json.loads(json.dumps(report_from_items(*_items(300), n_boot=50).to_dict()))
    assert len(full["bins"]) == 10 and len(full["ece_ci"]) == 2


# -- recalibration ----------------------------------------------------------------------------


def test_isotonic_map_apply_equals_sklearn_predict():
    conf, y, w = _items(3000, seed=13, shift=0.2)
    model = IsotonicRegression(increasing=True, out_of_bounds="clip", y_min=0.0, y_max=1.0)
    model.fit(conf, y, sample_weight=w)
    fitted = fit_isotonic_map(conf, y, w)
    stored = IsotonicMap.from_dict(json.loads(json.dumps(fitted.to_dict())))
    grid = np.concatenate([np.linspace(0.0, 1.0, 2001), conf])
    assert np.allclose(stored.apply(grid), model.predict(grid), rtol=0, atol=1e-12)
    assert stored.apply_one(0.0) == pytest.approx(float(model.predict([0.0])[0]), abs=1e-12)
    assert np.all(np.diff(stored.apply(np.linspace(0, 1, 101))) >= 0)


def test_fit_isotonic_improves_held_out_ece_and_is_deterministic():
    conf, y, w = _items(6000, seed=14, shift=0.25)
    res = fit_isotonic(conf, y, w, seed=3)
    assert res.n_train + res.n_holdout == 6000 and res.n_holdout == 1800
    assert res.ece_before > 0.15 and res.ece_after < 0.05
    assert res.brier_after < res.brier_before
    again = fit_isotonic(conf, y, w, seed=3)
    assert again == res
    assert fit_isotonic(conf, y, w, seed=4).map != res.map
    json.dumps(res.to_dict())


def test_isotonic_validation():
    with pytest.raises(ValueError, match="at least 200"):
        fit_isotonic(*_items(150))
    with pytest.raises(ValueError):
        IsotonicMap((0.5, 0.2), (0.1, 0.2))
    with pytest.raises(ValueError):
        IsotonicMap((0.1, 0.2), (0.3, 0.2))
    with pytest.raises(ValueError):
        IsotonicMap.from_dict({"method": "platt", "xs": [0.0], "ys": [0.0]})
    assert IsotonicMap((0.5,), (0.7,)).apply([0.0, 1.0]).tolist() == [0.7, 0.7]
    assert IsotonicMap.identity().apply_one(0.42) == 0.42


def test_metrics_package_imports_no_io_library():
    code = (
        "import sys, monitor.analytics.bins, monitor.analytics.calibration, "
        "monitor.analytics.recalibration; bad = {'sqlalchemy', 'httpx', 'faust', 'aiokafka', "
        "'asyncpg'} & set(sys.modules); assert not bad, bad"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


# -- properties -------------------------------------------------------------------------------

_unit = st.floats(0.0, 1.0, allow_nan=False)
_item = st.tuples(_unit, st.sampled_from([0.0, 1.0]), st.floats(0.0, 100.0, allow_nan=False))


def _sums(items):
    if not items:
        return BinSums.empty()
    c, y, w = (np.array(v) for v in zip(*items, strict=True))
    return BinSums.from_items(c, y, w)


@settings(max_examples=200, deadline=None)
@given(st.lists(_item, max_size=60), st.lists(_item, max_size=60))
def test_properties_bounds_and_merge(a, b):
    sa, sb = _sums(a), _sums(b)
    ab, ba = sa + sb, sb + sa
    assert ab == ba  # elementwise float addition is commutative, exactly
    assert ab.isclose(_sums(a + b), rtol=1e-9, atol=1e-9)
    assert BinSums.from_rows(ab.to_rows(include_empty=True)) == ab
    if ab.total_weight > 0:
        e, m, br = ece(ab), mce(ab), brier(ab)
        assert -1e-12 <= e <= m + 1e-12 and m <= 1 + 1e-12 and 0 <= br <= 1 + 1e-12
    if sb.total_count:
        assert (ab - sb).isclose(sa, rtol=1e-9, atol=1e-9)
