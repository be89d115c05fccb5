"""The gated part of ``monitor up``: simulated agents that ask the running worker's gate.

Contract:
- :func:`plan_gated` spreads about a third as many gated conversations as the plan has
  (:mod:`monitor.sim.gated`, at least 30) over the plan's simulated span, inside the plan's
  scope (their ids start with ``plan.prefix``), the last event not after ``now``.
- :func:`ask_gate` sends each conversation's draft to ``POST /v1/gate`` (``concurrency`` at a
  time) and returns the decision each got; a gate that cannot be reached or refuses makes the
  agent apply its own fail-open choice (``proceed``) and is counted in ``unanswered``.
- :func:`send_gated` then sends the whole conversations (built from those decisions) through
  the SDK emitter at ``rate`` events/s. The gate's own decision events are published by the
  worker.
- :func:`ask_and_send` does both within ``seconds``: ``monitor up`` runs it beside the main
  traffic (asking while the main traffic flows, then sending at the rate that ends with it),
  so the demo's duration does not change.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from monitor.contract.events import Agent, AgentEvent
from monitor.sim.gated import Draft, GatedTraffic
from monitor.stack.demo import TrafficPlan

LAST_EVENT_S = 160  # a gated conversation's last event is at most this after its start


@dataclass
class GatedRun:
    """The gated conversations of one run and, once asked, the gate's decisions."""

    traffic: GatedTraffic
    conversations: int
    decisions: dict[int, str] = field(default_factory=dict)
    unanswered: int = 0

    def drafts(self) -> list[Draft]:
        return [self.traffic.draft(k) for k in range(self.conversations)]

    @property
    def events(self) -> int:
        """Events :func:`send_gated` sends (known once the gate answered)."""
        return sum(
            len(self.traffic.conversation(d, self.decisions[d.index])) for d in self.drafts()
        )


def plan_gated(plan: TrafficPlan, seed: int, now: datetime) -> GatedRun:
    """See the module docstring."""
    n = max(30, plan.conversations // 3)
    start = plan.simulator.start
    span = max(timedelta(seconds=n), now - timedelta(seconds=LAST_EVENT_S) - start)
    if start + span + timedelta(seconds=LAST_EVENT_S) > now:
        start = now - span - timedelta(seconds=LAST_EVENT_S)
    traffic = GatedTraffic(seed, start, interval=span / n, prefix=plan.prefix)
    return GatedRun(traffic, n)


def draft_request(d: Draft) -> dict[str, Any]:
    """The gate request body of draft ``d`` (its conversation id is the request id)."""
    from monitor.sdk.gate_client import gate_body

    return gate_body(
        d.conversation_id,
        d.content,
        agent=Agent(id=d.spec.agent_id),
        confidence=d.confidence,
        domain=d.spec.domain,
        tier=d.spec.tier,
        history=d.history,
        request_id=d.conversation_id,
    )


async def ask_gate(
    run: GatedRun, web_url: str, token: str | None, concurrency: int = 8
) -> GatedRun:
    """Ask the gate about every draft (see the module docstring); fills ``run.decisions``."""
    from monitor.core.errors import GateError, GateUnavailable
    from monitor.sdk.gate_client import GateClient

    client = GateClient(web_url, token=token, timeout=10.0)
    gate = asyncio.Semaphore(concurrency)

    async def one(d: Draft) -> None:
        body = draft_request(d)
        async with gate:
            try:
                run.decisions[d.index] = (await client.ask(body)).decision
            except (GateError, GateUnavailable):
                run.decisions[d.index] = "proceed"  # the simulated agents fail open
                run.unanswered += 1

    try:
        await asyncio.gather(*(one(d) for d in run.drafts()))
    finally:
        await client.aclose()
    return run


async def send_gated(
    run: GatedRun,
    bootstrap: str,
    topic: str,
    *,
    idempotent: bool,
    rate: float,
    on_event: Callable[[], None] = lambda: None,
) -> list[AgentEvent]:
    """Send the gated conversations in ts order at ``rate`` events/s; returns the events sent.

    Raises:
        monitor.sdk.EmitterError: the broker is unreachable or deliveries failed.
    """
    from monitor.sdk import EventEmitter

    events = sorted(
        (e for d in run.drafts() for e in run.traffic.conversation(d, run.decisions[d.index])),
        key=lambda e: e.ts,
    )
    emitter = EventEmitter(bootstrap, topic, idempotent=idempotent)
    await emitter.start()
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    try:
        for i, event in enumerate(events):
            delay = t0 + i / rate - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            await emitter.send(event)
            on_event()
        await emitter.flush()
    finally:
        await emitter.close()
    return events


async def ask_and_send(
    run: GatedRun,
    web_url: str,
    token: str | None,
    bootstrap: str,
    topic: str,
    *,
    idempotent: bool,
    seconds: float,
    on_event: Callable[[], None] = lambda: None,
    on_total: Callable[[int], None] = lambda _n: None,
) -> tuple[list[AgentEvent], float]:
    """Ask the gate, then send the conversations so that both end within about ``seconds``
    (at least 1 s of sending); returns the events sent and the seconds spent asking.
    ``on_total`` gets the number of events to send once the decisions are known."""
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    await ask_gate(run, web_url, token)
    asked = loop.time() - t0
    n = run.events
    on_total(n)
    rate = n / max(1.0, seconds - asked)
    sent = await send_gated(
        run, bootstrap, topic, idempotent=idempotent, rate=rate, on_event=on_event
    )
    return sent, asked
