"""The payloads and parts of an ``agent-event/v1`` event (docs/design.md): strict, frozen
pydantic models. :mod:`monitor.contract.events` assembles them into ``AgentEvent`` and is where
callers import them from. Pure: no I/O library.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from monitor.contract.limits import INT32_MAX, INT32_MIN, MAX_LABEL_CHARS

GATE_DECISIONS: tuple[str, ...] = ("proceed", "revise", "escalate")
Id = Annotated[str, Field(min_length=1, max_length=128)]
#: a segment label the store indexes (monitor.contract.limits.MAX_LABEL_CHARS)
Label = Annotated[str, Field(max_length=MAX_LABEL_CHARS)]
Probability = Annotated[float, Field(ge=0.0, le=1.0)]


class _Strict(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid", frozen=True)


class Agent(_Strict):
    """Who emitted the event. ``id`` is required; version and model are free-form labels."""

    id: Id
    version: Label | None = None
    model: Label | None = None


class Context(_Strict):
    """Segmentation context. ``tier`` is 1, 2 or 3 (3 = most critical)."""

    domain: Label | None = None
    tier: Literal[1, 2, 3] | None = None
    channel: Label | None = None
    intent: Label | None = None
    segment: Label | None = None
    task_id: Label | None = None
    trial: Annotated[int, Field(ge=INT32_MIN, le=INT32_MAX)] | None = None


#: Who emitted an event and which segment it is in, as flat column names in model order
#: (``agent.id`` -> ``agent_id``, ``context.domain`` -> ``domain``): the columns the stored
#: events and conversations share.
SEGMENT_FIELDS: tuple[str, ...] = (
    *(f"agent_{name}" for name in Agent.model_fields),
    *Context.model_fields,
)


class ToolCall(_Strict):
    """A tool call requested by an assistant message; ``arguments`` is a JSON object."""

    id: Id
    name: str = Field(min_length=1)
    arguments: dict[str, Any] = Field(default_factory=dict)


class MessagePayload(_Strict):
    role: Literal["assistant", "user", "system"]
    content: str | None = None
    tool_calls: list[ToolCall] = Field(default_factory=list)
    confidence: Probability | None = None
    confidence_source: Literal["verbalized", "logprob", "trust_score", "other"] | None = None


class ToolResultPayload(_Strict):
    call_id: Id
    name: str = Field(min_length=1)
    ok: bool
    content: str | None = None
    error: str | None = None


class EscalationPayload(_Strict):
    trigger: Literal["threshold", "agent", "user", "policy"]
    reason: str | None = None
    confidence: Probability | None = None


class OutcomePayload(_Strict):
    success: bool
    reward: Probability | None = None
    source: Literal["ground_truth", "human_review", "csat", "ticket", "other"]


class FeedbackPayload(_Strict):
    score: Annotated[float, Field(ge=-1.0, le=1.0)]
    source: str = Field(min_length=1)
    comment: str | None = None


class GateFinding(_Strict):
    """One inline check that fired on the gated message: which judge, its failure category,
    and a one-line critique the agent can use to revise the message."""

    judge: str = Field(min_length=1, max_length=128)
    category: str | None = None
    critique: str = Field(max_length=500)


class GatePayload(_Strict):
    """One runtime trust-gate decision (``POST /v1/gate``; docs/gate.md), added to v1 as an
    optional type: events of the other types are unchanged.

    ``confidence`` is the stated confidence, ``calibrated`` the agent x domain isotonic map
    applied to it (``map_version`` the map used; None when no map: then ``calibrated`` equals
    ``confidence``). ``degraded`` names why the policy's fail-open/closed choice decided
    (a check failed or the deadline passed); None for an ordinary decision. ``enforced`` is
    False for a rule in shadow mode: ``decision`` is what the gate decided, but the agent was
    told to proceed (its own answer was sent, so the conversation's outcome is unbiased).
    """

    decision: Literal["proceed", "revise", "escalate"]
    confidence: Probability
    calibrated: Probability
    map_version: Annotated[int, Field(ge=0, le=INT32_MAX)] | None = None
    threshold: Probability
    threshold_source: str = Field(min_length=1, max_length=256)
    findings: list[GateFinding] = Field(default_factory=list, max_length=64)
    policy_version: str = Field(min_length=1, max_length=128)
    latency_ms: Annotated[float, Field(ge=0.0)]
    degraded: str | None = None
    enforced: bool = True
