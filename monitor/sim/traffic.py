"""Deterministic synthetic agent traffic whose reliability is known by construction (pure).

Each simulated agent is an :class:`AgentSpec`; its true behaviour is readable from the spec
(``success_probability``, ``escalation_probability``), so tests and analytics can check that the
monitor recovers it. The specs and their behaviours (calibrated, overconfident, drifting,
inverted) live in :mod:`monitor.sim.agents` and are re-exported here.

A conversation: a user message; 1-3 assistant steps, each optionally a tool call (an assistant
message with ``tool_calls``, no confidence) and its ``tool_result`` (failing with the agent's
``tool_failure_rate``), then an assistant reply with ``confidence`` and
``confidence_source="verbalized"``; user follow-ups between steps; maybe an ``escalation``;
maybe a ``feedback`` (``feedback_rate``); finally an ``outcome`` (source ``ground_truth``) drawn
with P = ``success_probability(min assistant confidence, conversation start)`` (docs/design.md,
"Metric definitions", conversation-level items), stamped 30-600 s after the last message.

Determinism: conversation ``k`` depends only on (seed, start, k, agents, options): it uses its
own ``random.Random(f"{seed}:{k}")``. Conversation ``k`` starts at ``start + k * interval``;
``conversation_id`` is ``sim-{run}-{k:06d}`` with ``run`` a hash of (seed, start), and
``event_id`` is ``{conversation_id}:{position}``. No global random state, no I/O, no clock.
"""

from __future__ import annotations

import hashlib
import heapq
import random
from collections.abc import Iterator, Sequence
from datetime import datetime, timedelta
from typing import Any, Literal

from monitor.contract.events import (
    Agent,
    AgentEvent,
    Context,
    EscalationPayload,
    FeedbackPayload,
    MessagePayload,
    OutcomePayload,
    Payload,
    ToolCall,
    ToolResultPayload,
)
from monitor.sim.agents import AgentSpec as AgentSpec
from monitor.sim.agents import Behaviour as Behaviour
from monitor.sim.agents import default_agents as default_agents

_TOOLS = {
    "airline": ("get_reservation_details", "search_direct_flight", "cancel_reservation"),
    "retail": ("get_order_details", "return_delivered_order_items", "find_user_id_by_email"),
    "telecom": ("get_customer_by_phone", "get_bills_for_customer", "suspend_line"),
}
_ASKS = {
    "airline": (
        "I need to change my flight.",
        "Can I cancel my reservation?",
        "My flight was delayed, can I get compensation?",
    ),
    "retail": ("I want to return an item.", "Where is my order?", "Can I exchange my shoes?"),
    "telecom": ("My data is not working.", "Why is my bill so high?", "Please suspend my line."),
}
_FOLLOW_UPS = ("Okay, what else do you need?", "Yes, please go ahead.", "Is that everything?")
_TOOL_ERRORS = ("Error: upstream timeout", "Error: record not found", "Error: invalid arguments")


class Simulator:
    """Deterministic traffic generator (see the module docstring).

    Args:
        seed: any int; the same seed, start, agents and options give identical events.
        start: aware datetime at which conversation 0 starts.
        agents: the agent specs (default: ``default_agents(change_point=start + 1 h)``).
        interval: simulated time between consecutive conversation starts (> 0).
        feedback_rate: probability that a conversation gets a feedback event.
        tool_call_rate: probability that an assistant step starts with a tool call.

    Raises:
        ValueError: naive ``start``, non-positive ``interval``, no agents, rates outside [0, 1].
    """

    def __init__(
        self,
        seed: int,
        start: datetime,
        agents: Sequence[AgentSpec] | None = None,
        *,
        interval: timedelta = timedelta(seconds=5),
        feedback_rate: float = 0.1,
        tool_call_rate: float = 0.6,
    ) -> None:
        if start.tzinfo is None:
            raise ValueError("start must be a timezone-aware datetime")
        if interval <= timedelta(0):
            raise ValueError("interval must be positive")
        if not (0.0 <= feedback_rate <= 1.0 and 0.0 <= tool_call_rate <= 1.0):
            raise ValueError("feedback_rate and tool_call_rate must be in [0, 1]")
        self.seed = seed
        self.start = start
        self.agents = tuple(agents if agents is not None else default_agents(start + _HOUR))
        if not self.agents:
            raise ValueError("at least one agent is needed")
        self.interval = interval
        self.feedback_rate = feedback_rate
        self.tool_call_rate = tool_call_rate
        digest = hashlib.sha256(f"{seed}|{start.isoformat()}".encode()).hexdigest()
        self.run_id = digest[:10]
        self._weights = [a.weight for a in self.agents]

    @property
    def agents_by_id(self) -> dict[str, AgentSpec]:
        """The specs keyed by ``agent_id`` (to look up the truth behind an event's agent)."""
        return {a.agent_id: a for a in self.agents}

    def conversation_start(self, index: int) -> datetime:
        """When conversation ``index`` (>= 0) starts: ``start + index * interval``."""
        return self.start + index * self.interval

    def conversations(self, n: int | None = None) -> Iterator[list[AgentEvent]]:
        """Conversations ``0 .. n-1`` in order, each as its events in ts order (None: endless)."""
        index = 0
        while n is None or index < n:
            yield self.conversation(index)
            index += 1

    def events(self, n: int | None = None) -> Iterator[AgentEvent]:
        """The events of the first ``n`` conversations merged in global ts order.

        Ties keep conversation order, so each conversation's events stay in their own order.
        Outcomes therefore arrive after later conversations' messages, as late labels do.
        """
        heap: list[tuple[datetime, int, int, AgentEvent]] = []
        for index, conv in enumerate(self.conversations(n)):
            first = conv[0].ts
            while heap and heap[0][0] < first:
                yield heapq.heappop(heap)[3]
            for pos, event in enumerate(conv):
                heapq.heappush(heap, (event.ts, index, pos, event))
        while heap:
            yield heapq.heappop(heap)[3]

    def conversation(self, index: int) -> list[AgentEvent]:
        """The events of conversation ``index`` (>= 0), strictly increasing in ts."""
        if index < 0:
            raise ValueError("index must be >= 0")
        rng = random.Random(f"{self.seed}:{index}")
        spec = rng.choices(self.agents, weights=self._weights)[0]
        return _Conversation(self, spec, index, rng).build()


_HOUR = timedelta(hours=1)


class EventLog:
    """The events of one simulated conversation, in order: the n-th has id ``<cid>:<n>``, and
    each is stamped with the log's ``ts`` at the time, its agent and its context."""

    def __init__(
        self,
        cid: str,
        ts: datetime,
        agent: Agent,
        context: Context,
        events: list[AgentEvent] | None = None,
    ) -> None:
        self.cid, self.ts, self.agent, self.context = cid, ts, agent, context
        self.events = events or []

    def append(
        self, payload: Payload, turn: int | None, attributes: dict[str, Any] | None = None
    ) -> None:
        """Add the next event: the one carrying ``payload``."""
        self.events.append(
            AgentEvent.of(
                payload,
                event_id=f"{self.cid}:{len(self.events)}",
                ts=self.ts,
                conversation_id=self.cid,
                agent=self.agent,
                context=self.context,
                turn=turn,
                attributes=attributes,
            )
        )


class _Conversation(EventLog):
    """Builds one conversation; all randomness comes from ``rng`` in a fixed order."""

    def __init__(self, sim: Simulator, spec: AgentSpec, index: int, rng: random.Random) -> None:
        self.sim, self.spec, self.rng = sim, spec, rng
        self.cid = f"sim-{sim.run_id}-{index:06d}"
        self.t0 = sim.conversation_start(index)
        self.turn = 0
        agent = Agent(id=spec.agent_id, version=spec.version, model=spec.model)
        context = Context(
            domain=spec.domain,
            tier=spec.tier,
            channel="chat",
            segment=f"{spec.domain}-t{spec.tier}",
        )
        super().__init__(self.cid, self.t0, agent, context)

    def later(self, lo: float, hi: float) -> None:
        self.ts += timedelta(seconds=round(self.rng.uniform(lo, hi), 3))

    def message(self, role: Literal["assistant", "user"], **fields: Any) -> None:
        self.append(MessagePayload(role=role, **fields), self.turn)
        self.turn += 1

    def build(self) -> list[AgentEvent]:
        rng, spec = self.rng, self.spec
        lo, hi = spec.confidence_range
        base = round(rng.uniform(lo, hi), 2)
        steps = rng.randint(1, 3)
        lowest = rng.randrange(steps)
        confs = [
            base if i == lowest else min(1.0, round(base + rng.uniform(0, 0.15), 2))
            for i in range(steps)
        ]
        self.message("user", content=rng.choice(_ASKS.get(spec.domain, _ASKS["airline"])))
        for step, conf in enumerate(confs):
            if step:
                self.later(3.0, 20.0)
                self.message("user", content=rng.choice(_FOLLOW_UPS))
            if rng.random() < self.sim.tool_call_rate:
                self.tool_step(step)
            self.later(0.5, 3.0)
            self.message(
                "assistant",
                content=f"Here is what I found (confidence {conf:.2f}).",
                confidence=conf,
                confidence_source="verbalized",
            )
        last_turn = self.turn - 1
        if rng.random() < spec.escalation_probability(base):
            self.later(0.05, 0.5)
            trigger: Literal["agent", "threshold"] = (
                "threshold" if base < 0.5 and spec.behaviour != "inverted" else "agent"
            )
            self.append(
                EscalationPayload(
                    trigger=trigger, reason="handing over to a human agent", confidence=base
                ),
                last_turn,
            )
        p = spec.success_probability(base, self.t0)
        success = rng.random() < p
        last = self.ts
        if rng.random() < self.sim.feedback_rate:
            self.later(5.0, 25.0)
            score = rng.uniform(0.2, 1.0) if success else rng.uniform(-1.0, 0.0)
            self.append(FeedbackPayload(score=round(score, 2), source="thumbs"), None)
        self.ts = last
        self.later(30.0, 600.0)
        self.append(
            OutcomePayload(success=success, reward=1.0 if success else 0.0, source="ground_truth"),
            None,
            {"simulated": True, "p_success": round(p, 4), "behaviour": spec.behaviour},
        )
        return self.events

    def tool_step(self, step: int) -> None:
        rng = self.rng
        tools = _TOOLS.get(self.spec.domain, _TOOLS["airline"])
        call = ToolCall(
            id=f"{self.cid}-call{step}",
            name=rng.choice(tools),
            arguments={"id": f"R{rng.randrange(100_000):05d}"},
        )
        self.later(0.5, 3.0)
        self.message("assistant", content=None, tool_calls=[call])
        self.later(0.05, 0.5)
        ok = rng.random() >= self.spec.tool_failure_rate
        error = None if ok else rng.choice(_TOOL_ERRORS)
        self.append(
            ToolResultPayload(
                call_id=call.id,
                name=call.name,
                ok=ok,
                content='{"status": "ok"}' if ok else None,
                error=error,
            ),
            self.turn,
        )
        self.turn += 1
