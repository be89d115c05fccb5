"""The simulated agents of :mod:`monitor.sim.traffic` and their true behaviour (pure, no I/O).

Each simulated agent is an :class:`AgentSpec`; its true behaviour is readable from the spec
(``success_probability``, ``escalation_probability``), so tests and analytics can check that the
monitor recovers it. Behaviours:

- ``calibrated``: P(success) == stated confidence.
- ``overconfident``: P(success) == confidence - ``overconfidence`` (default 0.25), floored at 0.
- ``drifting``: calibrated for conversations starting before ``change_point``, overconfident
  from it on until ``recovery_point`` (if set), calibrated again after it
  (``change_point=None``: never drifts).
- ``inverted``: calibrated, but its escalation probability *rises* with confidence; every other
  agent escalates more at low confidence.

Everything here is re-exported from :mod:`monitor.sim.traffic`.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Literal

Behaviour = Literal["calibrated", "overconfident", "drifting", "inverted"]


@dataclass(frozen=True)
class AgentSpec:
    """One simulated agent and its true (constructed) behaviour.

    ``confidence_range`` bounds the conversation's minimum stated confidence (uniform, rounded
    to 2 decimals); other replies in the conversation state up to 0.15 more. Escalation
    probability is ``escalation_base + escalation_slope * (1 - c)`` for normal agents and
    ``escalation_base + escalation_slope * c`` for ``inverted`` ones (``c`` = min confidence).
    """

    agent_id: str
    behaviour: Behaviour
    domain: str
    tier: Literal[1, 2, 3]
    model: str = "sim-llm-1"
    version: str = "1.0"
    confidence_range: tuple[float, float] = (0.3, 0.99)
    overconfidence: float = 0.25
    change_point: datetime | None = None
    recovery_point: datetime | None = None
    escalation_base: float = 0.05
    escalation_slope: float = 0.45
    tool_failure_rate: float = 0.1
    weight: float = 1.0

    def __post_init__(self) -> None:
        lo, hi = self.confidence_range
        if not 0.0 <= lo <= hi <= 1.0:
            raise ValueError(f"{self.agent_id}: confidence_range must satisfy 0 <= lo <= hi <= 1")
        if self.weight <= 0:
            raise ValueError(f"{self.agent_id}: weight must be > 0")
        for name in ("change_point", "recovery_point"):
            point = getattr(self, name)
            if point is not None and point.tzinfo is None:
                raise ValueError(f"{self.agent_id}: {name} must be timezone-aware")

    def overconfident_at(self, at: datetime) -> bool:
        """True if the agent's success falls short of its confidence for conversations at ``at``."""
        if self.behaviour == "overconfident":
            return True
        if self.behaviour != "drifting" or self.change_point is None or at < self.change_point:
            return False
        return self.recovery_point is None or at < self.recovery_point

    def success_probability(self, confidence: float, at: datetime) -> float:
        """True P(success) given the conversation's minimum confidence and start time ``at``."""
        gap = self.overconfidence if self.overconfident_at(at) else 0.0
        return min(1.0, max(0.0, confidence - gap))

    def escalation_probability(self, confidence: float) -> float:
        """True P(escalation) given the conversation's minimum confidence, in [0, 1]."""
        x = confidence if self.behaviour == "inverted" else 1.0 - confidence
        return min(1.0, max(0.0, self.escalation_base + self.escalation_slope * x))


def default_agents(
    change_point: datetime | None = None, recovery_point: datetime | None = None
) -> tuple[AgentSpec, ...]:
    """Four agents across domains and tiers: calibrated, overconfident, drifting, inverted.

    ``change_point`` (aware) is when the drifting agent turns overconfident; ``None``: never.
    ``recovery_point``: when it is calibrated again; ``None``: never.
    """
    return (
        AgentSpec("sim-airline-calibrated", "calibrated", "airline", 2),
        AgentSpec(
            "sim-retail-overconfident", "overconfident", "retail", 1, confidence_range=(0.6, 0.99)
        ),
        AgentSpec(
            "sim-telecom-drifting",
            "drifting",
            "telecom",
            3,
            confidence_range=(0.5, 0.99),
            change_point=change_point,
            recovery_point=recovery_point,
        ),
        AgentSpec("sim-airline-inverted", "inverted", "airline", 1),
    )
