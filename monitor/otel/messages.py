"""Chat messages carried by an LLM span, whichever convention wrote them (pure).

Read in this order, the first that yields messages wins:

1. GenAI semconv >= 1.37 attributes ``gen_ai.input.messages`` / ``gen_ai.output.messages``
   (JSON: ``[{"role", "parts": [{"type": "text", "content"}, {"type": "tool_call", "id",
   "name", "arguments"}]}]``), written when content capture is on;
2. OpenInference flattened attributes ``llm.input_messages.{i}.message.role|content`` and
   ``llm.output_messages.{i}.message.tool_calls.{j}.tool_call.id|function.name|arguments``;
3. OpenLLMetry flattened attributes ``gen_ai.prompt.{i}.role|content`` and
   ``gen_ai.completion.{i}.role|content|tool_calls.{j}.id|name|arguments``;
4. GenAI semconv <= 1.26 span events ``gen_ai.content.prompt`` / ``gen_ai.content.completion``
   whose ``gen_ai.prompt`` / ``gen_ai.completion`` attribute holds the JSON messages.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from pydantic_core import from_json

from monitor.otel.spans import Span


@dataclass(frozen=True)
class ToolCallOut:
    """A tool call the model asked for; ``arguments`` is a JSON object (``{}`` if not one)."""

    id: str | None
    name: str
    arguments: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Message:
    """One chat message; ``tool_call_id`` is set on a tool result (role ``tool``)."""

    role: str
    content: str | None
    tool_calls: tuple[ToolCallOut, ...] = ()
    tool_call_id: str | None = None


def system_instructions(span: Span, inputs: list[Message] | None = None) -> list[str]:
    """The system prompt texts of ``span``: ``gen_ai.system_instructions`` (a JSON list of
    parts, or a string) and the ``system``-role input messages, each distinct text once;
    ``inputs``: the span's :func:`input_messages` when the caller has them already."""
    texts: list[str] = []
    value = span.attributes.get("gen_ai.system_instructions")
    if isinstance(value, str):
        try:
            value = _loads(value)
        except ValueError:
            value = [{"type": "text", "content": value}]
    for part in value if isinstance(value, list) else []:
        if isinstance(part, dict) and isinstance(part.get("content"), str):
            texts.append(part["content"])
        elif isinstance(part, str):
            texts.append(part)
    if inputs is None:
        inputs = input_messages(span)
    texts.extend(m.content for m in inputs if m.role == "system" and m.content)
    return list(dict.fromkeys(texts))


def input_messages(span: Span) -> list[Message]:
    """The prompt messages of ``span`` (possibly empty: content capture is opt-in)."""
    return _messages(span, "input")


def output_messages(span: Span) -> list[Message]:
    """The completion messages of ``span`` (possibly empty); last resort: a JSON
    ``output.value`` holding a chat completion, chat messages or a Responses API response (the
    OpenAI Agents SDK's streamed generations carry only that)."""
    return _messages(span, "output") or _output_value(span)


def answer_of(span: Span, outputs: list[Message]) -> Message | None:
    """The one assistant message an LLM call gave, from its output messages: the first
    assistant message (the first choice of a chat completion); but a Responses API call (its
    ``output.value`` a ``response`` object) answers in output items, which OpenInference
    renders one message each (a text, then each function call): together they are one answer,
    texts joined and calls in order."""
    answers = [m for m in outputs if m.role == "assistant"]
    if len(answers) < 2 or not _is_response(span.attributes.get("output.value")):
        return answers[0] if answers else None
    texts = [m.content for m in answers if m.content]
    calls = tuple(c for m in answers for c in m.tool_calls)
    return Message("assistant", "\n".join(texts) if texts else None, calls)


def _is_response(value: Any) -> bool:
    """``value`` is a Responses API response in JSON (``"object": "response"``)."""
    if not isinstance(value, str) or '"response"' not in value:
        return False
    try:
        data = json.loads(value)
    except ValueError:
        return False
    return isinstance(data, dict) and data.get("object") == "response"


def _output_value(span: Span) -> list[Message]:
    value = span.attributes.get("output.value")
    if not isinstance(value, str) or not value.lstrip().startswith(("{", "[")):
        return []
    try:
        data = json.loads(value)
    except ValueError:
        return []
    items = data if isinstance(data, list) else [data]
    out: list[Message] = []
    for item in items:
        if not isinstance(item, dict):
            continue
        if isinstance(item.get("choices"), list):  # a chat completion
            for choice in item["choices"][:1]:
                if isinstance(choice, dict) and isinstance(choice.get("message"), dict):
                    out.append(_semconv_message({"role": "assistant", **choice["message"]}))
        elif item.get("object") == "response" and isinstance(item.get("output"), list):
            out.append(_response_message(item["output"]))
        elif item.get("role") == "assistant":  # a chat message
            out.append(_semconv_message(item))
    return out


def _response_message(output: list[Any]) -> Message:
    """A Responses API ``output`` list as one assistant message (texts and function calls)."""
    texts: list[str] = []
    calls: list[ToolCallOut] = []
    for item in output:
        if not isinstance(item, dict):
            continue
        if item.get("type") == "function_call" and item.get("name"):
            calls.append(_call(item.get("call_id"), item["name"], item.get("arguments")))
        elif item.get("type") == "message":
            for part in item.get("content") or []:
                if isinstance(part, dict) and isinstance(part.get("text"), str) and part["text"]:
                    texts.append(part["text"])
    return Message("assistant", "\n".join(texts) if texts else None, tuple(calls))


def agent_messages(span: Span, side: str) -> list[Message]:
    """An agent span's input (``side="input"``) or output messages: the conventions above,
    else OpenInference ``input.value``/``output.value`` or OpenLLMetry
    ``traceloop.entity.input``/``output`` taken as the user's / the agent's text."""
    found = _messages(span, side)
    if found:
        return found
    if side == "input" and (history := span.attributes.get("pydantic_ai.all_messages")):
        return _from_json_list(history)  # pydantic-ai's run: the history, this turn's at the end
    value = span.attr(f"{side}.value", f"traceloop.entity.{side}")
    if value is None:
        return []
    role = "user" if side == "input" else "assistant"
    return [Message(role, value if isinstance(value, str) else json.dumps(value, default=str))]


def convention_messages(span: Span, side: str) -> list[Message]:
    """The ``input`` or ``output`` messages a convention above wrote on ``span`` (no
    ``output.value`` fallback)."""
    return _messages(span, side)


def _messages(span: Span, side: str) -> list[Message]:
    semconv = span.attributes.get(f"gen_ai.{side}.messages")
    if semconv is not None:
        return _from_json_list(semconv)
    oi_prefix = "llm.input_messages." if side == "input" else "llm.output_messages."
    found = _flattened(span.attributes, oi_prefix, _oi_message)
    if found:
        return found
    ll_prefix = "gen_ai.prompt." if side == "input" else "gen_ai.completion."
    found = _flattened(span.attributes, ll_prefix, _openllmetry_message)
    if found:
        return found
    event_name = "gen_ai.content.prompt" if side == "input" else "gen_ai.content.completion"
    key = "gen_ai.prompt" if side == "input" else "gen_ai.completion"
    for event in span.events:
        if event.name == event_name and key in event.attributes:
            return _from_json_list(event.attributes[key])
    return []


def _from_json_list(value: Any) -> list[Message]:
    if isinstance(value, str):
        try:
            value = _loads(value)
        except ValueError:
            return [Message("assistant", value)]
    if isinstance(value, dict):
        value = [value]
    if not isinstance(value, list):
        return []
    out = []
    for item in value:
        if isinstance(item, dict):
            out.extend(_split_tool_responses(item))
    return out


def _loads(text: str) -> Any:
    """``json.loads(text)``, through pydantic-core's parser (about 2.5 times faster) when it
    takes the text; what it refuses (lone surrogate escapes, nesting past its limit) goes to
    ``json.loads``, which decides as before."""
    try:
        return from_json(text)
    except ValueError:
        return json.loads(text)


def _split_tool_responses(item: dict[str, Any]) -> list[Message]:
    """A message as one or more: each ``tool_call_response`` part is a ``tool`` message of its
    call id, whatever the role that carries it (Anthropic returns tool results as ``tool_result``
    blocks of a ``user`` message, several at once after parallel calls), and the other parts,
    if any, the message of its role; without such parts, the message as it is."""
    parts = item.get("parts")
    if not isinstance(parts, list):
        return [_semconv_message(item)]
    responses = [p for p in parts if isinstance(p, dict) and p.get("type") == "tool_call_response"]
    if not responses:
        return [_semconv_message(item)]
    out = [
        _semconv_message({"role": "tool", "parts": [p], "tool_call_id": p.get("id")})
        for p in responses
    ]
    rest = [p for p in parts if not (isinstance(p, dict) and p.get("type") == "tool_call_response")]
    if rest:
        out.append(_semconv_message({**item, "parts": rest}))
    return out


def _semconv_message(item: dict[str, Any]) -> Message:
    role = str(item.get("role") or "assistant")
    texts: list[str] = []
    calls: list[ToolCallOut] = []
    call_id = item.get("tool_call_id")
    if isinstance(item.get("content"), str):  # the older {"role", "content"} shape
        texts.append(item["content"])
    for part in item.get("parts") or []:
        if not isinstance(part, dict):
            continue
        if part.get("type") == "text" and isinstance(part.get("content"), str):
            if not part["content"]:  # a stream's empty first delta is no text
                continue
            texts.append(part["content"])
        elif part.get("type") == "tool_call" and part.get("name"):
            calls.append(_call(part.get("id"), part["name"], part.get("arguments")))
        elif part.get("type") == "tool_call_response":
            call_id = part.get("id") or call_id
            response = part.get("response", part.get("result"))  # (pydantic-ai: ``result``)
            if response is not None:
                texts.append(response if isinstance(response, str) else _dumps(response))
    for call in item.get("tool_calls") or []:
        if isinstance(call, dict):
            fn = call.get("function") if isinstance(call.get("function"), dict) else call
            if fn and fn.get("name"):
                calls.append(_call(call.get("id"), fn["name"], fn.get("arguments")))
    content = "\n".join(texts) if texts else None
    return Message(role, content, tuple(calls), None if call_id in (None, "") else str(call_id))


def _dumps(value: Any) -> str:
    return json.dumps(value, default=str)


def _flattened(attrs: dict[str, Any], prefix: str, build: Any) -> list[Message]:
    groups: dict[int, dict[str, Any]] = {}
    for key, value in attrs.items():
        if not key.startswith(prefix):
            continue
        index, _, rest = key[len(prefix) :].partition(".")
        if index.isdigit() and rest:
            groups.setdefault(int(index), {})[rest] = value
    return [m for _, g in sorted(groups.items()) if (m := build(g)) is not None]


def _oi_message(group: dict[str, Any]) -> Message | None:
    role = group.get("message.role")
    if not role:
        return None
    calls = _calls(
        group, "message.tool_calls.{j}.tool_call.", "function.name", "function.arguments"
    )
    content = group.get("message.content")
    if content is None:  # a list of parts: message.contents.{k}.message_content.text
        parts = [
            str(group[f"message.contents.{k}.message_content.text"])
            for k in range(64)
            if group.get(f"message.contents.{k}.message_content.text") is not None
        ]
        content = "\n".join(parts) if parts else None
    return _message(role, content, calls, group.get("message.tool_call_id"))


def _openllmetry_message(group: dict[str, Any]) -> Message | None:
    role = group.get("role")
    if not role:
        return None
    calls = _calls(group, "tool_calls.{j}.", "name", "arguments")
    return _message(role, group.get("content"), calls, group.get("tool_call_id"))


def _calls(
    group: dict[str, Any], prefix: str, name: str, arguments: str
) -> tuple[ToolCallOut, ...]:
    """The tool calls ``prefix.format(j=0, 1, ...)`` + ``name`` / ``id`` / ``arguments`` of a
    flattened message, up to the first index without a name (64 at most)."""
    calls = []
    for j in range(64):
        p = prefix.format(j=j)
        if group.get(p + name) is None:
            break
        calls.append(_call(group.get(p + "id"), group[p + name], group.get(p + arguments)))
    return tuple(calls)


def _message(role: Any, content: Any, calls: tuple[ToolCallOut, ...], call_id: Any) -> Message:
    return Message(
        str(role),
        None if content is None else str(content),
        calls,
        None if call_id in (None, "") else str(call_id),
    )


def _call(call_id: Any, name: Any, arguments: Any) -> ToolCallOut:
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except ValueError:
            arguments = {"raw": arguments}
    return ToolCallOut(
        None if call_id in (None, "") else str(call_id),
        str(name),
        arguments if isinstance(arguments, dict) else {},
    )
