"""The drift guards (monitor.analytics.drift_policy), the alert lower bounds
(monitor.analytics.alert_bounds) and ``estimate: lower_bound`` rules: plain values, no I/O."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import numpy as np
import pytest
from pydantic import ValidationError

from monitor.alerts.rules import Rule
from monitor.analytics import calibration as cal
from monitor.analytics.alert_bounds import lower_bound
from monitor.analytics.bins import BinSums
from monitor.analytics.drift import LabelledItems, check_drift_raw, check_drift_sums
from monitor.analytics.drift_policy import advance, holm, reference_window

T = datetime(2026, 1, 1, tzinfo=UTC)
H = timedelta(hours=1)
DAY = timedelta(hours=24)


def test_holm_step_down_by_hand():
    p = {"a": 0.01, "b": 0.04, "c": 0.03, "d": 0.005, "e": None}
    # m = 4 (None is not a test): .005 <= .05/4, .01 <= .05/3, .03 > .05/2 stops
    assert holm(p, 0.05) == ("a", "d")
    # uncorrected, all four would be below 0.05
    assert sum(1 for v in p.values() if v is not None and v < 0.05) == 4
    assert holm({"x": 0.049}, 0.05) == ("x",)
    assert holm({"x": 0.03, "y": 0.03}, 0.05) == ()
    with pytest.raises(ValueError):
        holm({"x": 0.1}, 0.0)


def test_reference_rolls_while_clean_and_freezes_while_flagged():
    # first check: the period of reference length before the recent window
    ref = reference_window(None, T, DAY)
    assert ref == (T - DAY, T)
    s = advance(None, ref, (T, T + H), fired=False)
    # clean: rolls with the recent window
    ref2 = reference_window(s, T + H, DAY)
    assert ref2 == (T + H - DAY, T + H)
    s = advance(s, ref2, (T + H, T + 2 * H), fired=True)
    assert s.flagged and s.clean_since is None and s.flagged_since == T + 2 * H
    # flagged: the reference stays where it was, hour after hour
    for k in range(2, 6):
        assert reference_window(s, T + k * H, DAY) == ref2
        s = advance(s, ref2, (T + k * H, T + (k + 1) * H), fired=True)
    assert s.flagged_since == T + 2 * H
    # quiet again: a clean stretch starts at the end of that window, and the old reference is
    # kept until the stretch is as long as it
    s = advance(s, ref2, (T + 6 * H, T + 7 * H), fired=False)
    assert not s.flagged and s.clean_since == T + 7 * H
    assert reference_window(s, T + 20 * H, DAY) == ref2
    assert reference_window(s, T + 31 * H, DAY) == (T + 7 * H, T + 31 * H)


def _items(rng: np.random.Generator, n: int, gap: float) -> tuple[np.ndarray, np.ndarray]:
    c = rng.uniform(0.5, 0.99, n)
    return c, (rng.random(n) < c - gap).astype(float)


def test_no_psi_from_a_tiny_baseline():
    rng = np.random.default_rng(3)
    cb, yb = np.array([0.95, 0.97]), np.array([1.0, 1.0])
    cr, yr = _items(rng, 400, 0.0)
    check = check_drift_raw(
        LabelledItems(cb, yb), LabelledItems(cr, yr), min_samples=1, n_resamples=200
    )
    assert check.psi is not None and check.psi > 1.0  # huge, and meaningless
    assert "psi" not in check.fired_tests and "ece_increase" not in check.fired_tests
    assert "too few samples for psi" in check.reason
    # the same data without the per-test guard lets PSI through
    raw = check_drift_sums(
        BinSums.from_items(cb, yb),
        BinSums.from_items(cr, yr),
        min_samples=1,
        holm=False,
        test_min_samples=None,
        alpha=0.2,
        n_resamples=200,
    )
    assert "too few" not in raw.reason


def test_lower_bounds_separate_noise_from_miscalibration():
    rng = np.random.default_rng(5)
    calibrated = BinSums.from_items(*_items(rng, 200, 0.0))
    assert cal.ece(calibrated) > 0.05  # the small-sample bias the point estimate carries
    ece_lo = lower_bound("ece", calibrated)
    assert ece_lo is not None and ece_lo < 0.0
    over = BinSums.from_items(*_items(rng, 200, 0.25))
    lo = lower_bound("ece", over)
    assert lo is not None and 0.12 < lo < cal.ece(over)
    # overconfidence: mean confidence minus the upper one-sided 99 % Wilson bound of accuracy
    _, hi = cal.wilson_interval(cal.accuracy(over), over.total_n_eff(), 0.98)
    assert lower_bound("overconfidence_gap", over) == pytest.approx(cal.mean_confidence(over) - hi)
    b = lower_bound("brier", over)
    assert b is not None and b < cal.brier(over)
    with pytest.raises(ValueError):
        lower_bound("mce", over)


def test_lower_bound_only_for_bounded_metrics():
    base = {
        "name": "r",
        "comparison": ">",
        "threshold": 1,
        "window": "1h",
        "severity": "warning",
        "annotations": {"summary": "s"},
        "estimate": "lower_bound",
    }
    with pytest.raises(ValidationError, match="lower_bound"):
        Rule.model_validate({**base, "metric": "drift"})
    with pytest.raises(ValidationError, match="lower_bound"):
        Rule.model_validate({**base, "metric": "ece", "comparison": "<", "threshold": 0.1})
    assert Rule.model_validate({**base, "metric": "ece", "threshold": 0.1}).estimate == (
        "lower_bound"
    )
