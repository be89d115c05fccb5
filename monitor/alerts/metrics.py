"""Alert metrics: what a rule can watch and the range of its values (pure).

Metric values, as the evaluator must compute them (units in brackets):

- ``ece``, ``mce``, ``brier`` [0, 1], ``accuracy`` [0, 1], ``overconfidence_gap`` [-1, 1]
  (mean confidence minus accuracy): docs/design.md "Metric definitions", over the rule's
  ``window``.
- ``drift``: 1.0 when the drift check fired (only the named ``test`` when one is given), else 0.0.
- ``escalation_inversion``: 1.0 when a significant inversion was detected, else 0.0.
- ``time_to_escalation_p90_s`` [seconds]; ``judge_failure_rate`` [0, 1]: share of judged items
  with a failure of ``category``; ``dlq_rate`` [0, 1]: share of input events dead-lettered;
  ``consumer_lag`` [records behind, max over the window], ``ingest_stall_s`` [seconds the
  evaluating worker's ingest loop has written nothing while it had work: lag or paused].
- ``gate_escalation_rate`` [0, 1]: share of the gate's decisions (``gate`` events in the
  window) that were ``escalate`` (the human cost); ``gate_proceeded_failure_rate`` [0, 1]:
  failures among conversations whose latest decision in the window was ``proceed`` and that
  have an outcome; ``gate_degraded_rate`` [0, 1]: share of decisions the fail-open/closed
  choice made (a check failed or ran past the deadline); ``gate_fail_open_rate`` [0, 1]: share
  of the enforced decisions (``enforced`` not false) that let the message through unchecked:
  ``degraded`` starts with ``fail open`` (a check raised, the deadline passed, the gate erred)
  or the LLM check failed with ``on_llm_timeout proceed``. Per agent x domain x tier.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from enum import StrEnum


class Metric(StrEnum):
    """What a rule watches; see the module docstring for each value's definition and unit."""

    ECE = "ece"
    MCE = "mce"
    BRIER = "brier"
    ACCURACY = "accuracy"
    OVERCONFIDENCE_GAP = "overconfidence_gap"
    DRIFT = "drift"
    ESCALATION_INVERSION = "escalation_inversion"
    TIME_TO_ESCALATION_P90_S = "time_to_escalation_p90_s"
    JUDGE_FAILURE_RATE = "judge_failure_rate"
    DLQ_RATE = "dlq_rate"
    CONSUMER_LAG = "consumer_lag"
    INGEST_STALL_S = "ingest_stall_s"
    GATE_ESCALATION_RATE = "gate_escalation_rate"
    GATE_PROCEEDED_FAILURE_RATE = "gate_proceeded_failure_rate"
    GATE_DEGRADED_RATE = "gate_degraded_rate"
    GATE_FAIL_OPEN_RATE = "gate_fail_open_rate"


GATE_METRICS = frozenset(
    {
        Metric.GATE_ESCALATION_RATE,
        Metric.GATE_PROCEEDED_FAILURE_RATE,
        Metric.GATE_DEGRADED_RATE,
        Metric.GATE_FAIL_OPEN_RATE,
    }
)


CALIBRATION_METRICS = frozenset(
    {Metric.ECE, Metric.MCE, Metric.BRIER, Metric.ACCURACY, Metric.OVERCONFIDENCE_GAP}
)
DEFAULT_MIN_SAMPLES: Mapping[str, float] = {
    **{m.value: 100.0 for m in CALIBRATION_METRICS},
    Metric.ESCALATION_INVERSION.value: 100.0,
    Metric.TIME_TO_ESCALATION_P90_S.value: 20.0,
    Metric.JUDGE_FAILURE_RATE.value: 1.0,
    Metric.GATE_ESCALATION_RATE.value: 50.0,
    Metric.GATE_PROCEEDED_FAILURE_RATE.value: 30.0,
    Metric.GATE_DEGRADED_RATE.value: 20.0,
    Metric.GATE_FAIL_OPEN_RATE.value: 50.0,
}
"""``min_samples`` when a rule omits it; metrics not listed default to 0 (no minimum)."""

_UNBOUNDED = frozenset(
    {Metric.TIME_TO_ESCALATION_P90_S, Metric.CONSUMER_LAG, Metric.INGEST_STALL_S}
)
VALUE_RANGE: Mapping[Metric, tuple[float, float]] = {
    m: (-1.0, 1.0)
    if m is Metric.OVERCONFIDENCE_GAP
    else (0.0, math.inf)
    if m in _UNBOUNDED
    else (0.0, 1.0)
    for m in Metric
}
"""The range a metric's value can take; a threshold outside it could never (or always) fire."""

_BOUNDED = frozenset({Metric.ECE, Metric.BRIER, Metric.OVERCONFIDENCE_GAP})
