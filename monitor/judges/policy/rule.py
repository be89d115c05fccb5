"""The policy-rule format: one rule guards one kind of tool call (pure; no I/O imports).

A :class:`Rule` is data: which tool calls it guards (``guards``), which earlier tool results and
user turns it reads (``reads``: tool names, and "user turns"), the policy sentence it enforces
(``clause``, quoted verbatim from the domain's policy text), the failure category, and its
condition (``check``): a typed function of the guarded call, the assistant message making it
and the :class:`~monitor.judges.policy.facts.Facts` known before that message.

Why Python and not YAML: a condition reads parsed tool results (a reservation's cabin and
creation time, a member tier's bag allowance table, a gift card's balance) and does arithmetic on
them. In YAML that needs an expression language of its own with its own errors; as a typed
function, mypy checks it, a test runs it, and a rule set stays a flat list of values that the
judge, the gate and ``monitor judges`` read the same way.

A condition returns a :class:`Check`:

- ``applies=False``: the rule cannot tell (the data it needs is not in the conversation, e.g. no
  reservation details were fetched). Missing data is never a violation: no verdict.
- ``applies=True, ok=True``: checked, compliant.
- ``applies=True, ok=False``: a violation; ``reason`` says what was wrong in one line and
  ``evidence`` names the tool results and user turns it rests on (:class:`Evidence`).
  ``by_own_write=True`` when the violation rests on what an earlier successful write of the
  same conversation did (an order this conversation already returned, exchanged or changed):
  the agent spent the one action the policy allows, so even a call the tool then refuses
  leaves a request that can no longer be served.

``default=False`` on a rule makes it opt-in: it is measured, but a domain's default judges
(the "any judge" set) leave it out (see the domain modules).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from monitor.contract.events import AgentEvent, ToolCall

if TYPE_CHECKING:
    from monitor.judges.policy.facts import Facts

MAX_EXCERPT = 240


@dataclass(frozen=True, slots=True)
class Evidence:
    """One piece of evidence: a tool result (``kind="tool_result"``) or a user turn
    (``kind="user_turn"``), by event id, with a short excerpt of what it said."""

    kind: str
    event_id: str
    excerpt: str
    tool: str | None = None

    @classmethod
    def of(cls, event: AgentEvent, excerpt: str) -> Evidence:
        """Evidence from ``event`` (a tool result or a user message)."""
        tool = event.tool_result.name if event.tool_result is not None else None
        kind = "tool_result" if tool is not None else "user_turn"
        return cls(kind, event.event_id, excerpt[:MAX_EXCERPT], tool)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"kind": self.kind, "event_id": self.event_id}
        if self.tool is not None:
            out["tool"] = self.tool
        out["excerpt"] = self.excerpt
        return out


@dataclass(frozen=True, slots=True)
class Check:
    """A rule's answer on one guarded call (see the module docstring)."""

    applies: bool
    ok: bool = True
    reason: str = ""
    evidence: tuple[Evidence, ...] = ()
    by_own_write: bool = False

    @classmethod
    def skip(cls, why: str = "") -> Check:
        """Not applicable: the data the rule needs is not in the conversation."""
        return cls(False, True, why)

    @classmethod
    def passed(cls, why: str = "", *evidence: Evidence) -> Check:
        return cls(True, True, why, evidence)

    @classmethod
    def failed(cls, why: str, *evidence: Evidence, by_own_write: bool = False) -> Check:
        return cls(True, False, why, evidence, by_own_write)


Condition = Callable[[ToolCall, AgentEvent, "Facts"], Check]


@dataclass(frozen=True, slots=True)
class Rule:
    """One policy rule (see the module docstring).

    ``id`` is dotted, domain first (``airline.cancel.eligibility``); the judge that runs it is
    named ``policy.<id>``. ``guards`` are tool names; the empty set guards every tool call.
    ``check`` gets the call, the assistant message that makes it, and the facts before it.
    """

    id: str
    guards: frozenset[str]
    reads: tuple[str, ...]
    clause: str
    check: Condition
    category: str = "policy_violation"
    default: bool = True

    def guards_call(self, call: ToolCall) -> bool:
        """True when this rule checks calls of ``call.name``."""
        return not self.guards or call.name in self.guards

    @property
    def judge_name(self) -> str:
        return f"policy.{self.id}"
