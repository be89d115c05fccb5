"""Gated traffic for the dashboard and report tests: simulated agents that asked the gate.

Each conversation of :class:`monitor.sim.gated.GatedTraffic` is decided by the shipped
``monitor.gate.decide`` with the built-in policy on the draft and its history, exactly as the
gate process's ``POST /v1/gate`` would; the decision event is the one the gate publishes
(``decision_event``), stamped a second after the draft's last event. Every ``SLOW``-th
conversation is decided with a clock that runs 60 ms per reading, so its checks run past the
50 ms deadline and the rule's fail-open choice decides (``degraded``), as under load. With
``shadow_every``, every such conversation is decided by the same policy in ``mode: shadow``:
the decision event records the would-be decision with ``enforced: false`` and the agent,
answered ``proceed``, sends its own draft (its outcome is what enforcing would have changed).
"""

from __future__ import annotations

import itertools
import json
from datetime import datetime, timedelta

from monitor.contract.events import AgentEvent
from monitor.gate.checks import CheckSet
from monitor.gate.decide import decide, decision_event
from monitor.gate.policy import DEFAULT_POLICY
from monitor.gate.request import parse_gate_request
from monitor.sim.gated import Draft, GatedTraffic
from monitor.stack.demo_gate import draft_request

SLOW = 10
SHADOW_POLICY = DEFAULT_POLICY.model_copy(
    update={"rules": tuple(r.model_copy(update={"mode": "shadow"}) for r in DEFAULT_POLICY.rules)}
)


class Clock:
    """A timer that advances ``step`` seconds per reading."""

    def __init__(self, step: float) -> None:
        self.step, self.readings = step, itertools.count()

    def __call__(self) -> float:
        return next(self.readings) * self.step


def request_bytes(d: Draft) -> bytes:
    return json.dumps(draft_request(d)).encode()


def gated_events(
    start: datetime,
    n: int,
    interval: timedelta = timedelta(seconds=30),
    seed: int = 3,
    ungated_every: int = 0,
    shadow_every: int = 0,
) -> tuple[list[AgentEvent], dict[str, str]]:
    """The events of ``n`` gated conversations from ``start`` (with their decision events)
    and each conversation's decision. With ``ungated_every`` > 0, every such conversation
    does not ask the gate (no decision event; the agent sends its draft): the ungated
    baseline of the same agents. With ``shadow_every`` > 0, every such conversation (of
    those that ask) is decided in shadow mode (module docstring); its decision is the
    would-be one."""
    traffic = GatedTraffic(seed, start, interval=interval, prefix="gated-")
    checks = CheckSet()
    events: list[AgentEvent] = []
    decisions: dict[str, str] = {}
    for k in range(n):
        d = traffic.draft(k)
        if ungated_every and k % ungated_every == ungated_every - 1:
            events += traffic.conversation(d, "proceed")
            continue
        req = parse_gate_request(request_bytes(d), max_body_bytes=10**7, max_content_chars=10**5)
        now = d.history[-1].ts + timedelta(seconds=1)
        clock = Clock(0.06 if k % SLOW == SLOW - 1 else 0.0005)
        shadow = bool(shadow_every) and k % shadow_every == 0
        decision = decide(
            req,
            SHADOW_POLICY if shadow else DEFAULT_POLICY,
            {},
            checks,
            event_id=f"gate:{d.conversation_id}",
            now=now,
            timer=clock,
        )
        decisions[d.conversation_id] = decision.payload.decision
        events += traffic.conversation(d, "proceed" if shadow else decision.payload.decision)
        events.append(decision_event(req, decision, now))
    return events, decisions
