"""LangChain's serialized messages inside span attributes (pure).

The LangChain instrumentations record what a chain, a graph node or a tool took and returned as
the JSON of LangChain objects rather than as chat messages:

- OpenInference (``openinference-instrumentation-langchain``): ``input.value`` /
  ``output.value`` in ``messages_to_dict`` form, ``{"type": "ai", "data": {...}}``;
- OpenLLMetry (``opentelemetry-instrumentation-langchain``): ``traceloop.entity.input`` /
  ``traceloop.entity.output`` and ``gen_ai.tool.call.result`` in ``dumpd`` form,
  ``{"lc": 1, "type": "constructor", "id": [..., "AIMessage"], "kwargs": {...}}``, inside its
  envelope ``{"inputs"|"outputs"|"output": ..., "kwargs": ...}``;

either way a LangGraph state holds them as ``{"messages": [...], ...}``. ``messages_in`` reads
such a value as chat messages (None when it holds none: the caller keeps the raw value), and
``tool_message_in`` a tool's output that is a ``ToolMessage`` as the content the model was
given and the tool call id it answers.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from monitor.otel import messages
from monitor.otel.messages import Message, ToolCallOut
from monitor.otel.spans import Span

# LangChain message types (``messages_to_dict``'s ``type``; ``dumpd``'s class name) -> role
ROLES = {
    "human": "user",
    "ai": "assistant",
    "system": "system",
    "tool": "tool",
    "HumanMessage": "user",
    "HumanMessageChunk": "user",
    "AIMessage": "assistant",
    "AIMessageChunk": "assistant",
    "SystemMessage": "system",
    "SystemMessageChunk": "system",
    "ToolMessage": "tool",
    "ToolMessageChunk": "tool",
}
TUPLE_ROLES = {"user": "user", "human": "user", "assistant": "assistant", "ai": "assistant"}
ENVELOPES = ("outputs", "inputs", "output", "input")  # OpenLLMetry's wrapper keys
MAX_DEPTH = 4


@dataclass(frozen=True)
class ToolOutput:
    """A tool's output that was a ``ToolMessage``: its content and the call it answers."""

    content: str | None
    call_id: str | None


def agent_messages(span: Span, side: str) -> list[Message]:
    """An agent span's ``input`` or ``output`` messages: a convention's messages, else the
    LangChain messages its ``input.value``/``output.value`` (``traceloop.entity.*``) holds,
    else :func:`monitor.otel.messages.agent_messages` (the value as the user's / agent's
    text)."""
    found = messages.convention_messages(span, side)
    if found:
        return found
    value = span.attr(f"{side}.value", f"traceloop.entity.{side}")
    held = None if value is None else messages_in(value)
    return held if held is not None else messages.agent_messages(span, side)


def messages_in(value: Any) -> list[Message] | None:
    """The LangChain messages ``value`` (JSON text or decoded) holds, in order; None when it
    holds none (not JSON, or JSON of something else)."""
    items = _message_list(_decoded(value), 0)
    if items is None:
        return None
    out = [m for item in items if (m := _message(item)) is not None]
    return out or None


def tool_message_in(value: Any) -> ToolOutput | None:
    """The ``ToolMessage`` a tool's output is (bare, or in OpenLLMetry's ``{"output": ...}``
    envelope), else None."""
    data = _decoded(value)
    for _ in range(MAX_DEPTH):
        if not isinstance(data, dict):
            return None
        found = _parts(data)
        if found is not None:
            kind, fields = found
            if ROLES.get(kind) != "tool":
                return None
            call_id = fields.get("tool_call_id")
            return ToolOutput(_text(fields.get("content")), None if not call_id else str(call_id))
        data = next((data[k] for k in ENVELOPES if k in data), None)
    return None


def _decoded(value: Any) -> Any:
    if isinstance(value, str):
        if not value.lstrip().startswith(("{", "[")):
            return None
        try:
            return json.loads(value)
        except ValueError:
            return None
    return value


def _message_list(data: Any, depth: int) -> list[Any] | None:
    """The list of message items in ``data``: a state's ``messages``, an envelope's content,
    a list of messages, one message."""
    if depth > MAX_DEPTH:
        return None
    if isinstance(data, list):
        if data and all(_is_message(x) for x in data):
            return data
        if len(data) == 1 and isinstance(data[0], list):  # a batch of one: [[messages]]
            return _message_list(data[0], depth + 1)
        return None
    if not isinstance(data, dict):
        return None
    if _is_message(data):
        return [data]
    if isinstance(data.get("messages"), list):
        return _message_list(data["messages"], depth + 1)
    for key in ENVELOPES:
        if key in data:
            return _message_list(data[key], depth + 1)
    return None


def _is_message(item: Any) -> bool:
    if isinstance(item, dict):
        found = _parts(item)
        return found is not None and found[0] in ROLES
    return (  # LangChain's ("user", "text") shorthand of an input
        isinstance(item, list)
        and len(item) == 2
        and item[0] in TUPLE_ROLES
        and isinstance(item[1], str)
    )


def _parts(item: dict[str, Any]) -> tuple[str, dict[str, Any]] | None:
    """(type, fields) of a serialized LangChain object, in either form."""
    if item.get("lc") == 1 and item.get("type") == "constructor":
        ids, kwargs = item.get("id"), item.get("kwargs")
        if isinstance(ids, list) and ids and isinstance(kwargs, dict):
            return str(ids[-1]), kwargs
        return None
    if isinstance(item.get("type"), str) and isinstance(item.get("data"), dict):
        return item["type"], item["data"]
    return None


def _message(item: Any) -> Message | None:
    if isinstance(item, list):
        return Message(TUPLE_ROLES[item[0]], item[1])
    found = _parts(item)
    if found is None or found[0] not in ROLES:
        return None
    kind, fields = found
    calls = tuple(
        ToolCallOut(
            None if not c.get("id") else str(c["id"]),
            str(c["name"]),
            c["args"] if isinstance(c.get("args"), dict) else {},
        )
        for c in fields.get("tool_calls") or []
        if isinstance(c, dict) and c.get("name")
    )
    call_id = fields.get("tool_call_id")
    return Message(
        ROLES[kind], _text(fields.get("content")), calls, None if not call_id else str(call_id)
    )


def _text(content: Any) -> str | None:
    """A message's content as text: a string (empty: none), or the text parts of a list."""
    if isinstance(content, str):
        return content or None
    if isinstance(content, list):
        texts = [
            p if isinstance(p, str) else str(p.get("text"))
            for p in content
            if isinstance(p, str) or (isinstance(p, dict) and isinstance(p.get("text"), str))
        ]
        return "\n".join(texts) if texts else None
    return None if content is None else json.dumps(content, default=str)
