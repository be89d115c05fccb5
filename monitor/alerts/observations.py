"""Observations of alert rules: the value of each rule's metric per concrete scope at ``now``.

:func:`observe` reads the stored analytics through the repos (one query per metric family and
window, shared by the rules that need it) and the pure ``*_observations`` functions turn the
rows into :class:`monitor.alerts.lifecycle.Observation` values, one per concrete scope present
in the data and matched by the rule's (globbed) scope. The window of a rule is ``[now - window,
now)``. Scopes are ``{"agent", "domain", "tier"}`` with "not given" (``""``/``0``) dropped.

Metric definitions (see :mod:`monitor.alerts.rule_models`):

- ``ece``/``mce``/``brier``/``accuracy``/``overconfidence_gap``: from ``calibration_bins``
  summed over the window; ``samples`` = effective sample size
  (W^2 / sum w^2) divided by the design effect (labelled items per conversation: items of a
  conversation share its label).
  A rule with ``estimate: lower_bound`` gets the metric's one-sided 99 % lower bound
  (:mod:`monitor.analytics.alert_bounds`) as its value, the point estimate as its
  ``estimate`` and the 99 % upper bound as its resolve
  value, the latter over the rule's evidence window when it has ``evidence`` (the shortest of
  its windows with enough effective items, :func:`evidence_sums`).
- ``drift``: 1 when the latest stored drift check of the scope (``recent_to`` in
  ``(now - window, now + 1m]``, the minute rounding of drift windows) fired (and, for a rule
  with ``test``, that test fired), else 0; ``samples`` = the check's recent item count.
- ``escalation_inversion`` (1/0) and ``time_to_escalation_p90_s``: over the conversations
  starting in the window; ``samples`` = conversations with a confidence / escalations timed.
- ``judge_failure_rate``: share of ``ok`` verdicts created in the window with a category equal
  to the rule's ``category``, below it (``fabrication`` covers ``fabrication:authorization``),
  or matching it as a glob; ``samples`` = ok verdicts.
- ``dlq_rate``: dead letters / (events + dead letters) received in the window, global scope.
- ``consumer_lag``: the injected ``lag`` callable's value, global scope; no callable (or it
  returns None): no observation.
- ``ingest_stall_s``: the injected ``stall`` callable's value (seconds without a write while
  the local ingest loop has work, else 0), global scope, like ``consumer_lag``.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime, timedelta
from fnmatch import fnmatchcase
from typing import Any

from sqlalchemy.ext.asyncio import AsyncEngine

from monitor.alerts import observation_repo as repo
from monitor.alerts.lifecycle import Observation
from monitor.alerts.observation_repo import DriftRow, SegmentTuple
from monitor.alerts.rule_models import CALIBRATION_METRICS, GATE_METRICS, Metric, Rule, RuleSet
from monitor.analytics import calibration as cal
from monitor.analytics.alert_bounds import lower_bound, upper_bound
from monitor.analytics.bins import BinSums
from monitor.analytics.design_effect import design_effects
from monitor.analytics.drift import SEQUENTIAL_TESTS
from monitor.analytics.escalation import ConversationEscalation, inversion_test, time_to_escalation
from monitor.analytics.repo import Segment, bin_sums
from monitor.analytics.repo_escalation import escalation_conversations

LagSource = Callable[[], float | None]
"""Returns the current consumer lag in records (None when unknown)."""

_DRIFT_SLACK = timedelta(minutes=1)
#: the rules that read each segment's escalation conversations
ESCALATION_METRICS = frozenset({Metric.ESCALATION_INVERSION, Metric.TIME_TO_ESCALATION_P90_S})


def segment_scope(segment: SegmentTuple) -> dict[str, str]:
    """``("billing", "", 3)`` -> ``{"agent": "billing", "tier": "3"}`` (sentinels dropped)."""
    agent, domain, tier = segment
    out = {"agent": agent}
    if domain:
        out["domain"] = domain
    if tier:
        out["tier"] = str(tier)
    return out


def _finite(x: float | None) -> float | None:
    return x if x is not None and math.isfinite(x) else None


def calibration_value(metric: Metric, sums: BinSums) -> float | None:
    """The calibration metric of ``sums``; None when undefined (no weight)."""
    if metric is Metric.ECE:
        return _finite(cal.ece(sums))
    if metric is Metric.MCE:
        return _finite(cal.mce(sums))
    if metric is Metric.BRIER:
        return _finite(cal.brier(sums))
    if metric is Metric.ACCURACY:
        return _finite(cal.accuracy(sums))
    if metric is Metric.OVERCONFIDENCE_GAP:
        return _finite(cal.mean_confidence(sums) - cal.accuracy(sums))
    raise ValueError(f"{metric.value} is not a calibration metric")


def calibration_observations(
    rule: Rule, by_window: Mapping[timedelta, Mapping[SegmentTuple, BinSums]], now: datetime
) -> list[Observation]:
    """One observation per segment with sums in ``rule.window`` (``by_window[rule.window]``)
    matched by the rule's scope. With ``estimate: lower_bound`` the value is the metric's
    one-sided 99 % lower bound over ``rule.window``, the resolve value its 99 % upper bound over
    the evidence window (:func:`evidence_sums`; ``by_window`` holds every window of
    ``rule.evidence_windows()``), and the detail gives the point estimate and both bounds."""
    sums = by_window.get(rule.window, {})
    wide = evidence_sums(rule, by_window)
    out = []
    for seg, s in sorted(sums.items()):
        scope = segment_scope(seg)
        if rule.scope.matches(scope):
            value = calibration_value(rule.metric, s)
            detail = None
            resolve = None
            point = None
            if rule.estimate == "lower_bound" and value is not None:
                point, value = value, _finite(lower_bound(rule.metric.value, s))
                e = wide.get(seg, s)
                resolve = _finite(upper_bound(rule.metric.value, e))
                detail = (
                    f"{rule.metric.value} {point:.4g}; 99% lower bound "
                    f"{'n/a' if value is None else f'{value:.4g}'} on {s.total_n_eff():.0f} "
                    f"effective items, upper bound {'n/a' if resolve is None else f'{resolve:.4g}'}"
                    f" on {e.total_n_eff():.0f}"
                )
            out.append(
                Observation(
                    rule.name, scope, value, s.total_n_eff(), now, detail, resolve, estimate=point
                )
            )
    return out


def evidence_sums(
    rule: Rule, by_window: Mapping[timedelta, Mapping[SegmentTuple, BinSums]]
) -> dict[SegmentTuple, BinSums]:
    """Per segment, the sums of the shortest of ``rule.evidence_windows()`` whose effective
    size reaches ``rule.evidence.n_eff`` (else of the longest); ``by_window`` holds the sums
    of every one of those windows. Without ``evidence``: the sums of ``rule.window``."""
    windows = rule.evidence_windows()
    target = rule.evidence.n_eff if rule.evidence is not None else 0.0
    out: dict[SegmentTuple, BinSums] = {}
    for w in reversed(windows):  # longest first; shorter windows that suffice overwrite
        for seg, s in by_window.get(w, {}).items():
            if seg not in out or s.total_n_eff() >= target:
                out[seg] = s
    return out


def drift_observations(rule: Rule, rows: Iterable[DriftRow], now: datetime) -> list[Observation]:
    """Per segment (agent versions combined): 1.0 if a latest check fired (the rule's test,
    when it names one), else 0.0; ``samples`` = summed recent item counts. ``confirmed`` when
    the test the rule pages on is sequential (:data:`monitor.analytics.drift.SEQUENTIAL_TESTS`;
    a rule naming no test: any that fired): its evidence already held over time, so the rule's
    ``for`` is not waited for. A rule on a fixed-window test always waits."""
    per: dict[SegmentTuple, tuple[bool, int, str | None, bool]] = {}
    for r in rows:
        fired = r.fired and (rule.test is None or rule.test in r.fired_tests)
        named = (rule.test,) if rule.test is not None else r.fired_tests
        sequential = fired and not SEQUENTIAL_TESTS.isdisjoint(named)
        was_fired, n, detail, was_seq = per.get(r.segment, (False, 0, None, False))
        detail = detail or (r.reason if fired else None)
        per[r.segment] = (was_fired or fired, n + r.n_recent, detail, was_seq or sequential)
    out = []
    for seg, (fired, n, detail, sequential) in sorted(per.items()):
        scope = segment_scope(seg)
        if rule.scope.matches(scope):
            value = 1.0 if fired else 0.0
            out.append(Observation(rule.name, scope, value, n, now, detail, None, sequential))
    return out


def escalation_observation(
    rule: Rule, segment: SegmentTuple, convs: list[ConversationEscalation], now: datetime
) -> Observation:
    """Inversion (1/0, samples = conversations with a confidence) or p90 seconds to
    escalation (samples = escalations with a time) of one segment's conversations."""
    scope = segment_scope(segment)
    if rule.metric is Metric.ESCALATION_INVERSION:
        test = inversion_test(convs)
        value = 1.0 if test.inverted else 0.0
        return Observation(rule.name, scope, value, test.n_conversations, now, test.reason)
    timing = time_to_escalation(convs)
    return Observation(rule.name, scope, _finite(timing.p90_seconds), timing.n_seconds, now)


def category_matches(pattern: str, category: str) -> bool:
    """``category`` equals ``pattern``, is a sub-kind of it, or matches it as a glob."""
    return (
        category == pattern or category.startswith(pattern + ":") or fnmatchcase(category, pattern)
    )


def judge_observations(
    rule: Rule, rows: Iterable[tuple[SegmentTuple, tuple[str, ...], int]], now: datetime
) -> list[Observation]:
    """Share of ok verdicts with a category matching the rule's, per segment."""
    pattern = rule.category or ""
    totals: dict[SegmentTuple, list[int]] = {}
    for seg, cats, n in rows:
        acc = totals.setdefault(seg, [0, 0])
        acc[0] += n
        if any(category_matches(pattern, c) for c in cats):
            acc[1] += n
    out = []
    for seg, (n, bad) in sorted(totals.items()):
        scope = segment_scope(seg)
        if rule.scope.matches(scope) and n > 0:
            out.append(Observation(rule.name, scope, bad / n, n, now))
    return out


def dlq_observation(rule: Rule, events: int, dead: int, now: datetime) -> list[Observation]:
    """The global dead-letter share (no value when nothing arrived)."""
    if not rule.scope.matches({}):
        return []
    total = events + dead
    return [Observation(rule.name, {}, dead / total if total else None, total, now)]


def lag_observation(rule: Rule, lag: float | None, now: datetime) -> list[Observation]:
    """The consumer lag as a global observation (none when unknown)."""
    if lag is None or not math.isfinite(lag) or not rule.scope.matches({}):
        return []
    return [Observation(rule.name, {}, float(lag), 1.0, now)]


def gate_observations(
    rule: Rule, counts: Mapping[SegmentTuple, repo.GateCounts], now: datetime
) -> list[Observation]:
    """The gate metric of each segment (:func:`observation_repo.gate_counts`)."""
    out = []
    for seg, c in sorted(counts.items()):
        scope = segment_scope(seg)
        if not rule.scope.matches(scope):
            continue
        num, den = {
            Metric.GATE_ESCALATION_RATE: (c.escalated, c.decisions),
            Metric.GATE_DEGRADED_RATE: (c.degraded, c.decisions),
            Metric.GATE_FAIL_OPEN_RATE: (c.fail_open, c.enforced),
        }.get(rule.metric, (c.proceeded_failed, c.proceeded_known))
        out.append(Observation(rule.name, scope, num / den if den else None, den, now))
    return out


class _Reader:
    """Per-evaluation cache: one query per (family, window), shared by rules.

    A segment's escalation conversations (one object per distinct key of a window that may be a
    day long) are kept only for the windows in ``shared_escalation``, those more than one rule
    reads: kept for every segment, they made the evaluation's peak memory, and so the worker's
    resident size, grow with everything its longest window holds; read and dropped, the peak
    is one segment's."""

    def __init__(
        self,
        engine: AsyncEngine,
        now: datetime,
        shared_escalation: frozenset[timedelta] = frozenset(),
    ) -> None:
        self.engine = engine
        self.now = now
        self.shared_escalation = shared_escalation
        self.cache: dict[tuple[Any, ...], Any] = {}

    async def get(self, key: tuple[Any, ...], make: Callable[[], Any]) -> Any:
        if key not in self.cache:
            self.cache[key] = await make()
        return self.cache[key]

    async def calibration_sums(self, window: timedelta) -> dict[SegmentTuple, BinSums]:
        """Bin sums of ``[now - window, now)`` per segment, design effect applied."""
        eng, now, lo = self.engine, self.now, self.now - window
        keys = ("agent_id", "domain", "tier")
        by_seg = await self.get(
            ("bins", window), lambda: bin_sums(eng, Segment(), lo, now, group_by=keys)
        )
        deffs = await self.get(
            ("deff", window), lambda: design_effects(eng, Segment(), lo, now, group_by=keys)
        )
        return {
            (str(k[0]), str(k[1]), int(k[2])): s.with_design_effect(deffs.get(k, 1.0))
            for k, s in by_seg.items()
        }

    async def rule(
        self, rule: Rule, lag: LagSource | None, stall: LagSource | None = None
    ) -> list[Observation]:
        now, eng = self.now, self.engine
        lo = now - rule.window
        m, w = rule.metric, rule.window
        if m in CALIBRATION_METRICS:
            by_window = {ew: await self.calibration_sums(ew) for ew in rule.evidence_windows()}
            return calibration_observations(rule, by_window, now)
        if m is Metric.DRIFT:
            rows = await self.get(
                ("drift", w), lambda: repo.latest_drift_checks(eng, lo, now + _DRIFT_SLACK)
            )
            return drift_observations(rule, rows, now)
        if m in ESCALATION_METRICS:
            segs = await self.get(("segs", w), lambda: repo.conversation_segments(eng, lo, now))
            out = []
            for seg in segs:
                if not rule.scope.matches(segment_scope(seg)):
                    continue
                read = _bind(_convs, eng, seg, lo, now)
                if w in self.shared_escalation:
                    convs = await self.get(("esc", w, seg), read)
                else:
                    convs = await read()
                out.append(escalation_observation(rule, seg, convs, now))
                del convs
            return out
        if m is Metric.JUDGE_FAILURE_RATE:
            rows = await self.get(("verdicts", w), lambda: repo.verdict_categories(eng, lo, now))
            return judge_observations(rule, rows, now)
        if m in GATE_METRICS:
            counts = await self.get(("gate", w), lambda: repo.gate_counts(eng, lo, now))
            return gate_observations(rule, counts, now)
        if m is Metric.DLQ_RATE:
            events, dead = await self.get(("dlq", w), lambda: repo.dlq_counts(eng, lo, now))
            return dlq_observation(rule, events, dead, now)
        if m is Metric.INGEST_STALL_S:
            return lag_observation(rule, None if stall is None else stall(), now)
        return lag_observation(rule, None if lag is None else lag(), now)


def _bind(fn: Callable[..., Any], *args: Any) -> Callable[[], Any]:
    return lambda: fn(*args)


async def _convs(
    engine: AsyncEngine, seg: SegmentTuple, lo: datetime, hi: datetime
) -> list[ConversationEscalation]:
    agent, domain, tier = seg
    found = await escalation_conversations(engine, Segment(agent, None, domain, tier), lo, hi)
    return found.get(agent, [])


async def observe(
    engine: AsyncEngine,
    rules: RuleSet,
    now: datetime,
    *,
    lag: LagSource | None = None,
    stall: LagSource | None = None,
) -> list[Observation]:
    """Observations of every rule at ``now`` (aware), in rule order then scope order."""
    if now.tzinfo is None:
        raise ValueError("now must be timezone-aware")
    windows = Counter(r.window for r in rules.rules if r.metric in ESCALATION_METRICS)
    reader = _Reader(engine, now, frozenset(w for w, n in windows.items() if n > 1))
    out: list[Observation] = []
    for rule in rules.rules:
        out.extend(await reader.rule(rule, lag, stall))
    return out
