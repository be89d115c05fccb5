"""The sequential ``surprise`` drift test (an e-detector on answers' surprise given their
confidence bin) and the minimum-reference guard of tracked checks: plain values, no I/O."""

from __future__ import annotations

import math

import numpy as np
from scipy.special import logsumexp

from monitor.analytics.bins import BinSums
from monitor.analytics.drift import check_drift_sums, surprise_e_detector
from monitor.analytics.drift_tests import SURPRISE_LOG_THRESHOLD, SURPRISE_THETAS


def _agent(rng: np.random.Generator, n: int, overconfidence: float = 0.0) -> BinSums:
    base = rng.uniform(0.5, 0.99, n)
    y = (rng.random(n) < base - overconfidence).astype(float)
    return BinSums.from_items(base, y, np.ones(n))


def _nested(rng: np.random.Generator, n: int, cuts: tuple[int, ...], over: float) -> list[BinSums]:
    """Windows ending now over ``n`` items, starting ``cuts`` items back."""
    base = rng.uniform(0.5, 0.99, n)
    y = (rng.random(n) < base - over).astype(float)
    return [BinSums.from_items(base[-k:], y[-k:], np.ones(k)) for k in cuts]


def test_log_e_value_equals_a_direct_item_loop() -> None:
    rng = np.random.default_rng(1)
    ref = _agent(rng, 3000)
    base = rng.uniform(0.5, 0.99, 200)
    y = (rng.random(200) < base - 0.1).astype(float)
    win = BinSums.from_items(base, y, np.ones(200))
    w, sy = np.asarray(ref.weight), np.asarray(ref.sum_y)
    pairs = zip(sy, w, strict=True)
    acc = np.array([min(0.99, max(0.01, a / n)) if n > 0 else 0.5 for a, n in pairs])
    share = np.asarray(ref.weight) / np.sum(ref.weight)
    b = np.minimum((base * 10).astype(int), 9)
    surprise = np.where(y == 1, -np.log(acc[b]), -np.log1p(-acc[b]))
    t0, t1 = -np.log1p(-acc), -np.log(acc)
    p0 = np.concatenate([share * (1 - acc), share * acc])
    comps = []
    for th in SURPRISE_THETAS:
        psi = math.log(float(np.sum(p0 * np.exp(th * np.concatenate([t0, t1])))))
        comps.append(th * surprise.sum() - len(y) * psi)
    expected = float(logsumexp(comps)) - math.log(len(SURPRISE_THETAS))
    got = surprise_e_detector(ref, [win])
    assert math.isclose(got.statistic, max(expected, 0.0), rel_tol=1e-9, abs_tol=1e-9)
    assert math.isclose(got.pvalue, min(1.0, math.exp(-got.statistic)))


def test_stationary_streams_stay_under_villes_bound() -> None:
    """P(max log E >= log 20) <= 1/20 under H0 (Ville): with a large reference, at most a few
    of 200 stationary streams of 900 items reach it over seven candidate change points."""
    rng = np.random.default_rng(7)
    cuts = (40, 75, 150, 300, 450, 600, 900)
    hits = 0
    for _ in range(200):
        ref = _agent(rng, 20000)
        hits += surprise_e_detector(ref, _nested(rng, 900, cuts, 0.0)).statistic >= math.log(20)
    assert hits <= 10, hits


def test_an_overconfident_change_crosses_the_threshold_within_a_few_hundred_answers() -> None:
    rng = np.random.default_rng(3)
    ref = _agent(rng, 3600)
    changed = surprise_e_detector(ref, _nested(rng, 300, (75, 150, 300), 0.2))
    assert changed.statistic >= SURPRISE_LOG_THRESHOLD, changed
    check = check_drift_sums(ref, _agent(rng, 150, 0.2), scan=_nested(rng, 300, (150, 300), 0.2))
    assert check.fired and "surprise" in check.fired_tests and check.surprise_log_e is not None
    assert "log e-value" in check.reason


def test_no_scan_or_a_small_reference_means_no_surprise_test() -> None:
    rng = np.random.default_rng(4)
    small = _agent(rng, 500)
    check = check_drift_sums(small, _agent(rng, 150, 0.2), scan=[_agent(rng, 150, 0.2)])
    assert check.surprise_log_e is None and "surprise" not in check.fired_tests
    assert check_drift_sums(_agent(rng, 3000), _agent(rng, 150)).surprise_log_e is None
    nothing = surprise_e_detector(small, [])
    assert (nothing.statistic, nothing.pvalue) == (0.0, 1.0)


def test_a_reference_below_min_reference_never_fires_but_reports() -> None:
    rng = np.random.default_rng(5)
    base, changed = _agent(rng, 600), _agent(rng, 600, 0.3)
    loud = check_drift_sums(base, changed)
    assert loud.fired
    quiet = check_drift_sums(base, changed, min_reference=1000)
    assert not quiet.fired and quiet.fired_tests == () and "reference too small" in quiet.reason
    assert quiet.accuracy_pvalue == loud.accuracy_pvalue  # statistics still reported
