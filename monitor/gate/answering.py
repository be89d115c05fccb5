"""One gate's answering path: the gate process's (``monitor gate serve``).

:class:`GateAnswerer` takes a request's headers, peer and body reader (no web framework: the
servers adapt their own request objects), reads, authorizes and admits it
(:func:`receive_gate`), decides it from the maps and policy held in :class:`GateState`
(:func:`decide_gate`), awaits the rule's inline LLM check when it has one
(:func:`finish_gate`), counts the answer on ``/metrics`` and hands the decision event to the
:class:`DecisionOutbox` in a task of its own: the answer never waits for the broker or the
disk buffer. The caller answers with the returned :class:`GateReply` (its status, headers and
``body``) and, on close, :meth:`GateAnswerer.drop_pending` after the outbox is closed.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from monitor.auth.admission import Authorize
from monitor.auth.authorizer import Grant
from monitor.config import Settings
from monitor.contract.events import AgentEvent
from monitor.core.clock import Clock
from monitor.core.http_body import ReadChunk
from monitor.core.http_guard import Guard
from monitor.gate.checks import CheckStates
from monitor.gate.decision_outbox import DecisionOutbox
from monitor.gate.endpoint import GateLimits, GateReply, decide_gate, finish_gate, receive_gate
from monitor.gate.request import HistoryCache
from monitor.gate.state import GateState
from monitor.telemetry.ops_metrics import OpsMetrics

GATE = "/v1/gate"


def gate_limits(settings: Settings) -> GateLimits:
    """The gate's request limits from ``settings``: without a ``gate_token``, loopback
    callers need no credential."""
    return GateLimits(
        settings.gate_max_body_bytes,
        settings.gate_max_content_chars,
        settings.http_read_timeout_s,
        settings.http_max_inflate_ratio,
        loopback_open=not settings.gate_token,
    )


@dataclass
class GateAnswerer:
    """The answering path of one gate (see the module docstring). ``history`` and
    ``check_states`` hold the recent conversations' validated history and the inline checks'
    state over it; ``pending`` the decision events being handed to the outbox."""

    state: GateState
    outbox: DecisionOutbox
    limits: GateLimits
    metrics: OpsMetrics
    clock: Clock
    authorize: Authorize
    guard: Guard
    history: HistoryCache = field(default_factory=HistoryCache)
    check_states: CheckStates = field(default_factory=CheckStates)
    pending: set[asyncio.Task[None]] = field(default_factory=set)
    answer_counters: dict[str, Any] = field(default_factory=dict)  # result -> labelled counter

    async def answer(
        self, headers: Mapping[str, str], peer: str | None, read_chunk: ReadChunk
    ) -> GateReply:
        """The reply to one ``POST /v1/gate``; 4xx counted per status, the decision event
        (if any) handed to the outbox after the answer."""
        started = time.perf_counter()
        self.state.asked(started)
        reply = await self.receive(headers, peer, read_chunk, partial(self.decide, started))
        if reply.pending is not None:  # a rule with the inline LLM check: awaited
            reply = await finish_gate(reply, self.state.llm_judge, time.perf_counter)
        count_answer(self.metrics, reply, self.answer_counters)
        if 400 <= reply.status < 500:
            self.metrics.http_client_errors.labels(GATE, str(reply.status)).inc()
        if reply.event is not None:
            self.publish_after(reply.event)
        return reply

    async def receive(
        self,
        headers: Mapping[str, str],
        peer: str | None,
        read_chunk: ReadChunk,
        decide_body: Callable[[bytes | None, Grant], GateReply],
    ) -> GateReply:
        """The request read, authorized and admitted under this gate's limits and guard,
        then answered by ``decide_body`` (:func:`receive_gate`)."""
        return await receive_gate(
            headers=headers,
            peer=peer,
            read_chunk=read_chunk,
            authorize=self.authorize,
            limits=self.limits,
            guard=self.guard,
            decide_body=decide_body,
        )

    def decide(self, started: float, body: bytes | None, grant: Grant) -> GateReply:
        """The decision on a read body from the state held now (:func:`decide_gate`);
        ``started`` is the request's arrival on ``time.perf_counter``."""
        state = self.state
        return decide_gate(
            body,
            limits=self.limits,
            policy=state.policy,
            maps=state.maps,
            checks=state.checks,
            now=self.clock.now(),
            timer=time.perf_counter,
            started=started,
            new_id=lambda: uuid.uuid4().hex,
            status=answer_status(state, self.outbox),
            history_cache=self.history,
            check_states=self.check_states,
            cuts=state.cuts,
            grant=grant,
        )

    def publish_after(self, event: AgentEvent) -> None:
        """Send ``event`` through the decision outbox in a task of its own: after the answer,
        never awaited by it; the task stays in ``pending`` until it is done."""
        task = asyncio.ensure_future(self._publish(event))
        self.pending.add(task)
        task.add_done_callback(self.pending.discard)

    async def _publish(self, event: AgentEvent) -> None:
        if not await self.outbox.publish(event):
            self.metrics.gate_answers.labels("kept").inc()

    async def drop_pending(self) -> None:
        """Cancel the hand-overs still running (call after the outbox is closed: what it
        did not send is then on disk)."""
        for task in list(self.pending):
            task.cancel()
        await asyncio.gather(*self.pending, return_exceptions=True)


def count_answer(
    metrics: OpsMetrics, reply: GateReply, children: dict[str, Any] | None = None
) -> None:
    """Count one answer on /metrics: by decision or refusal reason, and each way it was
    degraded per rule and agent (``monitor_gate_degraded_answers_total``). ``children``: the
    labelled counters of ``monitor_gate_answers`` found so far (by result, few), kept by the
    caller so an answer costs no label lookup."""
    label = str(reply.body.get("decision") or reply.body.get("reason"))
    child = children.get(label) if children is not None else None
    if child is None:
        child = metrics.gate_answers.labels(label)
        if children is not None:
            children[label] = child
    child.inc()
    for kind in reply.degraded_kinds():
        metrics.gate_degraded.labels(str(reply.rule), reply.agent_id or "", kind).inc()


def answer_status(state: GateState, outbox: DecisionOutbox) -> dict[str, Any]:
    """What each answer says about the gate's own condition: the maps' freshness
    (``maps_loaded_at``, ``maps_stale``) and, while decision events are held on disk,
    ``decision_events_kept`` / ``decision_events_dropped``."""
    status = state.status()
    buffered, dropped = outbox.buffer.pending, sum(outbox.buffer.dropped.values())
    if buffered or dropped or outbox.buffered_mode:
        status["decision_events_kept"] = buffered
        status["decision_events_dropped"] = dropped
    return status
