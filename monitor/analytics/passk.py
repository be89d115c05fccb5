"""pass^k and pass@k for tasks run in several trials (pure math, no I/O; docs/design.md).

For a task run n times with c successes:

- pass^k (all k of k trials succeed; the reliability metric of tau-bench) has the unbiased
  estimator C(c, k) / C(n, k): the share of the C(n, k) k-subsets of the trials that are all
  successes.
- pass@k (at least one of k succeeds; for contrast) = 1 - C(n - c, k) / C(n, k).

The suite value is the plain mean over tasks with n >= k; tasks with fewer trials are skipped
and counted in :attr:`PassK.n_tasks_skipped`.  Binomials are exact integers (``math.comb``), so
the only rounding is the final division.

Input: an iterable of ``(task_id, outcome)`` pairs, one per trial, where ``outcome`` is a bool
(success) or a reward (number; success means reward >= 1, tau2's convention).  ``task_id`` is
any hashable value, reported as ``str``.  ValueError for k < 1, c > n, a reward that is NaN or
None.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

SUCCESS_REWARD = 1.0

#: One trial: (task_id, success flag or reward).
Trial = tuple[Hashable, bool | float | int]


def _check(n: int, c: int, k: int) -> None:
    if k < 1 or n < 0 or not 0 <= c <= n:
        raise ValueError(f"need k >= 1 and 0 <= c <= n, got n={n}, c={c}, k={k}")


def pass_hat_k_task(n: int, c: int, k: int) -> float:
    """C(c, k) / C(n, k) for one task (ValueError if n < k: the estimator is undefined)."""
    _check(n, c, k)
    if n < k:
        raise ValueError(f"pass^{k} needs at least {k} trials, the task has {n}")
    return math.comb(c, k) / math.comb(n, k)


def pass_at_k_task(n: int, c: int, k: int) -> float:
    """1 - C(n - c, k) / C(n, k) for one task (ValueError if n < k)."""
    _check(n, c, k)
    if n < k:
        raise ValueError(f"pass@{k} needs at least {k} trials, the task has {n}")
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def is_success(outcome: bool | float | int) -> bool:
    """A bool is itself; a number is a success when >= 1.  NaN or None raise ValueError."""
    if isinstance(outcome, bool):
        return outcome
    if outcome is None or not isinstance(outcome, int | float) or math.isnan(outcome):
        raise ValueError(f"outcome must be a bool or a reward number, got {outcome!r}")
    return float(outcome) >= SUCCESS_REWARD


def task_counts(trials: Iterable[Trial]) -> dict[str, tuple[int, int]]:
    """``{task_id: (n trials, c successes)}`` in first-seen order."""
    out: dict[str, tuple[int, int]] = {}
    for task_id, outcome in trials:
        n, c = out.get(str(task_id), (0, 0))
        out[str(task_id)] = (n + 1, c + is_success(outcome))
    return out


@dataclass(frozen=True)
class PassK:
    """Suite result for one k: ``pass_hat_k`` (pass^k) and ``pass_at_k`` averaged over the
    ``n_tasks`` tasks with n >= k (None when there are none), ``per_task`` pass^k values."""

    k: int
    pass_hat_k: float | None
    pass_at_k: float | None
    n_tasks: int
    n_tasks_skipped: int
    per_task: dict[str, float] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def pass_k(trials: Iterable[Trial], k: int) -> PassK:
    """pass^k and pass@k of a suite from its trials (see the module docstring)."""
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    counts = task_counts(trials)
    used = {t: nc for t, nc in counts.items() if nc[0] >= k}
    per_task = {t: pass_hat_k_task(n, c, k) for t, (n, c) in used.items()}
    at_k = [pass_at_k_task(n, c, k) for n, c in used.values()]
    return PassK(
        k=k,
        pass_hat_k=math.fsum(per_task.values()) / len(used) if used else None,
        pass_at_k=math.fsum(at_k) / len(used) if used else None,
        n_tasks=len(used),
        n_tasks_skipped=len(counts) - len(used),
        per_task=per_task,
    )


def pass_hat_k(trials: Iterable[Trial], k: int) -> float | None:
    """Suite pass^k (None when no task has k trials)."""
    return pass_k(trials, k).pass_hat_k


def pass_at_k(trials: Iterable[Trial], k: int) -> float | None:
    """Suite pass@k (None when no task has k trials)."""
    return pass_k(trials, k).pass_at_k
