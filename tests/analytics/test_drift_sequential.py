"""The sequential ``surprise`` drift test (an e-detector on answers' surprise given their
confidence bin) and the minimum-reference guard of tracked checks: plain values, no I/O."""

from __future__ import annotations

import math

import numpy as np
from scipy.special import logsumexp

from monitor.analytics.bins import BinSums
from monitor.analytics.drift import check_drift_sums, surprise_e_detector
from monitor.analytics.drift_tests import (
    SURPRISE_CONCENTRATIONS,
    SURPRISE_LOG_THRESHOLD,
    SURPRISE_PSEUDOCOUNT,
    SURPRISE_THETAS,
)


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
    """Both families recomputed answer by answer: the surprise tilt from each answer's
    surprise, the Dirichlet mixture as the product of its predictable plug-in probabilities
    (a Pólya urn started at κ·p0: the betting e-process of the brief's plug-in estimator)."""
    rng = np.random.default_rng(1)
    ref = _agent(rng, 3000)
    base = rng.uniform(0.5, 0.99, 200)
    y = (rng.random(200) < base - 0.2).astype(float)
    win = BinSums.from_items(base, y, np.ones(200))
    cells = np.stack([np.asarray(ref.weight) - np.asarray(ref.sum_y), np.asarray(ref.sum_y)])
    cells = cells + SURPRISE_PSEUDOCOUNT
    p0 = cells / cells.sum()
    acc = np.clip(cells[1] / cells.sum(axis=0), 0.01, 0.99)
    b, yi = np.minimum((base * 10).astype(int), 9), y.astype(int)
    surprise = np.where(y == 1, -np.log(acc[b]), -np.log1p(-acc[b]))
    t = np.stack([-np.log1p(-acc), -np.log(acc)])
    tilts = [
        th * surprise.sum() - len(y) * math.log(float(np.sum(p0 * np.exp(th * t))))
        for th in SURPRISE_THETAS
    ]
    dirichlet = []
    for kappa in SURPRISE_CONCENTRATIONS:
        seen, log_e = np.zeros_like(p0), 0.0
        for i, (bb, yy) in enumerate(zip(b, yi, strict=True)):
            log_e += math.log((kappa * p0[yy, bb] + seen[yy, bb]) / (kappa + i) / p0[yy, bb])
            seen[yy, bb] += 1
        dirichlet.append(log_e)
    expected = logsumexp(
        [
            logsumexp(tilts) - math.log(len(tilts)),
            logsumexp(dirichlet) - math.log(len(dirichlet)),
        ]
    ) - math.log(2)
    got = surprise_e_detector(ref, [win], SURPRISE_THETAS, groups=10)  # 10 bins: no merging
    assert expected > 0.5
    assert math.isclose(got.statistic, expected, rel_tol=1e-9)
    assert math.isclose(got.pvalue, min(1.0, math.exp(-got.statistic)))
    tilts_only = surprise_e_detector(ref, [win], SURPRISE_THETAS, concentrations=())
    want = max(0.0, float(logsumexp(tilts)) - math.log(len(tilts)))
    assert math.isclose(tilts_only.statistic, want, rel_tol=1e-9, abs_tol=1e-12)


def test_the_dirichlet_family_merges_bins_into_reference_quantiles() -> None:
    """Reference confidences spread evenly over 10 bins: its 5 quantile groups are the bin
    pairs, so the family equals the one computed on 5 bins of width 0.2."""
    rng = np.random.default_rng(2)
    conf, wconf = (np.arange(4000) + 0.5) / 4000, rng.uniform(0.3, 1.0, 300)
    y, wy = (rng.random(4000) < conf).astype(float), (rng.random(300) < wconf - 0.2).astype(float)
    ten = surprise_e_detector(
        BinSums.from_items(conf, y, np.ones(4000)),
        [BinSums.from_items(wconf, wy, np.ones(300))],
        thetas=(),
        groups=5,
    )
    five = surprise_e_detector(
        BinSums.from_items(conf, y, np.ones(4000), n_bins=5),
        [BinSums.from_items(wconf, wy, np.ones(300), n_bins=5)],
        thetas=(),
        groups=5,
    )
    assert ten.statistic > SURPRISE_LOG_THRESHOLD
    assert math.isclose(ten.statistic, five.statistic, rel_tol=1e-9)


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
    check = check_drift_sums(ref, _agent(rng, 150, 0.2), scan=_nested(rng, 400, (150, 400), 0.2))
    assert check.fired and "surprise" in check.fired_tests and check.surprise_log_e is not None
    assert "log e-value" in check.reason


def test_stationary_answers_never_reach_the_threshold_over_many_checks() -> None:
    """A reference of 3,600 answers (24 h at 150 an hour), then 2,000 stationary answers
    checked every 25 answers over the windows of the last 25 to 600: never fires."""
    rng = np.random.default_rng(11)
    ref = _agent(rng, 3600)
    conf = rng.uniform(0.5, 0.99, 2000)
    y = (rng.random(2000) < conf).astype(float)
    worst = 0.0
    for end in range(25, 2001, 25):
        wins = [
            BinSums.from_items(conf[end - k : end], y[end - k : end], np.ones(k))
            for k in (25, 50, 100, 200, 300, 400, 600)
            if k <= end
        ]
        worst = max(worst, surprise_e_detector(ref, wins).statistic)
    assert worst < SURPRISE_LOG_THRESHOLD, worst


def test_a_stated_shift_fires_within_250_answers() -> None:
    """Accuracy 0.2 under the stated confidence from answer 1 on: every seed's detector
    (the window since the change) fires within 250 answers."""
    for seed in range(5):
        rng = np.random.default_rng(seed)
        ref = _agent(rng, 3600)
        conf = rng.uniform(0.5, 0.99, 250)
        y = (rng.random(250) < conf - 0.2).astype(float)
        got = surprise_e_detector(ref, [BinSums.from_items(conf, y, np.ones(250))])
        assert got.statistic >= SURPRISE_LOG_THRESHOLD, (seed, got)


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
