"""A neutral span model the OTLP decoder fills and the mapping reads (pure, no I/O imports).

``Span`` holds one OTLP span with its attribute values already converted to Python (string,
bool, int, float, list, dict; bytes as hex), ids as lowercase hex, times in Unix nanoseconds,
and the attributes of the resource that emitted it. A span whose ids have the wrong length
keeps them as given; the mapping rejects it (OTLP partial success) instead of the decoder.
A span is not changed once made (its attributes neither): what is worked out of it alone
(``kind``, ``well_formed``, ``naming``) is worked out once, on first use, and kept on it.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from functools import cached_property
from typing import Any, NamedTuple

STATUS_UNSET = 0
STATUS_OK = 1
STATUS_ERROR = 2
CONVERSATION_ATTRIBUTES = ("gen_ai.conversation.id", "session.id")
AGENT_ATTRIBUTES = ("gen_ai.agent.id", "gen_ai.agent.name", "agent.name")
AGENT_NAME_ATTRIBUTES = ("gen_ai.agent.name", "agent.name")
LLM_OPERATIONS = frozenset({"chat", "text_completion", "generate_content"})
AGENT_OPERATIONS = frozenset({"invoke_agent", "invoke_workflow"})


@dataclass(frozen=True)
class SpanEvent:
    """A span event (e.g. ``exception``, ``gen_ai.choice``) with its attributes."""

    name: str
    time_unix_nano: int
    attributes: dict[str, Any] = field(default_factory=dict)


class Naming(NamedTuple):
    """What one span names itself, without its ancestors (None where it names nothing)."""

    agent: Any  # see ``Span.naming``
    agent_name: Any
    agent_version: Any
    conversation: Any


@dataclass(frozen=True)
class Span:
    """One OTLP span; ``trace_id`` is 32 hex chars and ``span_id`` 16 when well formed."""

    trace_id: str
    span_id: str
    parent_span_id: str
    name: str
    start_unix_nano: int
    end_unix_nano: int
    attributes: dict[str, Any] = field(default_factory=dict)
    events: tuple[SpanEvent, ...] = ()
    status_code: int = STATUS_UNSET
    status_message: str = ""
    resource: dict[str, Any] = field(default_factory=dict)
    parent_remote: bool = False  # the parent is in another process (OTLP span flags)

    @property
    def is_local_root(self) -> bool:
        """No parent, or a parent in another process: the top of this process' trace tree."""
        return not self.parent_span_id or self.parent_remote

    def to_json(self) -> str:
        """The span as JSON (for the pending store); ``from_json`` reads it back."""
        return json.dumps(asdict(self), default=str)

    @staticmethod
    def from_json(text: str) -> Span:
        data = json.loads(text)
        events = tuple(SpanEvent(**e) for e in data.pop("events", []))
        return Span(**data, events=events)

    def attr(self, *names: str) -> Any:
        """The value of the first of ``names`` present on the span (None if none is)."""
        attributes = self.attributes
        for name in names:
            value = attributes.get(name)
            if value is not None and value != "":
                return value
        return None

    @cached_property
    def kind(self) -> str:
        """``agent``, ``llm``, ``tool`` or ``other`` from the conventions' span kind attributes
        (``gen_ai.operation.name``, ``openinference.span.kind``, ``traceloop.span.kind``)."""
        op = self.attr("gen_ai.operation.name")
        if op in AGENT_OPERATIONS:
            return "agent"
        oi = str(self.attr("openinference.span.kind", "traceloop.span.kind") or "").upper()
        if oi == "AGENT":
            return "agent"
        if op in LLM_OPERATIONS or oi == "LLM" or self.attr("llm.request.type") == "chat":
            return "llm"
        if op == "execute_tool" or oi == "TOOL":
            return "tool"
        return "other"

    @cached_property
    def naming(self) -> Naming:
        """The agent (``AGENT_ATTRIBUTES``, first present), agent name, version and
        conversation the span names itself. OpenLLMetry's spans (``traceloop.span.kind`` set)
        carry LangChain's run id, new at every invocation, as ``gen_ai.agent.id``: there the
        agent is its name."""
        name = self.attr(*AGENT_NAME_ATTRIBUTES)
        traceloop = "traceloop.span.kind" in self.attributes
        agent = name if traceloop else self.attr(*AGENT_ATTRIBUTES)
        return Naming(
            agent, name, self.attr("gen_ai.agent.version"), self.attr(*CONVERSATION_ATTRIBUTES)
        )

    @cached_property
    def well_formed(self) -> str | None:
        """None when the ids are valid hex of the OTLP lengths, else the reason."""
        if len(self.trace_id) != 32 or self.trace_id == "0" * 32 or not _is_hex(self.trace_id):
            return f"span {self.name!r}: trace_id must be 16 non-zero bytes"
        if len(self.span_id) != 16 or self.span_id == "0" * 16 or not _is_hex(self.span_id):
            return f"span {self.name!r}: span_id must be 8 non-zero bytes"
        return None


def _is_hex(text: str) -> bool:
    try:
        int(text, 16)
    except ValueError:
        return False
    return True
