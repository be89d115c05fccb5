"""The analytics as the CLI, the HTTP API and the demo use them: stored rows -> reports.

Framework-free orchestration: each function reads through :mod:`monitor.analytics.repo`,
computes with the pure analytics modules, and (for drift checks and recalibration maps)
stores its results. Per-agent results are keyed by agent id; :data:`ALL` is the roll-up of every
agent in the filter (a sum of the same rows, so exact).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from monitor.analytics.advisor import Advice, advise
from monitor.analytics.bins import sum_all
from monitor.analytics.calibration import DEFAULT_MIN_SAMPLES, CalibrationReport, calibration_report
from monitor.analytics.design_effect import design_effects
from monitor.analytics.drift import DriftCheck, check_drift_many
from monitor.analytics.escalation import (
    EscalationBin,
    EscalationTiming,
    InversionTest,
    MissedEscalations,
    escalation_by_bin,
    inversion_test,
    missed_escalations,
    time_to_escalation,
)
from monitor.analytics.passk import PassK as PassK
from monitor.analytics.passk import pass_k
from monitor.analytics.recalibration import RecalibrationResult, fit_isotonic
from monitor.analytics.repo import Segment, bin_range, bin_sums, labelled_items, trials
from monitor.analytics.repo_escalation import escalation_conversations
from monitor.analytics.thresholds import Recommendation, ThresholdTable, threshold_table
from monitor.analytics.write import SegmentKey, save_drifts, save_map

ALL = "*"


async def calibration(
    engine: AsyncEngine,
    segment: Segment,
    start: datetime,
    end: datetime,
    *,
    min_samples: float = DEFAULT_MIN_SAMPLES,
    n_boot: int = 500,
) -> dict[str, CalibrationReport]:
    """Calibration report per agent plus :data:`ALL` (absent when there is no labelled item).

    Intervals: parametric bootstrap over the bin sums (``n_boot`` draws, seed 0), Wilson for
    accuracies, both with effective sizes divided by the design effect (items per
    conversation: the messages of a conversation share its label); ``meaningful`` False below
    ``min_samples`` effective items after that division.
    """
    sums = await bin_sums(engine, segment, start, end)
    deffs = await design_effects(engine, segment, start, end, with_total=True)
    all_deff = deffs.get((), 1.0)
    out = {
        str(key[0]): calibration_report(
            s.with_design_effect(deffs.get(key, 1.0)), min_samples=min_samples, n_boot=n_boot
        )
        for key, s in sorted(sums.items())
    }
    if sums:
        total = sum_all(sums.values()).with_design_effect(all_deff)
        out[ALL] = calibration_report(total, min_samples=min_samples, n_boot=n_boot)
    return out


@dataclass(frozen=True)
class EscalationSummary:
    """Escalation analytics of one agent (docs/design.md, "Metric definitions")."""

    conversations: int
    escalated: int
    bins: list[EscalationBin]
    inversion: InversionTest
    timing: EscalationTiming
    missed: MissedEscalations

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


async def escalation(
    engine: AsyncEngine, segment: Segment, start: datetime, end: datetime, *, threshold: float
) -> dict[str, EscalationSummary]:
    """Per agent: escalation by confidence bin, inversion test, timing, missed escalations
    (``threshold`` on the conversation's minimum confidence)."""
    convs = await escalation_conversations(engine, segment, start, end)
    return {
        agent: EscalationSummary(
            conversations=len(cs),
            escalated=sum(c.escalated for c in cs),
            bins=escalation_by_bin(cs),
            inversion=inversion_test(cs),
            timing=time_to_escalation(cs),
            missed=missed_escalations(cs, threshold),
        )
        for agent, cs in sorted(convs.items())
    }


async def thresholds(
    engine: AsyncEngine,
    segment: Segment,
    start: datetime,
    end: datetime,
    *,
    target: float | None,
    budget: float | None,
    candidates: list[float] | None = None,
) -> dict[str, tuple[ThresholdTable, Recommendation]]:
    """Per agent: the threshold what-if table and the recommended threshold."""
    convs = await escalation_conversations(engine, segment, start, end)
    out = {}
    for agent, cs in sorted(convs.items()):
        table = threshold_table(cs, candidates)
        out[agent] = (table, table.recommend(target, budget))
    return out


async def threshold_advice(
    engine: AsyncEngine,
    segment: Segment,
    start: datetime,
    end: datetime,
    *,
    keep: float | None,
    budget: float | None,
    target: float | None,
    candidates: list[float] | None = None,
) -> dict[str, tuple[ThresholdTable, Advice | None]]:
    """Per agent: the what-if table on ``candidates`` and the advisor's answer to the question
    (:func:`monitor.analytics.advisor.advise`; None when no option is given)."""
    convs = await escalation_conversations(engine, segment, start, end)
    asked = any(v is not None for v in (keep, budget, target))
    return {
        agent: (
            threshold_table(cs, candidates),
            advise(cs, keep=keep, budget=budget, target=target) if asked else None,
        )
        for agent, cs in sorted(convs.items())
    }


async def passk(
    engine: AsyncEngine,
    segment: Segment,
    k: int,
    start: datetime | None = None,
    end: datetime | None = None,
) -> dict[str, PassK]:
    """pass^k (and pass@k) per agent over conversations with a task id and an outcome (those
    started in ``[start, end)`` when given)."""
    found = await trials(engine, segment, start, end)
    return {agent: pass_k(ts, k) for agent, ts in sorted(found.items())}


@dataclass(frozen=True)
class DriftWindows:
    """The two half-open windows a drift check compares."""

    baseline: tuple[datetime, datetime]
    recent: tuple[datetime, datetime]


def drift_windows(
    now: datetime, recent: timedelta, baseline: tuple[datetime, datetime] | None = None
) -> DriftWindows:
    """Recent = ``[now - recent, now)`` on whole minutes (``now`` rounded up, ``recent`` to the
    nearest minute); baseline = the period just before
    it, of the same length, unless a pinned ``baseline`` is given. Raises ValueError when the
    windows are empty or overlap."""
    _, _, end = bin_range(now - timedelta(minutes=1), now)
    if recent > timedelta(0):  # whole minutes, so the two windows never share a stored minute
        recent = timedelta(minutes=max(1, round(recent / timedelta(minutes=1))))
    rec = (end - recent, end)
    base = baseline if baseline is not None else (rec[0] - recent, rec[0])
    if recent <= timedelta(0) or base[1] <= base[0]:
        raise ValueError("drift windows must be non-empty")
    if base[1] > rec[0]:
        raise ValueError("the baseline window must end before the recent window starts")
    return DriftWindows(base, rec)


async def run_drift(
    engine: AsyncEngine,
    segment: Segment,
    windows: DriftWindows,
    *,
    alpha: float = 0.01,
    min_samples: int = 100,
    store: bool = True,
) -> dict[SegmentKey, DriftCheck]:
    """Drift check of every segment with items in either window; stored when ``store``.

    The tests use effective sizes divided by each window's design effect (labelled items per
    conversation): items of one conversation share its outcome, so counting them as
    independent made the tests fire several times more often than ``alpha`` on stable agents.
    """
    keys = ("agent_id", "agent_version", "domain", "tier")
    base = await bin_sums(engine, segment, *windows.baseline, group_by=keys)
    rec = await bin_sums(engine, segment, *windows.recent, group_by=keys)
    deff_b = await design_effects(engine, segment, *windows.baseline, group_by=keys)
    deff_r = await design_effects(engine, segment, *windows.recent, group_by=keys)
    empty = sum_all([])
    segments = sorted(set(base) | set(rec))
    checks = check_drift_many(
        [
            (
                base.get(key, empty).with_design_effect(deff_b.get(key, 1.0)),
                rec.get(key, empty).with_design_effect(deff_r.get(key, 1.0)),
                [],
            )
            for key in segments
        ],
        alpha=alpha,
        min_samples=min_samples,
    )
    out: dict[SegmentKey, DriftCheck] = {
        (str(key[0]), str(key[1]), str(key[2]), int(key[3])): check
        for key, check in zip(segments, checks, strict=True)
    }
    if store:
        await save_drifts(
            engine, [(k, windows.baseline, windows.recent, c) for k, c in out.items()]
        )
    return out


async def fit_maps(
    engine: AsyncEngine,
    segment: Segment,
    start: datetime,
    end: datetime,
    *,
    min_items: int = 200,
    store: bool = True,
) -> dict[tuple[str, str], RecalibrationResult | str]:
    """Fit an isotonic map per (agent, domain) from labelled items in ``[start, end)``.

    Values are the fit results (stored as new versions when ``store``) or, for a segment that
    cannot be fitted (too few items), the reason as a string.
    """
    cond, params = segment.where()
    sql = text(
        "SELECT DISTINCT agent_id, domain FROM items WHERE label IS NOT NULL AND weight > 0"
        f" AND ts >= :lo AND ts < :hi AND {cond} ORDER BY agent_id, domain"
    )
    async with engine.connect() as conn:
        pairs = [
            (str(a), str(d)) for a, d in await conn.execute(sql, {"lo": start, "hi": end, **params})
        ]
    out: dict[tuple[str, str], RecalibrationResult | str] = {}
    for agent, domain in pairs:
        exact = Segment(
            agent=_literal(agent),
            domain=domain,
            tier=segment.tier,
            agent_version=segment.agent_version,
        )
        conf, y, w = await labelled_items(engine, exact, start, end)
        try:
            result = fit_isotonic(conf, y, w, min_items=min_items)
        except ValueError as exc:
            out[(agent, domain)] = str(exc)
            continue
        out[(agent, domain)] = result
        if store:
            await save_map(engine, agent, domain, result, start, end)
    return out


def _literal(agent: str) -> str:
    """``agent`` as a Segment pattern matching only itself (wildcard characters refused)."""
    if any(ch in agent for ch in "*?"):
        raise ValueError(f"agent id {agent!r} contains a wildcard character")
    return agent
