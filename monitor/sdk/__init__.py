"""What agents import to emit agent-event/v1 events to Kafka (see docs/sdk.md).

Async agents::

    from monitor.sdk import Agent, EventEmitter

    async with EventEmitter("kafka:9092", agent=Agent(id="support-bot", version="1.4")) as em:
        await em.message("conv-1", "assistant", "Your refund is on its way.", confidence=0.82)
        await em.escalation("conv-1", "threshold", confidence=0.31)
        await em.flush()        # returns once the broker acknowledged both events

Blocking agents (any number of threads)::

    with SyncEventEmitter("kafka:9092", agent=Agent(id="support-bot")) as em:
        em.outcome("conv-1", success=True, source="ticket")

Runtime trust gate (docs/gate.md): with ``gate_url=`` (and ``gate_token=``) on the emitter,
``answer = await em.gate("conv-1", draft, confidence=0.82, tool_calls=calls)`` (blocking:
``em.gate(...)``) returns ``proceed``/``revise``/``escalate`` with the findings to revise with.

Delivery contract (both emitters): ``send``/helpers return once the event is valid and queued;
``flush`` returns once every event sent before it is acknowledged (``acks="all"``) or raises
``DeliveryError`` naming how many failed; ``close`` rejects new sends, flushes and stops, and is
idempotent. ``idempotent=True`` (the default) needs broker support for InitProducerId, which the
embedded Tansu broker (memory storage) lacks: use ``idempotent=False`` against it.
"""

from __future__ import annotations

from monitor.contract.events import Agent, AgentEvent, Context, ToolCall
from monitor.core.errors import (
    DeliveryError,
    EmitterError,
    EmitterNotRunning,
    GateError,
    GateRateLimited,
    GateUnavailable,
)
from monitor.sdk.base import EventHelpers, new_event_id
from monitor.sdk.emitter_async import EventEmitter
from monitor.sdk.emitter_sync import SyncEventEmitter
from monitor.sdk.gate_client import Finding, GateAnswer, GateClient, SyncGateClient

__all__ = [
    "Agent",
    "AgentEvent",
    "Context",
    "DeliveryError",
    "EmitterError",
    "EmitterNotRunning",
    "EventEmitter",
    "EventHelpers",
    "Finding",
    "GateAnswer",
    "GateClient",
    "GateError",
    "GateRateLimited",
    "GateUnavailable",
    "SyncEventEmitter",
    "SyncGateClient",
    "ToolCall",
    "new_event_id",
]

# The modules other packages may import (besides this package's own names): the
# package test in tests/test_architecture.py fails on a cross-package import of any other.
PUBLIC_MODULES: tuple[str, ...] = ("gate_client",)
