"""Thresholds from the threshold advisor, per policy rule x agent x domain (pure).

A rule with ``threshold: {advisor: {keep|budget|target ...}, fallback: 0.6}`` takes the cut
the advisor (:func:`monitor.analytics.advisor.advise`, same question, same answer) gives on the
conversations that rule governs: those whose first matching rule it is, that started in the
last ``window_days``, with a minimum assistant confidence and a positive sampling weight. The
confidences go through the same isotonic map the gate applies to a request (agent x domain,
else the agent's all-domains map), so the cut compares with the calibrated confidence.

The worker computes the cuts off the request path (:mod:`monitor.gate.state`) from rows
grouped by confidence (:class:`ConfidenceGroup`), so the work is linear in the number of
distinct confidences, and holds them in memory; :func:`advised_threshold` reads them per
request. Until the advisor has ``min_conversations`` conversations, or when no cut answers the
question, the rule's ``fallback`` applies and ``threshold_source`` says why.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime

import numpy as np
import numpy.typing as npt

from monitor.gate.policy import AdvisorSpec, GatePolicy, GateRule

FloatArray = npt.NDArray[np.float64]

_EPS = 1e-12  # as monitor.analytics.advisor


@dataclass(frozen=True)
class ConfidenceGroup:
    """Conversations of one agent/domain/tier sharing a minimum confidence: how many, their
    total weight, the weight of those with an outcome, and of those that failed."""

    agent_id: str
    domain: str  # "" = none given
    tier: int  # 0 = none given
    confidence: float
    count: int
    weight: float
    weight_known: float
    weight_failed: float


@dataclass(frozen=True)
class AdvisorCut:
    """The advisor's answer for one rule x agent x domain: ``threshold`` None means the
    fallback applies (``reason`` says why); ``n`` conversations with a confidence."""

    threshold: float | None
    n: int
    reason: str
    question: str
    at: datetime


@dataclass(frozen=True)
class AdvisorCuts:
    """Every cut computed at ``at`` (None: not computed yet), by (rule index, agent, domain)."""

    at: datetime | None = None
    cuts: Mapping[tuple[int, str, str], AdvisorCut] = field(default_factory=dict)


def cut(
    conf: FloatArray,
    weight: FloatArray,
    known: FloatArray,
    failed: FloatArray,
    spec: AdvisorSpec,
) -> tuple[float | None, str]:
    """The advisor's threshold on grouped data (one entry per distinct confidence, any order):
    the same candidates and choice as :func:`monitor.analytics.advisor.advise` (a cut at
    ``t`` escalates the confidences ``< t``), in O(n log n). Returns (threshold, reason)."""
    if conf.size == 0:
        return None, "no conversation with a confidence"
    order = np.argsort(conf, kind="stable")
    c, w, k, f = conf[order], weight[order], known[order], failed[order]
    total = float(w.sum())
    escalated = (np.cumsum(w) - w) / total  # weight strictly below each candidate
    kept_known = np.cumsum(k[::-1])[::-1]
    kept_failed = np.cumsum(f[::-1])[::-1]
    ok = np.ones(c.size, dtype=bool)
    limit = 1.0 - spec.keep if spec.keep is not None else spec.budget
    if limit is not None:
        ok &= escalated <= limit + _EPS
    if spec.target is not None:
        with np.errstate(divide="ignore", invalid="ignore"):
            residual = np.where(kept_known > 0, kept_failed / kept_known, np.inf)
        ok &= residual <= spec.target + _EPS
    if not ok.any():
        return None, f"no cut meets {spec.question()}"
    idx = np.flatnonzero(ok)
    return float(c[idx[-1] if spec.target is None else idx[0]]), "ok"


def compute_cuts(
    policy: GatePolicy,
    groups: Iterable[ConfidenceGroup],
    calibrate: Callable[[str, str | None, FloatArray], FloatArray],
    now: datetime,
    window_days: float | None = None,
) -> AdvisorCuts:
    """The cut of every advisor rule x agent x domain found in ``groups`` (each group goes to
    the first rule matching its agent/domain/tier; groups of other rules are ignored).
    ``calibrate(agent, domain, confidences)`` is what the gate applies to a request's stated
    confidence (the held isotonic map; identity without one). With ``window_days``, only
    the rules asking over that window (``groups`` cover it)."""
    rule_of: dict[tuple[str, str, int], int | None] = {}
    per_key: dict[tuple[int, str, str], list[ConfidenceGroup]] = {}
    for g in groups:
        segment = (g.agent_id, g.domain, g.tier)
        if segment not in rule_of:
            rule_of[segment] = _rule_index(policy, g, window_days)
        index = rule_of[segment]
        if index is not None:
            per_key.setdefault((index, g.agent_id, g.domain), []).append(g)
    out: dict[tuple[int, str, str], AdvisorCut] = {}
    for key, found in per_key.items():
        spec = policy.rules[key[0]].advisor
        assert spec is not None
        n = sum(g.count for g in found)
        if n < spec.min_conversations:
            out[key] = AdvisorCut(None, n, "not enough data", spec.question(), now)
            continue
        raw = np.array([g.confidence for g in found], dtype=np.float64)
        conf = np.clip(calibrate(key[1], key[2] or None, raw), 0.0, 1.0)
        sums = np.array([(g.weight, g.weight_known, g.weight_failed) for g in found])
        uniq, inverse = np.unique(conf, return_inverse=True)  # a map can merge confidences
        w, k, f = (
            np.asarray(
                np.bincount(inverse, weights=sums[:, j], minlength=uniq.size), dtype=np.float64
            )
            for j in range(3)
        )
        threshold, reason = cut(uniq, w, k, f, spec)
        out[key] = AdvisorCut(threshold, n, reason, spec.question(), now)
    return AdvisorCuts(now, out)


def _rule_index(policy: GatePolicy, g: ConfidenceGroup, window_days: float | None) -> int | None:
    """The index of the first rule matching the group, when it is an advisor rule (over
    ``window_days`` when given)."""
    domain, tier = g.domain or None, g.tier or None
    for i, rule in enumerate(policy.rules):
        if rule.matches(g.agent_id, domain, tier):
            spec = rule.advisor
            if spec is None or (window_days is not None and spec.window_days != window_days):
                return None
            return i
    return None


def advised_threshold(
    cuts: AdvisorCuts | None, index: int, rule: GateRule, agent_id: str, domain: str | None
) -> tuple[float, str]:
    """(threshold, threshold_source) of an advisor rule for one request, e.g. ``advisor
    keep=0.8 over 7d (n=1234) at 2026-11-23T20:00:00+00:00`` or ``policy fallback (advisor:
    not enough data: n=12)``."""
    spec = rule.advisor
    assert spec is not None
    if cuts is None or cuts.at is None:
        return rule.fixed_threshold, "policy fallback (advisor: not computed yet)"
    found = cuts.cuts.get((index, agent_id, domain or ""))
    if found is None:
        return rule.fixed_threshold, "policy fallback (advisor: not enough data: n=0)"
    if found.threshold is None:
        return rule.fixed_threshold, f"policy fallback (advisor: {found.reason}: n={found.n})"
    at = found.at.isoformat(timespec="seconds")
    return found.threshold, f"advisor {found.question} (n={found.n}) at {at}"
