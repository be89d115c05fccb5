"""Simulated agents that ask the runtime trust gate before they answer (pure, no I/O).

A gated conversation ``k`` has two halves. :meth:`GatedTraffic.draft` is what the agent has
before it asks the gate: a user request, a tool call and its result, and the reply it is about
to send with its stated confidence ``c`` (discrete uniform over the spec's percent range). With
probability ``fabrication_rate`` the tool call failed and the draft claims it succeeded (a
fabrication the gate's ``det.authorization`` and ``det.ignored_error`` checks catch); otherwise
the draft reports what the tool result says. :meth:`GatedTraffic.conversation` builds the rest
from the gate's actual decision:

- an agent that ``obeys``: ``proceed`` sends the draft; ``revise`` sends a corrected reply (the
  fabrication removed); ``escalate`` hands over to a human (an ``escalation`` event) and the
  human answers;
- an agent that ignores the gate always sends its draft.

The truth (:meth:`GatedAgentSpec.success_probability`): an honest reply of the agent succeeds
with P = ``c`` (the agent is calibrated), a fabricated one with P = ``fabricated_success * c``,
the human with P = ``human_success``. The outcome event carries that probability and the
decision in its attributes. :func:`gate_truth` gives the exact expectations of the figures
:mod:`monitor.gate.effect` measures when the gate decides as :meth:`GatedAgentSpec.
expected_decision` says (the built-in policy: threshold 0.5, escalate below, revise on a
finding; no map fitted, so the calibrated confidence is the stated one).
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Literal

from monitor.contract.events import (
    Agent,
    AgentEvent,
    Context,
    EscalationPayload,
    MessagePayload,
    OutcomePayload,
    Payload,
    ToolCall,
    ToolResultPayload,
)
from monitor.sim.traffic import EventLog

DECISIONS = ("proceed", "revise", "escalate")
THRESHOLD = 0.5  # the built-in gate policy's threshold (monitor.gate.policy.DEFAULT_POLICY)


@dataclass(frozen=True)
class GatedAgentSpec:
    """One simulated agent that asks the gate; ``obeys`` False: it ignores the answer."""

    agent_id: str
    domain: str
    tier: Literal[1, 2, 3]
    obeys: bool
    percent_range: tuple[int, int] = (30, 99)  # stated confidence c = randint(lo, hi) / 100
    fabrication_rate: float = 0.2
    fabricated_success: float = 0.3
    human_success: float = 0.9

    def expected_decision(
        self, confidence: float, fabricated: bool, threshold: float = THRESHOLD
    ) -> str:
        """The built-in policy's decision: escalate below the threshold, else revise a
        fabrication, else proceed."""
        if confidence < threshold:
            return "escalate"
        return "revise" if fabricated else "proceed"

    def success_probability(self, confidence: float, fabricated: bool, decision: str) -> float:
        """True P(success) of the conversation given the draft and the gate's decision."""
        if self.obeys and decision == "escalate":
            return self.human_success
        if fabricated and not (self.obeys and decision == "revise"):
            return self.fabricated_success * confidence
        return confidence


def gated_agents() -> tuple[GatedAgentSpec, ...]:
    """Two agents that obey the gate and one that ignores it."""
    return (
        GatedAgentSpec("sim-gated-airline", "airline", 2, obeys=True),
        GatedAgentSpec(
            "sim-gated-retail",
            "retail",
            1,
            obeys=True,
            percent_range=(40, 99),
            fabrication_rate=0.3,
        ),
        GatedAgentSpec("sim-gated-ignores", "telecom", 2, obeys=False),
    )


@dataclass(frozen=True)
class Truth:
    """Exact expectations for one agent (shares over all its conversations)."""

    decisions: dict[str, float]
    failure_rate_all: float
    failure_rate_proceeded: float | None  # None: the gate never lets it proceed
    failures_prevented: float | None  # E[failed and stopped] / E[failed]; None: never fails
    escalation_rate: float
    ungated_failure_rate: float  # had it sent every draft


def gate_truth(spec: GatedAgentSpec, threshold: float = THRESHOLD) -> Truth:
    """The expectations of the figures of :mod:`monitor.gate.effect` for ``spec``."""
    lo, hi = spec.percent_range
    n = hi - lo + 1
    share = dict.fromkeys(DECISIONS, 0.0)
    fail_by = dict.fromkeys(DECISIONS, 0.0)
    ungated = 0.0
    for pct in range(lo, hi + 1):
        c = pct / 100
        for fabricated, pf in ((True, spec.fabrication_rate), (False, 1 - spec.fabrication_rate)):
            w = pf / n
            d = spec.expected_decision(c, fabricated, threshold)
            share[d] += w
            fail_by[d] += w * (1 - spec.success_probability(c, fabricated, d))
            ungated += w * (1 - spec.success_probability(c, fabricated, "proceed"))
    failed = sum(fail_by.values())
    return Truth(
        decisions=share,
        failure_rate_all=failed,
        failure_rate_proceeded=fail_by["proceed"] / share["proceed"] if share["proceed"] else None,
        failures_prevented=(failed - fail_by["proceed"]) / failed if failed else None,
        escalation_rate=share["escalate"],
        ungated_failure_rate=ungated,
    )


@dataclass(frozen=True)
class Draft:
    """What the agent holds before asking the gate (``history``: the earlier events)."""

    index: int
    spec: GatedAgentSpec
    conversation_id: str
    confidence: float
    fabricated: bool
    content: str
    history: list[AgentEvent]


class GatedTraffic:
    """Deterministic gated conversations: ``k`` depends only on (seed, start, k, agents,
    interval, prefix). ``conversation_id`` is ``{prefix}g{k:06d}``; conversation ``k`` starts
    at ``start + k * interval`` and its last event (the outcome) is at most 150 s later."""

    def __init__(
        self,
        seed: int,
        start: datetime,
        agents: tuple[GatedAgentSpec, ...] | None = None,
        *,
        interval: timedelta = timedelta(seconds=5),
        prefix: str | None = None,
    ) -> None:
        if start.tzinfo is None:
            raise ValueError("start must be a timezone-aware datetime")
        if interval <= timedelta(0):
            raise ValueError("interval must be positive")
        self.seed, self.start, self.interval = seed, start, interval
        self.agents = agents or gated_agents()
        run = hashlib.sha256(f"gated|{seed}|{start.isoformat()}".encode()).hexdigest()[:10]
        self.prefix = prefix if prefix is not None else f"sim-{run}-"

    def draft(self, index: int) -> Draft:
        rng = random.Random(f"gated:{self.seed}:{index}")
        spec = rng.choice(self.agents)
        c = rng.randint(*spec.percent_range) / 100
        fabricated = rng.random() < spec.fabrication_rate
        cid = f"{self.prefix}g{index:06d}"
        t0 = self.start + index * self.interval
        ref = f"R{rng.randrange(100_000):05d}"
        call = ToolCall(id=f"{cid}-call", name="cancel_reservation", arguments={"id": ref})
        failed = fabricated or rng.random() < 0.1
        ev = _Events(cid, spec, t0)
        ev.add(MessagePayload(role="user", content="Please cancel my reservation."))
        ev.add(MessagePayload(role="assistant", content=None, tool_calls=[call]))
        ev.add(
            ToolResultPayload(
                call_id=call.id,
                name=call.name,
                ok=not failed,
                content=None if failed else '{"status": "ok"}',
                error="Error: upstream timeout" if failed else None,
            ),
        )
        if fabricated or not failed:
            content = "Your reservation has been cancelled."
        else:
            content = "Sorry, I could not cancel it: the system timed out. Please try later."
        return Draft(index, spec, cid, c, fabricated, content, ev.events)

    def conversation(self, draft: Draft, decision: str) -> list[AgentEvent]:
        """The whole conversation (the draft's history first) after the gate said
        ``decision``; see the module docstring."""
        rng = random.Random(f"gated-outcome:{self.seed}:{draft.index}")
        spec = draft.spec
        ev = _Events(draft.conversation_id, spec, draft.history[-1].ts, list(draft.history))
        if spec.obeys and decision == "escalate":
            ev.add(
                EscalationPayload(
                    trigger="threshold",
                    confidence=draft.confidence,
                    reason="the trust gate escalated",
                ),
            )
        else:
            revised = spec.obeys and decision == "revise"
            content = (
                "Sorry, I could not cancel it: the system timed out. Please try later."
                if revised
                else draft.content
            )
            ev.add(
                MessagePayload(
                    role="assistant",
                    content=content,
                    confidence=draft.confidence,
                    confidence_source="verbalized",
                ),
            )
        p = spec.success_probability(draft.confidence, draft.fabricated, decision)
        success = rng.random() < p
        ev.ts += timedelta(seconds=round(rng.uniform(30.0, 120.0), 3))
        ev.add(
            OutcomePayload(success=success, reward=float(success), source="ground_truth"),
            {
                "simulated": True,
                "p_success": round(p, 4),
                "gate_decision": decision,
                "fabricated": draft.fabricated,
                "obeys": spec.obeys,
            },
        )
        return ev.events


class _Events(EventLog):
    """Appends events to one conversation, 1-3 s apart."""

    def __init__(
        self, cid: str, spec: GatedAgentSpec, ts: datetime, events: list[AgentEvent] | None = None
    ) -> None:
        agent = Agent(id=spec.agent_id, version="1.0", model="sim-llm-1")
        context = Context(domain=spec.domain, tier=spec.tier, channel="chat")
        super().__init__(cid, ts, agent, context, events)

    def add(self, payload: Payload, attributes: dict[str, Any] | None = None) -> None:
        if self.events:
            self.ts += timedelta(seconds=1.5)
        turned = isinstance(payload, MessagePayload | ToolResultPayload)
        self.append(payload, len(self.events) if turned else None, attributes)
