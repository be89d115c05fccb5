"""The report's first screen: one health level per agent, ``act``, ``watch`` or ``healthy``, with
the one reason that decided it.

Pure: plain values in (the report's calibration reports, escalation summaries, drift checks and
firing alerts), one :class:`AgentHealth` per agent out. The first rule that holds decides, most
severe first:

act
  1. a firing alert of severity ``critical`` on the agent (its rule and summary);
  2. the escalation inversion test found escalation rising with confidence;
  3. the agent's latest drift check in the range fired;
  4. ECE at least :data:`ACT_ECE` even at the low end of its 95% interval (enough labelled
     items that it is not noise: a short run's ECE is biased upwards).
watch
  5. any other firing alert on the agent;
  6. a drift check fired earlier in the range (not the latest one);
  7. ECE at least :data:`WATCH_ECE` (point estimate) on enough labelled items;
  8. too few labelled items to judge calibration.
healthy
  otherwise: the ECE and item count it rests on.

Agents are ordered act, watch, healthy, then by agent id.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from monitor.analytics.calibration import CalibrationReport

HealthLevel = Literal["act", "watch", "healthy"]
ALL = "*"  # the all-agents aggregate of the calibration reports (not an agent)
ACT_ECE = 0.10
WATCH_ECE = 0.05
_ORDER = {"act": 0, "watch": 1, "healthy": 2}


@dataclass(frozen=True)
class AgentHealth:
    """One agent's health level and the reason for it."""

    agent: str
    level: HealthLevel
    reason: str


def _fmt(x: float) -> str:
    return f"{x:.3f}"


def health_for(
    agent: str,
    calibration: CalibrationReport | None,
    inverted: bool,
    drift: Sequence[Mapping[str, Any]],
    alerts: Sequence[Mapping[str, Any]],
) -> AgentHealth:
    """The health of one agent (see the module docstring). ``drift`` are the agent's checks
    (dicts with ``recent_to``, ``fired``, ``fired_tests``; the latest are those with the newest
    ``recent_to``, one per segment); ``alerts`` its firing
    alerts (dicts with ``severity``, ``rule``, ``summary``)."""
    critical = [a for a in alerts if a.get("severity") == "critical"]
    if critical:
        a = critical[0]
        return AgentHealth(agent, "act", f"critical alert {a['rule']}: {a['summary']}")
    if inverted:
        return AgentHealth(
            agent, "act", "escalates more often when it is more confident (inversion test)"
        )
    newest = max((c["recent_to"] for c in drift), default=None)
    latest_fired = [c for c in drift if c["recent_to"] == newest and c.get("fired")]
    if latest_fired:
        tests = sorted({t for c in latest_fired for t in (c.get("fired_tests") or [])})
        return AgentHealth(
            agent,
            "act",
            f"drift in the latest check (to {newest:%H:%M} UTC): {', '.join(tests) or 'fired'}",
        )
    judged = calibration is not None and calibration.meaningful
    low = calibration.ece_ci[0] if calibration is not None else float("nan")
    if judged and calibration is not None and low >= ACT_ECE:  # sure, not just noise
        return AgentHealth(
            agent,
            "act",
            f"ECE {_fmt(calibration.ece)}, at least {_fmt(low)} "
            f"(95% interval; act at {ACT_ECE:g}): confidence "
            f"{_fmt(calibration.mean_confidence)} vs accuracy "
            f"{_fmt(calibration.accuracy)}",
        )
    if alerts:
        a = alerts[0]
        return AgentHealth(agent, "watch", f"{a['severity']} alert {a['rule']}: {a['summary']}")
    fired = [c for c in drift if c.get("fired")]
    if fired:
        return AgentHealth(
            agent,
            "watch",
            f"drift fired at {fired[-1]['recent_to']:%H:%M} UTC, not in the latest check",
        )
    if judged and calibration is not None and calibration.ece >= WATCH_ECE:
        return AgentHealth(
            agent,
            "watch",
            f"ECE {_fmt(calibration.ece)} [{_fmt(low)}, "
            f"{_fmt(calibration.ece_ci[1])}] (watch at {WATCH_ECE:g}, act when the "
            f"interval is above {ACT_ECE:g})",
        )
    if calibration is None or not calibration.meaningful:
        why = "no labelled items" if calibration is None else (calibration.reason or "too few")
        return AgentHealth(agent, "watch", f"calibration cannot be judged yet: {why}")
    return AgentHealth(
        agent,
        "healthy",
        f"ECE {_fmt(calibration.ece)} on {calibration.count:,} items; no firing alert, no drift",
    )


def agents_health(
    calibration: Mapping[str, CalibrationReport],
    inverted: Mapping[str, bool],
    drift: Sequence[Mapping[str, Any]],
    alerts: Sequence[Mapping[str, Any]],
) -> list[AgentHealth]:
    """The health of every agent seen in any input (see the module docstring)."""
    agents = {a for a in calibration if a != ALL} | set(inverted)
    agents |= {str(c["agent_id"]) for c in drift if c.get("agent_id")}
    agents |= {str(a["agent_id"]) for a in alerts if a.get("agent_id")}
    out = [
        health_for(
            agent,
            calibration.get(agent),
            inverted.get(agent, False),
            [c for c in drift if c.get("agent_id") == agent],
            [a for a in alerts if a.get("agent_id") == agent],
        )
        for agent in agents
    ]
    return sorted(out, key=lambda v: (_ORDER[v.level], v.agent))
