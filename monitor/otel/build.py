"""agent-event/v1 dicts built from a span and its context (pure helpers of the mapping).

Event ids are deterministic: ``otel:<trace>:<span>:<part>`` for what one span says,
``otel:<trace>:call:<tool call id>:<part>`` for what a tool call id identifies (its result, an
escalation through it), ``otel:conv:<conversation>:system:<digest>`` for a system prompt (one per
conversation and text); ids longer than 128 characters are replaced by a SHA-256 digest.
"""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime, timedelta
from typing import Any

from monitor.core.errors import InvalidEvent
from monitor.otel.context import SpanContext
from monitor.otel.spans import Span

MAX_CONTENT_CHARS = 32 * 1024
USAGE_ATTRIBUTES = (
    "gen_ai.usage.input_tokens",
    "gen_ai.usage.output_tokens",
    "llm.token_count.prompt",
    "llm.token_count.completion",
    "llm.token_count.total",
)


def event(
    span: Span,
    ctx: SpanContext,
    type_: str,
    part: str,
    payload: dict[str, Any],
    nanos: int,
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """One event of ``span`` at ``nanos`` (Unix nanoseconds)."""
    attributes: dict[str, Any] = {
        "otel.trace_id": span.trace_id,
        "otel.span_id": span.span_id,
        "otel.span_name": span.name,
    }
    if ctx.agent_name and ctx.agent_name != ctx.agent_id:
        attributes["gen_ai.agent.name"] = ctx.agent_name
    attributes.update(extra or {})
    agent: dict[str, Any] = {"id": ctx.agent_id}
    if ctx.agent_version:
        agent["version"] = ctx.agent_version
    if ctx.model:
        agent["model"] = ctx.model
    return {
        "schema": "agent-event/v1",
        "event_id": bounded(f"otel:{span.trace_id}:{span.span_id}:{part}"),
        "type": type_,
        "ts": timestamp(nanos),
        "conversation_id": ctx.conversation_id,
        "agent": agent,
        "attributes": attributes,
        type_: payload,
    }


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def timestamp(nanos: int) -> datetime:
    """Unix nanoseconds as a datetime truncated to the microsecond, exactly (no float; integer
    arithmetic, a third of ``fromtimestamp``'s cost). OTLP's fixed64 stays in range (year
    2554 at most)."""
    return _EPOCH + timedelta(microseconds=nanos // 1000)


def call_event_id(trace_id: str, call_id: str, part: str) -> str:
    return bounded(f"otel:{trace_id}:call:{call_id}:{part}")


def system_event_id(conversation_id: str, text: str) -> str:
    digest = hashlib.sha256(text.encode()).hexdigest()[:24]
    return bounded(f"otel:conv:{conversation_id}:system:{digest}")


def bounded(event_id: str) -> str:
    if len(event_id) <= 128:
        return event_id
    return "otel:" + hashlib.sha256(event_id.encode()).hexdigest()


def usage(span: Span) -> dict[str, Any]:
    """The token usage attributes the span itself carries."""
    return {k: span.attributes[k] for k in USAGE_ATTRIBUTES if k in span.attributes}


def as_float(value: Any) -> float | None:
    if value is None or isinstance(value, bool):
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        raise InvalidEvent("invalid_attribute", None, f"not a number: {value!r}") from None


def as_bool(value: Any) -> bool:
    if isinstance(value, str):
        return value.strip().lower() in ("true", "1", "yes")
    return bool(value)


def text(value: Any) -> str | None:
    if value is None or isinstance(value, str):
        return value
    return json.dumps(value, default=str)


def clip(value: str | None) -> str | None:
    return value if value is None or len(value) <= MAX_CONTENT_CHARS else value[:MAX_CONTENT_CHARS]
