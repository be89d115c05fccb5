"""Span kind and the agent/conversation context a span inherits (pure).

``kind_of``: ``agent``, ``llm``, ``tool`` or ``other`` from ``gen_ai.operation.name``,
``openinference.span.kind`` or ``traceloop.span.kind``. ``SpanContext.of``: agent, conversation,
version and model from the span or its nearest ancestor in the trace that has them, else the
one conversation / agent the rest of the trace names (OpenInference puts ``session.id`` on the
LLM spans only, GenAI on the agent span only), else the resource (``gen_ai.agent.*``,
``service.name``, ``service.version``) and, for the conversation, the trace id.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from monitor.otel.spans import AGENT_ATTRIBUTES, CONVERSATION_ATTRIBUTES, Span

__all__ = ["AGENT_ATTRIBUTES", "CONVERSATION_ATTRIBUTES", "SpanContext", "agent_of"]


def kind_of(span: Span) -> str:
    """``agent``, ``llm``, ``tool`` or ``other`` from the conventions' span kind attributes
    (:attr:`monitor.otel.spans.Span.kind`, worked out once per span)."""
    return span.kind


@dataclass(frozen=True)
class SpanContext:
    """Who and which conversation a span belongs to (see the module docstring)."""

    agent_id: str
    agent_name: str | None
    agent_version: str | None
    conversation_id: str
    model: str | None

    @staticmethod
    def of(
        span: Span,
        by_id: dict[str, Span],
        trace_conversation: str | None = None,
        trace_agent: str | None = None,
    ) -> SpanContext:
        chain = [span]
        seen = {span.span_id}
        while (parent := by_id.get(chain[-1].parent_span_id)) is not None:
            if parent.span_id in seen:
                break
            seen.add(parent.span_id)
            chain.append(parent)

        res = span.resource
        agent = agent_name = version = conversation = None
        for s in chain:  # each field from the nearest span that names it
            named = s.naming
            if agent is None:
                agent = named.agent
            if agent_name is None:
                agent_name = named.agent_name
            if version is None:
                version = named.agent_version
            if conversation is None:
                conversation = named.conversation
        agent = agent or trace_agent
        agent = agent or res.get("gen_ai.agent.id") or res.get("gen_ai.agent.name")
        agent = agent or res.get("service.name") or "unknown_service"
        conversation = conversation or trace_conversation or span.trace_id
        model = span.attr("gen_ai.response.model", "gen_ai.request.model", "llm.model_name")
        return SpanContext(
            agent_id=str(agent),
            agent_name=_str(agent_name),
            agent_version=_str(version or res.get("service.version")),
            conversation_id=str(conversation),
            model=_str(model),
        )


def agent_of(span: Span) -> Any:
    """The agent ``span`` names (``AGENT_ATTRIBUTES``, first present). OpenLLMetry's spans
    (``traceloop.span.kind`` set) carry LangChain's run id, new at every invocation, as
    ``gen_ai.agent.id``: there the agent is its name."""
    return span.naming.agent


def named_agent(spans: list[Span]) -> str | None:
    """The agent the spans name when they name exactly one (:func:`agent_of`), else None."""
    values = {str(v) for s in spans if (v := agent_of(s)) is not None}
    return values.pop() if len(values) == 1 else None


def named_once(spans: list[Span], names: tuple[str, ...]) -> str | None:
    """The value of ``names`` when the spans name exactly one, else None."""
    if names == CONVERSATION_ATTRIBUTES:  # worked out once per span
        values = {str(v) for s in spans if (v := s.naming.conversation) is not None}
    else:
        values = {str(v) for s in spans if (v := s.attr(*names)) is not None}
    return values.pop() if len(values) == 1 else None


def _str(value: Any) -> str | None:
    return None if value is None else str(value)
