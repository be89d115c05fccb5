"""Pydantic models of the alert rules file; import them from :mod:`monitor.alerts.rules`.

Pure: no I/O. Validation errors that concern one field of a rule are raised as
:class:`FieldProblem` so that the loader can point at that field's line in the YAML file.

The metrics and their value ranges: :mod:`monitor.alerts.metrics`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from datetime import timedelta
from enum import StrEnum
from fnmatch import fnmatchcase
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, model_validator

from monitor.alerts.durations import Duration
from monitor.alerts.durations import format_duration as _span
from monitor.alerts.metrics import _BOUNDED as _BOUNDED
from monitor.alerts.metrics import _UNBOUNDED as _UNBOUNDED
from monitor.alerts.metrics import CALIBRATION_METRICS as CALIBRATION_METRICS
from monitor.alerts.metrics import DEFAULT_MIN_SAMPLES as DEFAULT_MIN_SAMPLES
from monitor.alerts.metrics import GATE_METRICS as GATE_METRICS
from monitor.alerts.metrics import VALUE_RANGE as VALUE_RANGE
from monitor.alerts.metrics import Metric as Metric
from monitor.core.errors import FieldProblem

DriftTest = Literal["psi", "ks", "accuracy_drop", "ece_increase", "surprise"]


class Comparison(StrEnum):
    """How a value is compared with the threshold; the rule is breached when it holds."""

    GT = ">"
    GE = ">="
    LT = "<"
    LE = "<="

    def holds(self, value: float, threshold: float) -> bool:
        """``value <op> threshold``; NaN never holds."""
        if self is Comparison.GT:
            return value > threshold
        if self is Comparison.GE:
            return value >= threshold
        if self is Comparison.LT:
            return value < threshold
        return value <= threshold


class Severity(StrEnum):
    """Routing severity (critical pages, warning posts, info is for dashboards and digests)."""

    CRITICAL = "critical"
    WARNING = "warning"
    INFO = "info"


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def _tier_to_str(value: object) -> object:
    if isinstance(value, int) and not isinstance(value, bool):
        if value not in (1, 2, 3):
            raise ValueError("tier must be 1, 2 or 3 (or a glob such as '[23]')")
        return str(value)
    return value


Glob = Annotated[str, Field(min_length=1, strict=True)]


class Scope(_Model):
    """Which segments a rule covers. Each field is an fnmatch glob (case-sensitive); ``None``
    (absent) means any value, including a segment that lacks the attribute."""

    agent: Glob | None = None
    domain: Glob | None = None
    tier: Annotated[Glob | None, BeforeValidator(_tier_to_str)] = None

    def matches(self, labels: Mapping[str, object]) -> bool:
        """True when every constrained field's glob matches ``labels[field]`` (as a string).

        A constrained field whose label is missing or ``None`` does not match.
        """
        for key in ("agent", "domain", "tier"):
            pattern = getattr(self, key)
            if pattern is None:
                continue
            got = labels.get(key)
            if got is None or not fnmatchcase(str(got), pattern):
                return False
        return True


class Annotations(_Model):
    """Human text of a notification. ``summary`` and ``description`` may use ``{value}`` (what
    the rule compares: the bound, for a rule on one), ``{estimate}`` (the point estimate behind
    a bound; the value itself for a rule without one), ``{threshold}``, ``{samples}``,
    ``{agent}``, ``{domain}``, ``{tier}``, ``{rule}``; unknown placeholders are left as
    written."""

    summary: Annotated[str, Field(min_length=1, strict=True)]
    description: Annotated[str, Field(strict=True)] = ""
    runbook_url: Annotated[str, Field(min_length=1, pattern=r"^\S+$", strict=True)] | None = None


class Evidence(_Model):
    """How much evidence a calibration rule decides on: at least ``n_eff`` effective items,
    gathered over at most ``max_window``."""

    n_eff: Annotated[float, Field(gt=0, allow_inf_nan=False, strict=True)]
    max_window: Duration


class FlapPolicy(_Model):
    """Flap detection (Nagios/Icinga style): the last ``window`` is cut into slots of
    ``slot``; a slot counts as a change when the alert started or stopped firing in it. The
    share of changed slots, weighted from 0.8 (oldest) to 1.2 (newest), marks the alert
    flapping once it reaches ``start`` and clears the mark once it falls below ``stop``."""

    window: Duration = timedelta(hours=6)
    slot: Duration = timedelta(minutes=15)
    start: Annotated[float, Field(gt=0, le=1, allow_inf_nan=False)] = 0.3
    stop: Annotated[float, Field(ge=0, le=1, allow_inf_nan=False)] = 0.15
    enabled: Annotated[bool, Field(strict=True)] = True

    @model_validator(mode="after")
    def _check(self) -> FlapPolicy:
        if self.slot <= timedelta(0) or self.window < self.slot:
            raise FieldProblem(("slot",), "must be longer than 0s and at most the window")
        if self.stop > self.start:
            raise FieldProblem(("stop",), "must be at most start")
        return self

    @property
    def slots(self) -> int:
        """Number of slots in the window."""
        return max(1, int(self.window // self.slot))


class Rule(_Model):
    """One alert rule. Durations are timedeltas (strings like ``5m`` in YAML and JSON).

    - ``for`` (attribute ``for_``): how long the breach must last before firing (0 = at once).
    - ``min_samples``: a breach measured on fewer samples is treated as no data (default per
      metric, :data:`DEFAULT_MIN_SAMPLES`).
    - ``test``: drift only, restrict to one drift test. ``category``: required for and only
      for ``judge_failure_rate`` (``kind:subkind``, e.g. ``fabrication:authorization``).
    - ``redact_customer_content``: redact emails, phones and card numbers in notification text.
    - ``estimate``: ``point`` (default) compares the metric's estimate; ``lower_bound``
      (``ece``, ``brier``, ``overconfidence_gap`` with ``>``/``>=`` only) compares its one-sided
      99 % lower bound (:mod:`monitor.analytics.alert_bounds`), so noise of a small sample
      cannot breach the rule. Such a rule resolves on the one-sided 99 % upper bound
      (``resolve_on: upper_bound``, the default) or, with ``resolve_on: value``, as soon as the
      lower bound is no longer above the threshold (no hysteresis).
    - Hysteresis: a firing alert resolves only when it is back with confidence: its resolve
      value (the upper bound for ``lower_bound`` rules, else the value) is on the good side of
      ``threshold - resolve_margin`` (``threshold + resolve_margin`` for ``<``/``<=``) at every
      evaluation with data for ``keep_firing_for``. A value between the two keeps it firing
      and restarts that period. ``resolve_margin: 0`` and ``keep_firing_for: 0s`` (defaults)
      resolve at the first evaluation that is not breached.
    - ``evidence`` (calibration metrics with ``estimate: lower_bound`` only): what a firing
      alert's recovery is judged on. The alert fires on ``window``'s lower bound (a 99 % bound
      is conservative on few items); it resolves on the upper bound over a window that grows
      from ``window`` by doubling up to ``evidence.max_window`` until the effective sample size
      reaches ``evidence.n_eff`` (:meth:`Rule.evidence_windows`): it waits for that many
      effective items, not an hour of whatever traffic there was.
    - ``flapping``: the share of recent time slots with a state change (firing or resolved)
      above which notifications are held (:class:`FlapPolicy`).
    """

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    name: Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.:-]*$", strict=True)]
    metric: Metric
    test: DriftTest | None = None
    category: Annotated[str, Field(pattern=r"^[\w.-]+(:[\w.*-]+)*$", strict=True)] | None = None
    scope: Scope = Field(default_factory=Scope)
    comparison: Comparison
    threshold: Annotated[float, Field(strict=True, allow_inf_nan=False)]
    window: Duration
    for_: Duration = Field(default=timedelta(0), alias="for")
    min_samples: Annotated[float, Field(ge=0, allow_inf_nan=False, strict=True)]
    severity: Severity
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: Annotations
    redact_customer_content: Annotated[bool, Field(strict=True)] = True
    repeat_interval: Duration = timedelta(hours=4)
    estimate: Literal["point", "lower_bound"] = "point"
    resolve_on: Literal["upper_bound", "value"] = "upper_bound"
    resolve_margin: Annotated[float, Field(ge=0, allow_inf_nan=False)] = 0.0
    keep_firing_for: Duration = timedelta(0)
    evidence: Evidence | None = None
    flapping: FlapPolicy = Field(default_factory=FlapPolicy)

    @model_validator(mode="before")
    @classmethod
    def _default_min_samples(cls, data: Any) -> Any:
        if isinstance(data, Mapping) and "min_samples" not in data:
            metric = data.get("metric")
            default = DEFAULT_MIN_SAMPLES.get(metric, 0.0) if isinstance(metric, str) else 0.0
            return {**data, "min_samples": default}
        return data

    @model_validator(mode="after")
    def _check(self) -> Rule:
        if self.test is not None and self.metric is not Metric.DRIFT:
            raise FieldProblem(("test",), "only allowed when metric is drift")
        if self.metric is Metric.JUDGE_FAILURE_RATE and self.category is None:
            raise FieldProblem(("category",), "required when metric is judge_failure_rate")
        if self.category is not None and self.metric is not Metric.JUDGE_FAILURE_RATE:
            raise FieldProblem(("category",), "only allowed when metric is judge_failure_rate")
        low, high = VALUE_RANGE[self.metric]
        if not low <= self.threshold <= high:
            raise FieldProblem(
                ("threshold",), f"{self.metric.value} takes values in [{low}, {high}]"
            )
        if self.window <= timedelta(0):
            raise FieldProblem(("window",), "must be longer than 0s")
        if self.estimate == "lower_bound" and not (
            self.metric in _BOUNDED and self.comparison in (Comparison.GT, Comparison.GE)
        ):
            raise FieldProblem(
                ("estimate",),
                "lower_bound needs metric ece, brier or overconfidence_gap and comparison > or >=",
            )
        if self.evidence is not None:
            if self.metric not in CALIBRATION_METRICS or self.estimate != "lower_bound":
                raise FieldProblem(
                    ("evidence",), "only allowed for calibration metrics with estimate lower_bound"
                )
            if self.evidence.max_window < self.window:
                raise FieldProblem(("evidence", "max_window"), "must be at least the window")
        if self.keep_firing_for < timedelta(0):
            raise FieldProblem(("keep_firing_for",), "must not be negative")
        if self.repeat_interval < timedelta(minutes=1):
            raise FieldProblem(("repeat_interval",), "must be at least 1m")
        return self

    def breached(self, value: float) -> bool:
        """True when ``value`` violates the rule (``value <comparison> threshold``)."""
        return self.comparison.holds(value, self.threshold)

    def recovered(self, value: float) -> bool:
        """True when ``value`` (the resolve value) is back with the margin: not
        ``value <comparison> threshold -/+ resolve_margin``. NaN never recovers."""
        if math.isnan(value):
            return False
        upward = self.comparison in (Comparison.GT, Comparison.GE)
        edge = (
            self.threshold - self.resolve_margin
            if upward
            else (self.threshold + self.resolve_margin)
        )
        return not self.comparison.holds(value, edge)

    def resolution(self) -> str:
        """What a firing alert of this rule waits for before it resolves, for reading, e.g.
        ``upper bound <= 0.05 for 30m on >= 600 effective items (1h-6h)``."""
        upward = self.comparison in (Comparison.GT, Comparison.GE)
        edge = (
            self.threshold - self.resolve_margin
            if upward
            else (self.threshold + self.resolve_margin)
        )
        side = (
            ("<=" if self.comparison is Comparison.GT else "<")
            if upward
            else (">=" if self.comparison is Comparison.LT else ">")
        )
        bound = self.estimate == "lower_bound" and self.resolve_on == "upper_bound"
        text = f"{'upper bound' if bound else 'value'} {side} {edge:g}"
        if self.keep_firing_for > timedelta(0):
            text += f" for {_span(self.keep_firing_for)}"
        if bound and self.evidence is not None:
            text += (
                f" on >= {self.evidence.n_eff:g} effective items"
                f" ({_span(self.window)}-{_span(self.evidence.max_window)})"
            )
        return text

    def evidence_windows(self) -> tuple[timedelta, ...]:
        """The windows tried, shortest first: ``window``, doubled while below
        ``evidence.max_window``, then ``max_window``; just ``(window,)`` without evidence."""
        if self.evidence is None:
            return (self.window,)
        out = [self.window]
        while out[-1] * 2 < self.evidence.max_window:
            out.append(out[-1] * 2)
        if out[-1] < self.evidence.max_window:
            out.append(self.evidence.max_window)
        return tuple(out)


class RuleSet(_Model):
    """A whole rules file: defaults for grouping and evaluation, and the rules.

    ``repeat_interval`` at the top is the default of every rule that omits its own (applied
    when validating a mapping). ``group_by`` names the notification labels whose values form a
    group key (see :mod:`monitor.alerts.grouping`). Rule names are unique.

    Incidents (:mod:`monitor.alerts.incidents`): ``incident_by`` names the labels whose values
    make alerts one incident (default ``agent``: an agent's alerts that fire while another of
    its alerts is open page once); ``incident_window`` is how long after an incident resolved
    a new alert of its key still joins (reopens) it instead of paging; ``incident_repage``
    (off by default): a higher severity joining an open incident pages once more.
    """

    evaluation_interval: Duration = timedelta(seconds=30)
    group_wait: Duration = timedelta(seconds=30)
    group_interval: Duration = timedelta(minutes=5)
    repeat_interval: Duration = timedelta(hours=4)
    group_by: tuple[Annotated[str, Field(min_length=1, strict=True)], ...] = ("severity", "agent")
    incident_by: tuple[Annotated[str, Field(min_length=1, strict=True)], ...] = ("agent",)
    incident_window: Duration = timedelta(minutes=30)
    incident_repage: Annotated[bool, Field(strict=True)] = False
    rules: tuple[Rule, ...] = ()

    @model_validator(mode="before")
    @classmethod
    def _inherit_repeat_interval(cls, data: Any) -> Any:
        if not isinstance(data, Mapping) or "repeat_interval" not in data:
            return data
        rules = data.get("rules")
        if not isinstance(rules, list | tuple):
            return data
        inherited = [
            {"repeat_interval": data["repeat_interval"], **r}
            if isinstance(r, Mapping) and "repeat_interval" not in r
            else r
            for r in rules
        ]
        return {**data, "rules": inherited}

    @model_validator(mode="after")
    def _check(self) -> RuleSet:
        if self.evaluation_interval <= timedelta(0):
            raise FieldProblem(("evaluation_interval",), "must be longer than 0s")
        if self.group_interval <= timedelta(0):
            raise FieldProblem(("group_interval",), "must be longer than 0s")
        first: dict[str, int] = {}
        for i, rule in enumerate(self.rules):
            if rule.name in first:
                j = first[rule.name]
                raise FieldProblem(
                    ("rules", i, "name"),
                    f"duplicate rule name {rule.name!r}",
                    also=("rules", j, "name"),
                )
            first[rule.name] = i
        return self

    def rule(self, name: str) -> Rule:
        """The rule called ``name``; raises KeyError when there is none."""
        for r in self.rules:
            if r.name == name:
                return r
        raise KeyError(name)
