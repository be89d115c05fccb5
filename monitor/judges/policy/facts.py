"""What a policy rule may read: the conversation before a tool call (pure; no I/O imports).

:class:`Facts` is built in one forward pass over a conversation's events. At each assistant
message the rules read the facts as they are *before* that message: the user turns so far, the
earlier tool calls and their results, and the latest state of every entity a tool returned:

- ``reservation`` (a JSON object with ``reservation_id`` and ``flights``),
- ``user`` (``user_id`` and ``payment_methods``),
- ``order`` (``order_id``, ``items`` and ``status``),
- ``product`` (``product_id`` and ``variants``),
- ``flight_status`` (the text ``get_flight_status`` returned, by ``(flight_number, date)``).

A later result about the same entity replaces the earlier one (a reservation returned by an
update is its new state). Tool outputs that are not JSON objects are kept only as results.
A result is a **rejection** (:func:`rejected`) when it is marked as an error or its text starts
with ``Error`` (how tau2-bench tools answer a call they refuse, also when the run did not mark
the error): a rejected call changed nothing.
Parsing is memoized on the output text, so running many rules over a conversation parses each
output once.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from monitor.contract.events import AgentEvent, ToolCall

#: entity kind -> (key field, other fields that must be present)
ENTITY_SHAPES: dict[str, tuple[str, tuple[str, ...]]] = {
    "reservation": ("reservation_id", ("flights",)),
    "user": ("user_id", ("payment_methods",)),
    "order": ("order_id", ("items", "status")),
    "product": ("product_id", ("variants",)),
}


@lru_cache(maxsize=4096)
def parse_output(text: str) -> Any:
    """A tool output parsed as JSON (None when it is not JSON). Memoized: do not mutate."""
    if not text or text[0] not in "{[":
        return None
    try:
        return json.loads(text)
    except ValueError:
        return None


def rejected(result: AgentEvent) -> bool:
    """True when the tool result ``result`` says the call was refused (module docstring)."""
    tr = result.tool_result
    if tr is None:
        return False
    return not tr.ok or (tr.content or "").lstrip().startswith("Error")


@dataclass(frozen=True, slots=True)
class Known:
    """An entity as a tool result last showed it."""

    event: AgentEvent
    value: dict[str, Any]


@dataclass
class Facts:
    """The conversation before the current assistant message (see the module docstring)."""

    user_turns: list[AgentEvent] = field(default_factory=list)
    calls: list[tuple[AgentEvent, ToolCall]] = field(default_factory=list)
    results: dict[str, AgentEvent] = field(default_factory=dict)
    entities: dict[tuple[str, str], Known] = field(default_factory=dict)
    flight_status: dict[tuple[str, str], tuple[AgentEvent, str]] = field(default_factory=dict)
    _call_by_id: dict[str, ToolCall] = field(default_factory=dict)

    def get(self, kind: str, key: object) -> Known | None:
        """The latest ``kind`` entity with key ``key`` (None when no tool returned it)."""
        return self.entities.get((kind, str(key))) if key is not None else None

    def all(self, kind: str) -> list[Known]:
        """Every ``kind`` entity known, oldest first."""
        return [v for (k, _), v in self.entities.items() if k == kind]

    def last_user_turn(self) -> AgentEvent | None:
        return self.user_turns[-1] if self.user_turns else None

    def succeeded(self, name: str) -> list[tuple[AgentEvent, ToolCall, AgentEvent]]:
        """Earlier calls of tool ``name`` whose result is recorded and not a rejection:
        (message, call, result)."""
        out = []
        for message, call in self.calls:
            result = self.results.get(call.id)
            if call.name == name and result is not None and not rejected(result):
                out.append((message, call, result))
        return out

    def user_text(self) -> str:
        """Every user turn so far, lower-cased and joined."""
        return "\n".join((e.message.content or "").lower() for e in self.user_turns if e.message)

    # -- building --------------------------------------------------------------------------

    def observe(self, event: AgentEvent) -> None:
        """Add ``event`` (call after the rules have read the facts before it)."""
        msg = event.message
        if msg is not None:
            if msg.role == "user" and msg.content:
                self.user_turns.append(event)
            elif msg.role == "assistant":
                for call in msg.tool_calls:
                    self.calls.append((event, call))
                    self._call_by_id[call.id] = call
            return
        tr = event.tool_result
        if tr is None:
            return
        self.results[tr.call_id] = event
        if not tr.content or rejected(event):
            return
        asked = self._call_by_id.get(tr.call_id)
        if tr.name == "get_flight_status" and asked is not None:
            key = (str(asked.arguments.get("flight_number")), str(asked.arguments.get("date")))
            self.flight_status[key] = (event, tr.content.strip().strip('"').lower())
            return
        parsed = parse_output(tr.content)
        if isinstance(parsed, dict):
            self._remember(event, parsed)

    def _remember(self, event: AgentEvent, value: dict[str, Any]) -> None:
        for kind, (key, needs) in ENTITY_SHAPES.items():
            if key in value and all(n in value for n in needs):
                self.entities.pop((kind, str(value[key])), None)  # re-insert: newest last
                self.entities[(kind, str(value[key]))] = Known(event, value)
                return
