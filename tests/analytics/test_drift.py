"""Drift statistics against independent implementations (direct loops, scipy) and synthetic
agents: same distribution -> no fire; overconfident by 0.2 or shifted confidence -> fires."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from scipy import stats

from monitor.analytics.bins import BinSums
from monitor.analytics.drift import (
    PSI_EPSILON,
    DriftCheck,
    check_drift_many,
    check_drift_raw,
    check_drift_sums,
    ece_change_bootstrap,
    ece_change_permutation,
    ece_of,
    ks_binned,
    ks_binned_many,
    ks_raw,
    psi,
    psi_level,
    two_proportion_z,
)
from monitor.analytics.drift import (
    LabelledItems as LI,
)


def _agent(
    seed: int, n: int, overconfidence: float = 0.0, conf_shift: float = 0.0
) -> tuple[np.ndarray, np.ndarray]:
    """Items of a synthetic agent.  Its true accuracy per item is ``base - overconfidence`` with
    ``base`` ~ U(0.5, 0.95); it states ``base + conf_shift`` (so a shift moves the confidence
    distribution without changing accuracy, and overconfidence the reverse)."""
    rng = np.random.default_rng(seed)
    base = rng.uniform(0.5, 0.95, n)
    y = (rng.random(n) < base - overconfidence).astype(float)
    return np.clip(base + conf_shift, 0.0, 1.0), y


# --- PSI ---------------------------------------------------------------------------------------


def _psi_loop(b: list[float], r: list[float], eps: float) -> float:
    k, sb, sr = len(b), sum(b), sum(r)
    total = 0.0
    for wb, wr in zip(b, r, strict=True):
        pb = (wb / sb + eps) / (1 + k * eps)
        pr = (wr / sr + eps) / (1 + k * eps)
        total += (pr - pb) * math.log(pr / pb)
    return total


def test_psi_equals_direct_loop_and_reading() -> None:
    rng = np.random.default_rng(0)
    for _ in range(20):
        b, r = rng.uniform(0, 5, 10), rng.uniform(0, 5, 10)
        b[rng.integers(10)] = 0.0  # an empty bin stays finite through the smoothing
        assert psi(b, r) == pytest.approx(_psi_loop(list(b), list(r), PSI_EPSILON), rel=1e-12)
    assert psi([1, 2, 3], [2, 4, 6]) == pytest.approx(0.0, abs=1e-15)
    assert math.isfinite(psi([10, 0], [0, 10])) and psi([10, 0], [0, 10]) > 0.25
    assert [psi_level(x) for x in (0.05, 0.1, 0.25, 0.26)] == [
        "stable",
        "moderate",
        "moderate",
        "major",
    ]
    with pytest.raises(ValueError):
        psi([1, 2], [1, 2, 3])
    with pytest.raises(ValueError):
        psi([0, 0], [1, 1])


# --- KS ----------------------------------------------------------------------------------------


def test_ks_raw_equals_scipy_and_hand_statistic() -> None:
    a, _ = _agent(1, 300)
    b, _ = _agent(2, 250, conf_shift=0.05)
    res, ref = ks_raw(a, b), stats.ks_2samp(a, b)
    assert (res.statistic, res.pvalue) == (ref.statistic, ref.pvalue)
    grid = np.concatenate([a, b])
    ecdf = lambda x, s: np.searchsorted(np.sort(x), s, side="right") / len(x)  # noqa: E731
    assert res.statistic == pytest.approx(np.max(np.abs(ecdf(a, grid) - ecdf(b, grid))))


def test_ks_binned_close_to_raw_on_fine_bins_and_conservative_on_coarse() -> None:
    a, ya = _agent(3, 3000)
    b, yb = _agent(4, 3000, conf_shift=0.04)
    ref = stats.ks_2samp(a, b, method="asymp")
    fine_a, fine_b = BinSums.from_items(a, ya, n_bins=2000), BinSums.from_items(b, yb, n_bins=2000)
    fine = ks_binned(fine_a.weight, fine_b.weight, 3000, 3000)
    assert fine.statistic == pytest.approx(ref.statistic, abs=2e-3)
    assert fine.pvalue == pytest.approx(ref.pvalue, rel=0.2, abs=1e-6)
    coarse = ks_binned(
        BinSums.from_items(a, ya).weight, BinSums.from_items(b, yb).weight, 3000, 3000
    )
    assert coarse.statistic <= ref.statistic + 1e-12 and coarse.pvalue >= ref.pvalue


# --- accuracy drop ------------------------------------------------------------------------------


def test_two_proportion_z_hand_computation_and_fisher_direction() -> None:
    res = two_proportion_z(90, 100, 75, 100)
    p = 165 / 200
    z = (0.75 - 0.90) / math.sqrt(p * (1 - p) * (2 / 100))
    assert res.statistic == pytest.approx(z)
    assert res.pvalue == pytest.approx(stats.norm.cdf(z))
    # Fisher's exact test, same one-sided direction (recent odds of success lower), agrees
    fisher = stats.fisher_exact([[75, 25], [90, 10]], alternative="less")
    assert res.pvalue < 0.01 and fisher.pvalue < 0.01
    up = two_proportion_z(75, 100, 90, 100)  # accuracy rose: no drop
    assert up.pvalue is not None and up.pvalue > 0.99
    assert stats.fisher_exact([[90, 10], [75, 25]], alternative="less").pvalue > 0.99
    assert two_proportion_z(50, 50, 80, 80).pvalue == 1.0  # no variance: no evidence
    with pytest.raises(ValueError):
        two_proportion_z(5, 4, 1, 2)


# --- ECE and its change ---------------------------------------------------------------------------


def test_ece_of_sums_equals_direct_item_loop() -> None:
    conf, y = _agent(5, 500, overconfidence=0.1)
    w = np.random.default_rng(5).uniform(1, 5, 500)
    direct = 0.0
    for b in range(10):
        sel = np.minimum((conf * 10).astype(int), 9) == b
        if sel.any():
            wb = w[sel]
            direct += (
                wb.sum()
                / w.sum()
                * abs(np.average(y[sel], weights=wb) - np.average(conf[sel], weights=wb))
            )
    assert ece_of(BinSums.from_items(conf, y, w)) == pytest.approx(direct)


def test_ece_change_tests_separate_null_from_overconfidence() -> None:
    cb, yb = _agent(10, 1500)
    cs, ys = _agent(13, 1500)
    co, yo = _agent(12, 1500, overconfidence=0.2)
    same = ece_change_permutation(LI(cb, yb), LI(cs, ys), n_resamples=500, seed=1)
    worse = ece_change_permutation(LI(cb, yb), LI(co, yo), n_resamples=500, seed=1)
    assert same.pvalue is not None and same.pvalue > 0.01
    assert worse.pvalue == pytest.approx(1 / 501) and worse.statistic > 0.15
    sb, ss, so = (BinSums.from_items(c, y) for c, y in ((cb, yb), (cs, ys), (co, yo)))
    boot_same = ece_change_bootstrap(sb, ss, n_resamples=500, seed=1)
    boot_worse = ece_change_bootstrap(sb, so, n_resamples=500, seed=1)
    assert boot_same.pvalue is not None and boot_same.pvalue > 0.01
    assert boot_worse.pvalue == pytest.approx(1 / 501)
    assert boot_worse.statistic == pytest.approx(worse.statistic)
    again = ece_change_permutation(LI(cb, yb), LI(cs, ys), n_resamples=500, seed=1)
    assert again == same  # seeded


def test_ece_change_tests_hold_their_level_under_the_null() -> None:
    """Pairs of calibrated samples: the share of p < 0.05 stays near (not above) 5 %."""
    perm, boot = [], []
    for s in range(120):
        (cb, yb), (cr, yr) = _agent(1000 + 2 * s, 600), _agent(1001 + 2 * s, 600)
        perm.append(ece_change_permutation(LI(cb, yb), LI(cr, yr), n_resamples=199, seed=s).pvalue)
        boot.append(
            ece_change_bootstrap(
                BinSums.from_items(cb, yb), BinSums.from_items(cr, yr), n_resamples=199, seed=s
            ).pvalue
        )
    for pvalues in (perm, boot):
        rate = float(np.mean(np.array(pvalues) < 0.05))
        assert rate <= 0.1, rate


# --- whole checks ---------------------------------------------------------------------------------


def _both(
    base: tuple[np.ndarray, np.ndarray],
    recent: tuple[np.ndarray, np.ndarray],
) -> tuple[DriftCheck, DriftCheck]:
    raw = check_drift_raw(LI(*base), LI(*recent), n_resamples=1000, seed=7)
    sums = check_drift_sums(
        BinSums.from_items(*base), BinSums.from_items(*recent), n_resamples=1000, seed=7
    )
    return raw, sums


def test_no_drift_between_samples_of_the_same_agent() -> None:
    for check in _both(_agent(24, 2000), _agent(25, 2000)):
        assert not check.fired, check.reason
        assert check.psi_level == "stable"


def test_false_alarm_rate_of_the_whole_check_under_the_null() -> None:
    """Four tests at alpha 0.01 each: a check on two samples of the same agent fires rarely.
    (Any single seed pair fires with probability ~3 %: seeds 20/21 do, on accuracy_drop with
    p = 0.0099, which is why the test above does not rest on one pair alone.)"""
    fired = [
        check_drift_raw(
            LI(*_agent(5000 + 2 * s, 1000)),
            LI(*_agent(5001 + 2 * s, 1000)),
            n_resamples=100,
            seed=s,
        ).fired
        for s in range(80)
    ]
    assert sum(fired) <= 8, sum(fired)


def test_overconfidence_by_0_2_fires_accuracy_and_ece_not_psi() -> None:
    for check in _both(_agent(20, 2000), _agent(22, 2000, overconfidence=0.2)):
        d = check.to_dict()
        assert d["fired"] and {"accuracy_drop", "ece_increase"} <= set(d["fired_tests"])
        assert "psi" not in d["fired_tests"]
        assert d["accuracy_recent"] < d["accuracy_baseline"] - 0.15
        json.dumps(d, allow_nan=False)


def test_confidence_shift_fires_distribution_tests() -> None:
    raw, sums = _both(_agent(20, 2000), _agent(23, 2000, conf_shift=0.2))
    assert {"psi", "ks"} <= set(raw.fired_tests)
    assert {"psi", "ks"} <= set(sums.fired_tests)
    assert "accuracy_drop" not in raw.fired_tests


def test_raw_and_sums_agree_and_report_sample_sizes() -> None:
    cb, yb = _agent(30, 800)
    cr, yr = _agent(31, 600, overconfidence=0.1)
    rng = np.random.default_rng(30)
    wb, wr = rng.uniform(1, 3, 800), rng.uniform(1, 3, 600)
    raw = check_drift_raw(LI(cb, yb, wb), LI(cr, yr, wr), n_resamples=200)
    sums = check_drift_sums(
        BinSums.from_items(cb, yb, wb), BinSums.from_items(cr, yr, wr), n_resamples=200
    )
    for name in (
        "psi",
        "accuracy_baseline",
        "accuracy_recent",
        "accuracy_z",
        "accuracy_pvalue",
        "ece_baseline",
        "ece_recent",
        "ece_delta",
        "weight_baseline",
        "n_eff_recent",
    ):
        assert getattr(raw, name) == pytest.approx(getattr(sums, name)), name
    assert (raw.n_baseline, raw.n_recent) == (sums.n_baseline, sums.n_recent) == (800, 600)
    assert raw.n_eff_baseline == pytest.approx(wb.sum() ** 2 / (wb**2).sum())
    assert raw.n_eff_baseline < 800
    assert raw.weight_baseline == pytest.approx(wb.sum())


def test_below_min_samples_never_fires_but_reports() -> None:
    raw = check_drift_raw(
        LI(*_agent(40, 60)), LI(*_agent(41, 60, overconfidence=0.3)), n_resamples=200
    )
    assert not raw.fired and raw.fired_tests == () and "too few samples" in raw.reason
    assert raw.accuracy_pvalue is not None and raw.ece_delta is not None
    empty = check_drift_sums(BinSums.empty(), BinSums.from_items(*_agent(42, 200)))
    assert not empty.fired and empty.psi is None and empty.ks_pvalue is None
    with pytest.raises(ValueError):
        check_drift_sums(BinSums.empty(10), BinSums.empty(5))


def test_all_correct_window_summed_in_another_order() -> None:
    """Rows summed by the database in another order can give Σw·y = Σw + 1 ulp; the accuracy
    test must still run (p = 1, no fire) instead of raising."""
    w = 100.0
    over = np.nextafter(w, 200.0)
    base = BinSums.from_rows([(9, w, 95.0, over, 0.3, w, 100)])
    rec = BinSums.from_rows([(9, w, 95.0, w, 0.3, w, 100)])
    check = check_drift_sums(base, rec, n_resamples=50)
    assert check.accuracy_baseline == 1.0 and check.accuracy_pvalue == 1.0
    assert not check.fired


def test_pure_modules_import_no_io_library() -> None:
    import subprocess
    import sys

    code = (
        "import sys, monitor.analytics.drift, monitor.analytics.escalation, "
        "monitor.analytics.passk; bad = {'sqlalchemy', 'httpx', 'faust', 'aiokafka', "
        "'asyncpg'} & {m.split('.')[0] for m in sys.modules}; print(sorted(bad))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


# --- a round over many segments ---------------------------------------------------------------


def _segments(n: int, seed: int) -> list[tuple[BinSums, BinSums, list[BinSums]]]:
    """``n`` segments' (baseline, recent) of a few to a few hundred weighted items; some share
    their sizes and statistics (small windows do), one recent window is empty."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        nb, nr = (int(x) for x in rng.integers(3, 300, 2))
        b, yb = _agent(seed * 1000 + i, nb)
        r, yr = _agent(seed * 1000 + i + 500, nr, overconfidence=0.2 * (i % 3 == 0))
        wb, wr = rng.choice([1.0, 4.0], nb), rng.choice([1.0, 4.0], nr)
        recent = BinSums.empty() if i == 7 else BinSums.from_items(r, yr, wr)
        out.append((BinSums.from_items(b, yb, wb), recent, []))
    small = BinSums.from_items([0.55, 0.65, 0.85], [1.0, 0.0, 1.0])
    out += [(small, small, []), (small, small, [])]  # identical windows: one KS computed
    return out


def test_check_drift_many_is_check_drift_sums_of_each_segment() -> None:
    segments = _segments(60, 3)
    many = check_drift_many(segments, alpha=0.01, min_samples=50, min_reference=100)
    each = [
        check_drift_sums(b, r, alpha=0.01, min_samples=50, scan=s, min_reference=100)
        for b, r, s in segments
    ]
    assert many == each
    assert any(c.fired for c in many) and not all(c.fired for c in many)
    assert many[7].ks_pvalue is None  # an empty window has no KS
    assert check_drift_many([]) == []


def test_ks_binned_many_is_scipys_kstwo_on_each_pair() -> None:
    segments = _segments(40, 4)
    pairs = [
        (b.weight, r.weight, b.total_n_eff(), r.total_n_eff())
        for b, r, _ in segments
        if r.total_weight > 0
    ]
    for (bw, rw, nb, nr), got in zip(pairs, ks_binned_many(pairs), strict=True):
        d = float(np.max(np.abs(np.cumsum(rw) / rw.sum() - np.cumsum(bw) / bw.sum())))
        en = max(1.0, round(nb * nr / (nb + nr)))
        assert got.statistic == d
        assert got.pvalue == min(max(float(stats.kstwo.sf(d, en)), 0.0), 1.0)
    assert ks_binned_many([]) == []
    with pytest.raises(ValueError):
        ks_binned_many([(np.ones(10), np.zeros(10), 5.0, 5.0)])


def test_bin_sums_grouped_equals_from_rows_per_group() -> None:
    rows = []
    expected = {}
    for g, (agent, domain) in enumerate([("a", "x"), ("a", "y"), ("b", "x")]):
        conf, y = _agent(20 + g, 40)
        sums = BinSums.from_items(conf, y, np.linspace(1, 3, 40))
        expected[(agent, domain)] = sums
        rows += [(agent, domain, *tuple(r.values())) for r in sums.to_rows()]
    got = BinSums.grouped(rows[::-1], 2)  # any row order
    assert set(got) == set(expected)
    for key, sums in expected.items():
        for field in ("weight", "sum_conf", "sum_y", "sum_sq_err", "sum_w2", "count"):
            assert np.array_equal(getattr(got[key], field), getattr(sums, field)), field
        assert not got[key].weight.flags.writeable
    assert BinSums.grouped([], 2) == {}
    with pytest.raises(ValueError, match="twice"):
        BinSums.grouped(rows[:1] * 2, 2)
    with pytest.raises(ValueError, match="bin outside"):
        BinSums.grouped([("a", "x", 10, 1, 1, 1, 0, 1, 1)], 2)
    # no key fields: every row is of the one group () (bin_sums with group_by=())
    conf, y = _agent(7, 40)
    whole = BinSums.from_items(conf, y, np.linspace(1, 3, 40))
    (only,) = BinSums.grouped([tuple(r.values()) for r in whole.to_rows()], 0).items()
    assert only[0] == ()
    for field in ("weight", "sum_conf", "sum_y", "sum_sq_err", "sum_w2", "count"):
        assert np.array_equal(getattr(only[1], field), getattr(whole, field)), field
