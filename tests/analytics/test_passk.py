"""pass^k / pass@k against direct enumeration of k-subsets of trials, incl. the real tau2 runs."""

from __future__ import annotations

import json
import random
from collections import defaultdict
from fractions import Fraction
from itertools import combinations
from pathlib import Path

import pytest

from monitor.analytics.passk import (
    is_success,
    pass_at_k,
    pass_at_k_task,
    pass_hat_k,
    pass_hat_k_task,
    pass_k,
    task_counts,
)


def _by_task(trials: list[tuple[str, bool]]) -> dict[str, list[bool]]:
    out: dict[str, list[bool]] = defaultdict(list)
    for task, ok in trials:
        out[task].append(ok)
    return out


def _enumerated(trials: list[tuple[str, bool]], k: int) -> tuple[float, float]:
    """Independent: average over every k-subset of each task's trials of all-pass / any-pass."""
    hat, at = [], []
    for runs in _by_task(trials).values():
        subsets = list(combinations(runs, k))
        if not subsets:
            continue
        hat.append(Fraction(sum(all(s) for s in subsets), len(subsets)))
        at.append(Fraction(sum(any(s) for s in subsets), len(subsets)))
    return float(sum(hat) / len(hat)), float(sum(at) / len(at))


def test_known_small_cases() -> None:
    assert pass_hat_k_task(4, 2, 2) == pytest.approx(1 / 6)
    assert pass_at_k_task(4, 2, 2) == pytest.approx(5 / 6)
    assert pass_hat_k_task(5, 3, 1) == pytest.approx(3 / 5)  # k = 1 is the success rate
    assert pass_hat_k_task(3, 1, 2) == 0.0  # fewer successes than k
    assert pass_hat_k_task(3, 3, 3) == 1.0
    assert pass_at_k_task(3, 0, 2) == 0.0
    assert pass_at_k_task(4, 3, 2) == 1.0  # any 2 of 4 contain a success when only 1 fails


def test_invalid_inputs_raise() -> None:
    with pytest.raises(ValueError):
        pass_hat_k_task(4, 5, 2)
    with pytest.raises(ValueError):
        pass_hat_k_task(1, 1, 2)  # n < k
    with pytest.raises(ValueError):
        pass_at_k_task(4, 2, 0)
    with pytest.raises(ValueError):
        pass_k([("a", True)], 0)
    with pytest.raises(ValueError):
        is_success(float("nan"))
    with pytest.raises(ValueError):
        is_success(None)  # type: ignore[arg-type]


def test_rewards_and_bools() -> None:
    assert [is_success(x) for x in (True, False, 1.0, 0.99, 0, 1, 1.5)] == [
        True,
        False,
        True,
        False,
        False,
        True,
        True,
    ]
    trials = [("t1", 1.0), ("t1", 0.5), ("t2", True), ("t2", 1)]
    assert task_counts(trials) == {"t1": (2, 1), "t2": (2, 2)}
    assert pass_hat_k(trials, 2) == pytest.approx((0 + 1) / 2)
    assert pass_at_k(trials, 2) == pytest.approx(1.0)


def test_tasks_with_fewer_trials_than_k_are_skipped() -> None:
    res = pass_k([("a", True), ("a", True), ("b", True)], 2)
    assert (res.n_tasks, res.n_tasks_skipped, res.pass_hat_k) == (1, 1, 1.0)
    assert res.per_task == {"a": 1.0}
    empty = pass_k([("b", True)], 2)
    assert empty.pass_hat_k is None and empty.pass_at_k is None and empty.n_tasks == 0
    assert json.loads(json.dumps(res.to_dict()))["per_task"] == {"a": 1.0}


def test_random_suites_equal_enumeration() -> None:
    rng = random.Random(7)
    for _ in range(50):
        trials = [
            (f"t{t}", rng.random() < rng.random())
            for t in range(rng.randint(1, 6))
            for _ in range(rng.randint(1, 7))
        ]
        rng.shuffle(trials)
        for k in (1, 2, 3):
            if not any(len(v) >= k for v in _by_task(trials).values()):
                assert pass_hat_k(trials, k) is None
                continue
            hat, at = _enumerated(trials, k)
            res = pass_k(trials, k)
            assert res.pass_hat_k == pytest.approx(hat, abs=1e-12)
            assert res.pass_at_k == pytest.approx(at, abs=1e-12)


def _tau2_trials(path: Path) -> list[tuple[str, float]]:
    raw = json.loads(path.read_text())
    return [(s["task_id"], s["reward_info"]["reward"]) for s in raw["simulations"]]


# Read off the two files (per task, trial rewards): pinned so a silent change shows up.
TAU2_PINNED = {
    "airline_gemini2_5_flash_10tasks_2t.json": {1: (0.6, 0.6), 2: (0.6, 0.6)},
    "airline_gemini2_5_flash_10tasks_2t_retry_agent.json": {1: (0.6, 0.6), 2: (0.5, 0.7)},
}


def test_tau2_runs_equal_direct_computation(tau2_files: list[Path]) -> None:
    assert sorted(p.name for p in tau2_files) == sorted(TAU2_PINNED)
    for path in tau2_files:
        trials = _tau2_trials(path)
        as_bool = [(t, r >= 1.0) for t, r in trials]
        for k in (1, 2):
            res = pass_k(trials, k)
            hat, at = _enumerated(as_bool, k)
            assert res.pass_hat_k == pytest.approx(hat, abs=1e-12), (path.name, k)
            assert res.pass_at_k == pytest.approx(at, abs=1e-12), (path.name, k)
            assert (res.n_tasks, res.n_tasks_skipped) == (10, 0)
            assert (res.pass_hat_k, res.pass_at_k) == pytest.approx(TAU2_PINNED[path.name][k])
        # k = 3 needs three trials; every task has two
        assert pass_k(trials, 3).n_tasks_skipped == 10
