"""GenAI event log records and the content they give their span (pure; docs/otel.md).

The GenAI semantic conventions carry message content in log-based events as well as (or instead
of) span attributes, each record naming the span it belongs to by trace and span id:

- ``gen_ai.client.inference.operation.details`` (semconv >= 1.37, util-genai's inference
  events): ``gen_ai.input.messages``, ``gen_ai.output.messages`` and
  ``gen_ai.system_instructions`` as attributes, one record per LLM call;
- the older per-message events (semconv 1.26-1.36): ``gen_ai.system.message``,
  ``gen_ai.user.message``, ``gen_ai.assistant.message``, ``gen_ai.tool.message`` (one record per
  prompt message, in order, the message in the body: ``content``, ``tool_calls``, ``id``) and
  ``gen_ai.choice`` (one per completion choice: ``index``, ``message``).

:class:`LogEvent` is one such record; :func:`is_genai` says which event names are read (other
log records are counted and dropped by the receiver). :func:`with_content` gives an LLM span the
content of its records when the span carries none of its own (a span that has content keeps it:
the records' copy is never used, so nothing is stored twice); :func:`awaits_content` says when a
trace should wait for records still on their way (an LLM span with no content and no record that
answers for it).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from monitor.otel.context import kind_of
from monitor.otel.spans import STATUS_ERROR, Span

DETAILS = "gen_ai.client.inference.operation.details"
CHOICE = "gen_ai.choice"
MESSAGE_EVENTS = {
    "gen_ai.system.message": "system",
    "gen_ai.user.message": "user",
    "gen_ai.assistant.message": "assistant",
    "gen_ai.tool.message": "tool",
}
GENAI_EVENTS = frozenset({DETAILS, CHOICE, *MESSAGE_EVENTS})
_CONTENT_ATTRIBUTES = (
    "gen_ai.input.messages",
    "gen_ai.output.messages",
    "gen_ai.system_instructions",
)
_FLATTENED = ("llm.input_messages.", "llm.output_messages.", "gen_ai.prompt.", "gen_ai.completion.")
_CONTENT_EVENTS = frozenset({"gen_ai.content.prompt", "gen_ai.content.completion"})


def is_genai(name: str) -> bool:
    """Whether a log record with this event name is a GenAI event the monitor reads."""
    return name in GENAI_EVENTS


@dataclass(frozen=True)
class LogEvent:
    """One GenAI event log record: its span, name, time (``time_unix_nano``, else the observed
    time), its place in its export request (``seq``, the order among records of equal time),
    attributes and body (converted to Python as span attributes are)."""

    trace_id: str
    span_id: str
    name: str
    time_unix_nano: int
    seq: int = 0
    attributes: dict[str, Any] = field(default_factory=dict)
    body: Any = None

    @property
    def key(self) -> str:
        """The record's identity (a re-sent export stores it once): a digest of its content."""
        text = json.dumps(
            [self.name, self.time_unix_nano, self.attributes, self.body],
            sort_keys=True,
            default=str,
        )
        return hashlib.sha256(text.encode()).hexdigest()[:32]

    def to_json(self) -> str:
        """The record as JSON (for the pending store); ``from_json`` reads it back."""
        return json.dumps(asdict(self), default=str)

    @staticmethod
    def from_json(text: str) -> LogEvent:
        return LogEvent(**json.loads(text))

    @property
    def well_formed(self) -> str | None:
        """None when the record names a span (valid trace and span ids), else the reason."""
        probe = Span(self.trace_id, self.span_id, "", self.name, 0, 0)
        if probe.well_formed is None:
            return None
        return f"log record {self.name!r}: no span context (trace_id and span_id of its span)"


def by_span(records: Iterable[LogEvent]) -> dict[tuple[str, str], list[LogEvent]]:
    """Records grouped by (trace id, span id), each record once (by :attr:`LogEvent.key`),
    in the order they were emitted."""
    unique: dict[tuple[str, str, str], LogEvent] = {}
    for r in records:
        unique.setdefault((r.trace_id, r.span_id, r.key), r)
    out: dict[tuple[str, str], list[LogEvent]] = {}
    for r in sorted(unique.values(), key=lambda r: (r.time_unix_nano, r.seq)):
        out.setdefault((r.trace_id, r.span_id), []).append(r)
    return out


def has_content(span: Span) -> bool:
    """The span carries messages of its own: the content attributes or span events of any
    convention ``monitor.otel.messages`` reads (checked by name, without parsing them)."""
    attributes = span.attributes
    if any(attributes.get(k) for k in _CONTENT_ATTRIBUTES):
        return True
    if any(k.startswith(_FLATTENED) for k in attributes):
        return True
    value = attributes.get("output.value")
    if isinstance(value, str) and value.lstrip().startswith(("{", "[")):
        return True
    return any(e.name in _CONTENT_EVENTS for e in span.events)


def with_content(span: Span, records: list[LogEvent]) -> Span:
    """``span`` with the content of its records as GenAI 1.37 attributes, when it has none of
    its own and the records carry some (text or tool-call arguments); else ``span`` as is."""
    if not records or kind_of(span) != "llm" or has_content(span):
        return span
    content = _details(records) or _per_message(records)
    if not content:
        return span
    return replace(span, attributes={**span.attributes, **content})


def covered(span: Span, records: list[LogEvent]) -> bool:
    """The span's records are all there that will come: an operation details record, a
    ``gen_ai.choice``, or, for a failed call (no choice comes), any record."""
    names = {r.name for r in records}
    if DETAILS in names or CHOICE in names:
        return True
    failed = span.status_code == STATUS_ERROR or span.attr("error.type") is not None
    return failed and bool(records)


def awaits_content(spans: list[Span], records: Mapping[tuple[str, str], list[LogEvent]]) -> bool:
    """Some innermost LLM span of ``spans`` (one trace) has no content of its own and no record
    answering for it yet: its content may still come in log records."""
    kinds = {s.span_id: kind_of(s) for s in spans}
    parent = {s.span_id: s.parent_span_id for s in spans}
    wrappers: set[str] = set()
    for s in spans:
        if kinds[s.span_id] != "llm":
            continue
        seen = {s.span_id}
        current = parent.get(s.span_id, "")
        while current in parent and current not in seen:
            seen.add(current)
            wrappers.add(current)
            current = parent[current]
    for s in spans:
        if kinds[s.span_id] != "llm" or s.span_id in wrappers:
            continue
        mine = records.get((s.trace_id, s.span_id), [])
        if not covered(s, mine) and not has_content(s):
            return True
    return False


def _details(records: list[LogEvent]) -> dict[str, Any]:
    """The content attributes of the span's last operation details record."""
    for r in reversed(records):
        if r.name != DETAILS:
            continue
        found = {k: r.attributes[k] for k in _CONTENT_ATTRIBUTES if r.attributes.get(k)}
        if isinstance(r.body, dict):  # some emitters put the messages in the body
            found.update({k: v for k, v in r.body.items() if k in _CONTENT_ATTRIBUTES and v})
        return found
    return {}


def _per_message(records: list[LogEvent]) -> dict[str, Any]:
    """The prompt (``gen_ai.<role>.message`` records, in order) and the completion (the first
    ``gen_ai.choice``), as chat messages, when any of them carries text or arguments."""
    prompt: list[dict[str, Any]] = []
    choices: list[tuple[int, dict[str, Any]]] = []
    for r in records:
        body = r.body if isinstance(r.body, dict) else {}
        if r.name in MESSAGE_EVENTS:
            message = _message(MESSAGE_EVENTS[r.name], body)
            if "id" in body and message["role"] == "tool":
                message["tool_call_id"] = body["id"]
            prompt.append(message)
        elif r.name == CHOICE:
            inner = body.get("message")
            index = body.get("index")
            message = _message("assistant", inner if isinstance(inner, dict) else {})
            choices.append((index if isinstance(index, int) else len(choices), message))
    out: dict[str, Any] = {}
    if any(_says(m) for m in prompt):
        out["gen_ai.input.messages"] = prompt
    completion = [m for _, m in sorted(choices, key=lambda c: c[0])]
    if any(_says(m) for m in completion):
        out["gen_ai.output.messages"] = completion[:1]
    return out


def _message(role: str, body: dict[str, Any]) -> dict[str, Any]:
    message: dict[str, Any] = {"role": str(body.get("role") or role)}
    content = body.get("content")
    if isinstance(content, list):  # content parts: their texts
        texts = [
            str(p.get("text") or p.get("content") or "") for p in content if isinstance(p, dict)
        ]
        content = "\n".join(t for t in texts if t) or None
    if content not in (None, ""):  # a stream's empty text is no text
        message["content"] = content if isinstance(content, str) else json.dumps(content)
    if isinstance(body.get("tool_calls"), list):
        message["tool_calls"] = body["tool_calls"]
    return message


def _says(message: dict[str, Any]) -> bool:
    """A message with text, or with a tool call that has arguments (capture was on)."""
    if message.get("content"):
        return True
    for call in message.get("tool_calls") or []:
        fn = call.get("function") if isinstance(call, dict) else None
        if isinstance(fn, dict) and fn.get("arguments") not in (None, "", {}):
            return True
    return False
