"""The alerting of simulated traffic, replayed in memory with the shipped decision code.

:func:`alert_timeline` (below) walks a :class:`SimStream` the way the worker and
:mod:`monitor.alerts.timeline` walk stored traffic: every ``drift_step`` it runs the drift
checks of every segment (:func:`monitor.analytics.drift.check_drift_sums` against the reference of
:mod:`monitor.analytics.drift_policy`), every ``eval_step`` it builds the rules' observations with
the functions of :mod:`monitor.alerts.observations` and steps each alert with
:func:`monitor.alerts.lifecycle.evaluate`, then passes each evaluation's notifications through
the incident step (:func:`monitor.alerts.incidents.step`) as the worker does. Only the storage
is replaced: per-minute bin sums kept
in numpy cumulative arrays instead of ``calibration_bins``, the design effect as labelled items
per conversation (items dated by their message, as the store does). Labels are known at once (no
outcome latency), like a replay of traffic that has fully landed. Metrics the simulator does
not drive (judges, DLQ, lag, escalation timing) are not evaluated.

Used by ``bench/alert_quality.py`` (false pages, detection delays) and by the demo's
truthfulness test over seeds.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import numpy as np

from monitor.alerts.incidents import Incident, IncidentPolicy
from monitor.alerts.incidents import step as incident_step
from monitor.alerts.lifecycle import Observation, evaluate
from monitor.alerts.observation_repo import DriftRow, SegmentTuple
from monitor.alerts.observations import (
    calibration_observations,
    drift_observations,
    escalation_observation,
)
from monitor.alerts.rule_models import CALIBRATION_METRICS, Metric, Rule, RuleSet
from monitor.alerts.states import AlertState, Kind, Notification, Status
from monitor.analytics.bins import DEFAULT_BINS, BinSums, bin_index
from monitor.analytics.drift import check_drift_sums
from monitor.analytics.drift_policy import (
    MIN_REFERENCE,
    SCAN_WINDOWS,
    TEST_MIN_SAMPLES,
    Reference,
    advance,
    reference_window,
)
from monitor.analytics.drift_tests import SURPRISE_CONCENTRATIONS, SURPRISE_GROUPS
from monitor.analytics.escalation import ConversationEscalation
from monitor.sim.traffic import Simulator

MINUTE = timedelta(minutes=1)
_FIELDS = 6  # weight, sum_conf, sum_y, sum_sq_err, sum_w2, count
_Conv = tuple[SegmentTuple, list[tuple[datetime, float]], bool, bool]
"""A conversation: segment, (time, confidence) of its messages, success, escalated."""


@dataclass
class _Seg:
    cum: np.ndarray  # (minutes + 1, 6, bins) cumulative sums
    items: np.ndarray  # (minutes + 1,) cumulative labelled items
    convs: np.ndarray  # (minutes + 1,) cumulative conversations (by their first item)
    esc: list[tuple[int, ConversationEscalation]] = field(default_factory=list)


class SimStream:
    """Per-minute bin sums of ``n`` simulated conversations, per segment (agent, domain, tier)."""

    def __init__(self, sim: Simulator, n: int, n_bins: int = DEFAULT_BINS) -> None:
        start = sim.start
        minutes = int((sim.conversation_start(n) - start) / MINUTE) + 15
        convs: list[_Conv] = []
        for conv in sim.conversations(n):
            ctx, agent = conv[0].context, conv[0].agent
            assert ctx is not None
            seg: SegmentTuple = (agent.id, ctx.domain or "", int(ctx.tier or 0))
            outcome = next(e for e in conv if e.outcome is not None).outcome
            assert outcome is not None
            confs = [
                (e.ts, e.message.confidence)
                for e in conv
                if e.message is not None and e.message.confidence is not None
            ]
            escalated = any(e.escalation is not None for e in conv)
            convs.append((seg, confs, bool(outcome.success), escalated))
        self._build(start, minutes, convs, n_bins)

    @classmethod
    def from_items(
        cls,
        start: datetime,
        minutes: int,
        items: Mapping[SegmentTuple, Iterable[tuple[datetime, float, int]]],
        n_bins: int = DEFAULT_BINS,
    ) -> SimStream:
        """A stream of one-message conversations: per segment ``(time, confidence, correct)``
        items (for example real answers, :mod:`monitor.sim.answers`), ``minutes`` long."""
        out = cls.__new__(cls)
        convs: list[_Conv] = [
            (seg, [(at, c)], bool(y), False) for seg, its in items.items() for at, c, y in its
        ]
        out._build(start, minutes, convs, n_bins)
        return out

    def _build(
        self, start: datetime, minutes: int, conversations: Iterable[_Conv], n_bins: int
    ) -> None:
        self.start, self.n_bins, self.minutes = start, n_bins, minutes
        raw: dict[SegmentTuple, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
        segs: dict[SegmentTuple, list[tuple[int, ConversationEscalation]]] = {}
        for seg, confs, success, escalated in conversations:
            arr = raw.get(seg)
            if arr is None:
                arr = (
                    np.zeros((self.minutes, _FIELDS, n_bins)),
                    np.zeros(self.minutes),
                    np.zeros(self.minutes),
                )
                raw[seg] = arr
            y = 1.0 if success else 0.0
            first = int((confs[0][0] - self.start) / MINUTE)
            for ts, c in confs:
                m = int((ts - self.start) / MINUTE)
                if m >= self.minutes:
                    continue
                b = int(bin_index([c], n_bins)[0])
                arr[0][m, :, b] += (1.0, c, y, (c - y) ** 2, 1.0, 1.0)
                arr[1][m] += 1
            if first < self.minutes:
                arr[2][first] += 1
            segs.setdefault(seg, []).append(
                (first, ConversationEscalation(min(c for _, c in confs), escalated, success))
            )
        self.segs: dict[SegmentTuple, _Seg] = {}
        for seg, (bins, items, convs) in raw.items():
            zero = np.zeros((1, _FIELDS, n_bins))
            esc = sorted(segs[seg], key=lambda e: e[0])
            self.segs[seg] = _Seg(
                np.concatenate([zero, np.cumsum(bins, axis=0)]),
                np.concatenate([[0.0], np.cumsum(items)]),
                np.concatenate([[0.0], np.cumsum(convs)]),
                esc,
            )

    def minute(self, at: datetime) -> int:
        """Index of the minute boundary ``at`` (clipped to the stream)."""
        return max(0, min(self.minutes, int((at - self.start) // MINUTE)))

    def sums(self, seg: SegmentTuple, lo: datetime, hi: datetime) -> BinSums:
        """Bin sums of ``[lo, hi)`` with the design effect applied (as the store's readers)."""
        s = self.segs[seg]
        a, b = self.minute(lo), self.minute(hi)
        d = s.cum[b] - s.cum[a]
        sums = BinSums(d[0], d[1], d[2], d[3], d[4], np.rint(d[5]).astype(np.int64))
        items, convs = s.items[b] - s.items[a], s.convs[b] - s.convs[a]
        return sums.with_design_effect(max(1.0, items / convs) if convs > 0 else 1.0)

    def conversations(
        self, seg: SegmentTuple, lo: datetime, hi: datetime
    ) -> list[ConversationEscalation]:
        """Conversations of ``seg`` whose first item is in ``[lo, hi)``."""
        esc = self.segs[seg].esc  # in conversation order, so by first minute
        lo_i = bisect_left(esc, self.minute(lo), key=lambda e: e[0])
        hi_i = bisect_left(esc, self.minute(hi), key=lambda e: e[0])
        return [c for _, c in esc[lo_i:hi_i]]


@dataclass(frozen=True)
class DriftSettings:
    """The drift job's settings (the worker's defaults unless given)."""

    recent: timedelta = timedelta(hours=1)
    reference: timedelta = timedelta(hours=24)
    alpha: float = 0.001
    min_samples: int = 100
    pinned: bool = True  # False: the old behaviour, baseline = the previous period
    holm: bool = True  # False: the old decision, any test below alpha
    scan: tuple[timedelta, ...] = SCAN_WINDOWS  # (): no sequential surprise test
    min_reference: float = MIN_REFERENCE  # 0: any reference may fire
    concentrations: tuple[float, ...] = SURPRISE_CONCENTRATIONS  # (): surprise tilts alone
    groups: int = SURPRISE_GROUPS  # >= bins: the Dirichlet family on unmerged bins
    thetas: tuple[float, ...] = ()  # SURPRISE_THETAS: the surprise tilts as well


@dataclass(frozen=True)
class Page:
    """A notification of the replay (firing, resolved or flapping): rule, scope's agent, kind,
    time, and its incident and role there (:mod:`monitor.alerts.incidents`; None: none)."""

    rule: str
    agent: str
    kind: Kind
    at: datetime
    incident: str | None = None
    role: str | None = None

    @property
    def pages(self) -> bool:
        """True when it paged: it opened or re-paged an incident (or, of no incident, fired)."""
        if self.role is None:
            return self.kind is Kind.FIRING
        return self.role in ("open", "repage")


@dataclass
class Timeline:
    """What a replay produced: notifications, every drift check per segment (time, fired),
    and every incident as it stood at the end (``Incident.to_dict()``, plain values that
    cross process boundaries) by id."""

    pages: list[Page] = field(default_factory=list)
    checks: dict[SegmentTuple, list[tuple[datetime, bool]]] = field(default_factory=dict)
    incidents: dict[str, dict[str, Any]] = field(default_factory=dict)


def drift_round(
    stream: SimStream, at: datetime, cfg: DriftSettings, states: dict[SegmentTuple, Reference]
) -> list[DriftRow]:
    """One round of drift checks at ``at`` (recent = ``[at - recent, at)``), updating
    ``states``; returns the rows the store would hold for the observations."""
    rec = (at - cfg.recent, at)
    rows = []
    for seg in sorted(stream.segs):
        state = states.get(seg)
        ref = (
            reference_window(state, rec[0], cfg.reference)
            if cfg.pinned
            else (rec[0] - cfg.recent, rec[0])
        )
        base, recent = stream.sums(seg, *ref), stream.sums(seg, *rec)
        if recent.total_count == 0 and base.total_count == 0:
            continue
        check = check_drift_sums(
            base,
            recent,
            alpha=cfg.alpha,
            min_samples=cfg.min_samples,
            holm=cfg.holm,
            test_min_samples=TEST_MIN_SAMPLES if cfg.holm else None,
            scan=[stream.sums(seg, at - w, at) for w in cfg.scan],
            min_reference=cfg.min_reference,
            concentrations=cfg.concentrations,
            groups=cfg.groups,
            thetas=cfg.thetas,
        )
        states[seg] = advance(state, ref, rec, check.fired)
        rows.append(DriftRow(seg, check.fired, check.fired_tests, check.n_recent, at, check.reason))
    return rows


def _observations(
    rule: Rule, stream: SimStream, now: datetime, latest: dict[SegmentTuple, DriftRow]
) -> list[Observation]:
    lo = now - rule.window
    if rule.metric in CALIBRATION_METRICS:
        by_window = {}
        for w in rule.evidence_windows():
            sums = {seg: stream.sums(seg, now - w, now) for seg in stream.segs}
            by_window[w] = {k: v for k, v in sums.items() if v.total_weight > 0}
        return calibration_observations(rule, by_window, now)
    if rule.metric is Metric.DRIFT:
        rows = [r for r in latest.values() if lo < r.recent_to <= now + MINUTE]
        return drift_observations(rule, rows, now)
    if rule.metric is Metric.ESCALATION_INVERSION:
        return [
            escalation_observation(rule, seg, stream.conversations(seg, lo, now), now)
            for seg in sorted(stream.segs)
        ]
    return []


def alert_timeline(
    stream: SimStream,
    rules: RuleSet,
    start: datetime,
    end: datetime,
    *,
    drift: DriftSettings = DriftSettings(),
    drift_step: timedelta = 5 * MINUTE,
    eval_step: timedelta = 5 * MINUTE,
    escalation_step: timedelta | None = None,
    only: Iterable[str] | None = None,
) -> Timeline:
    """Replay ``[start, end]``: drift rounds every ``drift_step``, rule evaluations every
    ``eval_step`` (both from ``start``); escalation rules (a day of conversations each) every
    ``escalation_step`` if given (a multiple of ``eval_step``; long replays), else with the
    others; ``only`` limits the rules evaluated by name. Each evaluation's notifications go
    through the incident step of ``rules`` (``incident_by``, ``incident_window``,
    ``incident_repage``) like the worker's."""
    names = set(only) if only is not None else None
    chosen = [r for r in rules.rules if names is None or r.name in names]
    out = Timeline()
    states: dict[SegmentTuple, Reference] = {}
    alerts: dict[str, AlertState] = {}
    latest: dict[SegmentTuple, DriftRow] = {}
    policy = IncidentPolicy.from_rules(rules)
    live: dict[str, Incident] = {}
    next_drift, at = start, start
    while at <= end:
        while next_drift <= at:
            for row in drift_round(stream, next_drift, drift, states):
                latest[row.segment] = row
                out.checks.setdefault(row.segment, []).append((next_drift, row.fired))
            next_drift += drift_step
        emitted: list[Notification] = []
        for rule in chosen:
            if (
                escalation_step is not None
                and rule.metric is Metric.ESCALATION_INVERSION
                and (at - start) % escalation_step
            ):
                continue
            for obs in _observations(rule, stream, at, latest):
                new, notes = evaluate(rule, alerts.get(obs.fingerprint), obs, at)
                alerts[obs.fingerprint] = new
                emitted.extend(notes)
        firing = {fp for fp, st in alerts.items() if st.status is Status.FIRING}
        joined = incident_step(live.values(), emitted, firing, policy, at)
        live = {i: inc for i, inc in joined.incidents.items() if inc.joinable(at, policy.window)}
        out.incidents.update({i: joined.incidents[i].to_dict() for i in joined.changed})
        out.pages.extend(
            Page(n.rule, n.scope.get("agent", ""), n.kind, at, n.incident_id, n.incident_role)
            for n in joined.notifications
            if n.kind in (Kind.FIRING, Kind.RESOLVED, Kind.FLAPPING)
        )
        at += eval_step
    return out
