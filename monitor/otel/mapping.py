"""OTLP spans -> agent-event/v1 events (pure; docs/otel.md has the table it implements).

Implements OpenTelemetry GenAI semantic conventions v1.37 (``gen_ai.*``; the 1.26 content
events and OpenLLMetry's flattened ``gen_ai.prompt.N``/``gen_ai.completion.N`` are read too)
and OpenInference semantic conventions 0.1.x (``openinference.span.kind``, ``llm.*``, ``tool.*``).

Contract of ``map_spans``:
- each span gives zero or more event dicts; their ``event_id`` is ``otel:<trace>:<span>:<part>``
  (escalations asked through a tool call: ``otel:<trace>:call:<tool call id>:escalation``, so
  the LLM span that asks and the tool span that runs give the same event), hence re-exporting
  the same spans is idempotent downstream;
- agent and conversation come from the span or its nearest ancestor in the same request that
  has them, else the resource (``gen_ai.agent.id``/``gen_ai.agent.name``/``service.name``) and
  the trace id (as the conversation);
- a span giving no event is counted in ``dropped``; a span that is malformed or whose events
  fail validation is counted in ``rejected`` with the first reasons in ``errors``.
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from monitor.contract.events import AgentEvent, validate_event
from monitor.core.errors import InvalidEvent
from monitor.otel.context import SpanContext, kind_of
from monitor.otel.messages import Message, agent_messages, input_messages, output_messages
from monitor.otel.spans import STATUS_ERROR, Span

MAX_CONTENT_CHARS = 32 * 1024
USAGE_ATTRIBUTES = (
    "gen_ai.usage.input_tokens",
    "gen_ai.usage.output_tokens",
    "llm.token_count.prompt",
    "llm.token_count.completion",
    "llm.token_count.total",
)


@dataclass(frozen=True)
class MappingConfig:
    """Which attributes carry what no convention standardises (docs/otel.md, "Configuration").

    ``escalation_tools`` are fnmatch patterns on tool names; ``escalation_attributes`` are span
    attributes whose truthy value means the span escalated (a string value is the reason).
    """

    confidence_attributes: tuple[str, ...] = ("monitor.confidence",)
    escalation_tools: tuple[str, ...] = ("transfer_to_human_agents", "escalate*")
    escalation_attributes: tuple[str, ...] = ("monitor.escalation",)
    outcome_prefix: str = "monitor.outcome"

    def is_escalation_tool(self, name: str) -> bool:
        return any(fnmatch.fnmatchcase(name, p) for p in self.escalation_tools)


@dataclass
class Mapped:
    """The result for one request: valid events, and span counts by fate."""

    events: list[AgentEvent] = field(default_factory=list)
    spans: int = 0
    mapped: int = 0
    dropped: int = 0
    rejected: int = 0
    errors: list[str] = field(default_factory=list)

    def reject(self, reason: str) -> None:
        self.rejected += 1
        if len(self.errors) < 5:
            self.errors.append(reason)


def map_spans(spans: list[Span], config: MappingConfig) -> Mapped:
    """Map every span of one export request (see the module contract)."""
    out = Mapped(spans=len(spans))
    by_id = {s.span_id: s for s in spans}
    for span in sorted(spans, key=lambda s: (s.start_unix_nano, s.span_id)):
        reason = span.well_formed
        if reason is not None:
            out.reject(reason)
            continue
        try:
            dicts = _span_events(span, SpanContext.of(span, by_id), config)
            events = [validate_event(d) for d in dicts]
        except InvalidEvent as exc:
            field_ = f" ({exc.field})" if exc.field else ""
            out.reject(f"span {span.span_id}: {exc.reason}{field_}: {exc.detail}")
            continue
        if events:
            out.mapped += 1
            out.events.extend(events)
        else:
            out.dropped += 1
    return out


def _span_events(span: Span, ctx: SpanContext, config: MappingConfig) -> list[dict[str, Any]]:
    kind = kind_of(span)
    events: list[dict[str, Any]] = []
    confidence = _confidence(span, config)
    if kind == "llm":
        events.extend(_llm_events(span, ctx, config, confidence))
    elif kind == "agent":
        events.extend(_agent_events(span, ctx, confidence))
    elif kind == "tool":
        events.extend(_tool_events(span, ctx, config))
    escalation = span.attr(*config.escalation_attributes)
    if escalation not in (None, False, "false", "False", 0):
        reason = escalation if isinstance(escalation, str) and escalation != "true" else None
        trigger = span.attr(config.escalation_attributes[0] + ".trigger") or "agent"
        payload = {"trigger": trigger, "reason": reason, "confidence": confidence}
        events.append(_event(span, ctx, "escalation", "escalation", payload, end=True))
    success = span.attributes.get(config.outcome_prefix + ".success")
    if success is not None:
        payload = {
            "success": _bool(success),
            "reward": _float(span.attributes.get(config.outcome_prefix + ".reward")),
            "source": span.attr(config.outcome_prefix + ".source") or "other",
        }
        events.append(_event(span, ctx, "outcome", "outcome", payload, end=True))
    return events


def _llm_events(
    span: Span, ctx: SpanContext, config: MappingConfig, confidence: float | None
) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    prompt = input_messages(span)
    if prompt and prompt[-1].role == "user" and not ctx.nested:
        payload = {"role": "user", "content": _clip(prompt[-1].content)}
        events.append(_event(span, ctx, "message", "user", payload, end=False))
    answer: Message | None = next((m for m in output_messages(span) if m.role == "assistant"), None)
    calls = answer.tool_calls if answer else ()
    tool_calls: list[dict[str, Any]] = [
        {"id": c.id or f"{span.span_id}-{i}", "name": c.name, "arguments": c.arguments}
        for i, c in enumerate(calls)
    ]
    message: dict[str, Any] = {
        "role": "assistant",
        "content": _clip(answer.content) if answer else None,
        "tool_calls": tool_calls,
    }
    if confidence is not None:
        message["confidence"] = confidence
        message["confidence_source"] = "other"
    events.append(_event(span, ctx, "message", "assistant", message, end=True))
    for call in tool_calls:
        if config.is_escalation_tool(call["name"]):
            esc: dict[str, Any] = {
                "trigger": "agent", "reason": call["name"], "confidence": confidence
            }
            event = _event(span, ctx, "escalation", "escalation", esc, end=True)
            event["event_id"] = _call_event_id(span.trace_id, call["id"])
            events.append(event)
    return events


def _agent_events(span: Span, ctx: SpanContext, confidence: float | None) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    prompt = agent_messages(span, "input")
    if prompt and prompt[-1].role == "user" and not ctx.nested:
        payload = {"role": "user", "content": _clip(prompt[-1].content)}
        events.append(_event(span, ctx, "message", "user", payload, end=False))
    answer = next((m for m in agent_messages(span, "output") if m.role == "assistant"), None)
    if answer is not None or confidence is not None:
        message: dict[str, Any] = {"role": "assistant", "content": _clip(answer.content)
                                   if answer else None}
        if confidence is not None:
            message["confidence"] = confidence
            message["confidence_source"] = "other"
        events.append(_event(span, ctx, "message", "answer", message, end=True))
    return events


def _tool_events(span: Span, ctx: SpanContext, config: MappingConfig) -> list[dict[str, Any]]:
    name = str(span.attr("gen_ai.tool.name", "tool.name", "traceloop.entity.name") or span.name)
    call_id = span.attr("gen_ai.tool.call.id", "tool_call.id")
    failed = span.status_code == STATUS_ERROR
    error = None
    if failed:
        error = span.status_message or next(
            (str(e.attributes.get("exception.message")) for e in span.events
             if e.name == "exception"), "error"
        )
    result = span.attr("gen_ai.tool.call.result", "output.value", "traceloop.entity.output")
    payload = {
        "call_id": str(call_id) if call_id else span.span_id,
        "name": name,
        "ok": not failed,
        "content": _clip(_text(result)),
        "error": error,
    }
    events = [_event(span, ctx, "tool_result", "tool_result", payload, end=True)]
    if config.is_escalation_tool(name):
        esc = {"trigger": "agent", "reason": name, "confidence": _confidence(span, config)}
        event = _event(span, ctx, "escalation", "escalation", esc, end=False)
        if call_id:
            event["event_id"] = _call_event_id(span.trace_id, str(call_id))
        events.append(event)
    return events


def _event(
    span: Span, ctx: SpanContext, type_: str, part: str, payload: dict[str, Any], *, end: bool
) -> dict[str, Any]:
    nanos = span.end_unix_nano if end and span.end_unix_nano else span.start_unix_nano
    attributes: dict[str, Any] = {
        "otel.trace_id": span.trace_id,
        "otel.span_id": span.span_id,
        "otel.span_name": span.name,
    }
    if ctx.agent_name and ctx.agent_name != ctx.agent_id:
        attributes["gen_ai.agent.name"] = ctx.agent_name
    for key in USAGE_ATTRIBUTES:
        if type_ == "message" and part == "assistant" and key in span.attributes:
            attributes[key] = span.attributes[key]
    agent: dict[str, Any] = {"id": ctx.agent_id}
    if ctx.agent_version:
        agent["version"] = ctx.agent_version
    if ctx.model:
        agent["model"] = ctx.model
    return {
        "schema": "agent-event/v1",
        "event_id": _bounded(f"otel:{span.trace_id}:{span.span_id}:{part}"),
        "type": type_,
        "ts": datetime.fromtimestamp(nanos / 1e9, tz=UTC),
        "conversation_id": ctx.conversation_id,
        "agent": agent,
        "attributes": attributes,
        type_: payload,
    }


def _call_event_id(trace_id: str, call_id: str) -> str:
    return _bounded(f"otel:{trace_id}:call:{call_id}:escalation")


def _bounded(event_id: str) -> str:
    if len(event_id) <= 128:
        return event_id
    return "otel:" + hashlib.sha256(event_id.encode()).hexdigest()


def _confidence(span: Span, config: MappingConfig) -> float | None:
    return _float(span.attr(*config.confidence_attributes))


def _float(value: Any) -> float | None:
    if value is None or isinstance(value, bool):
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        raise InvalidEvent("invalid_attribute", None, f"not a number: {value!r}") from None


def _bool(value: Any) -> bool:
    if isinstance(value, str):
        return value.strip().lower() in ("true", "1", "yes")
    return bool(value)


def _text(value: Any) -> str | None:
    if value is None or isinstance(value, str):
        return value
    return json.dumps(value, default=str)


def _clip(text: str | None) -> str | None:
    return text if text is None or len(text) <= MAX_CONTENT_CHARS else text[:MAX_CONTENT_CHARS]
