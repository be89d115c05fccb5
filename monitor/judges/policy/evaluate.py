"""Runs a domain's policy rules over a conversation and turns them into judges (pure).

:func:`evaluate` makes one forward pass over the events: at every assistant message that calls
tools, each rule guarding a call reads the :class:`~monitor.judges.policy.facts.Facts` known
before the message; then the message and what follows are added to the facts. Cost: one pass
plus one condition per (guarded call, rule), so linear in the conversation.

:class:`RuleSet` holds a domain's rules and :meth:`RuleSet.judges` gives one judge per rule
(named ``policy.<rule id>``) with the deterministic judges' contract
(:class:`~monitor.judges.det_base.DeterministicJudge`): tool-using conversations only, never
raises (a failing condition becomes an ``error`` verdict of that rule), ``only=<event id>``
builds the verdict on that message alone (what the gate asks). The judges of one rule set
share the last evaluation, so a runner calling them one after another on the same conversation
evaluates it once.

**Rejected calls**: a call whose tool result is a rejection
(:func:`~monitor.judges.policy.facts.rejected`: the tool refused it, so it changed nothing) gets
no verdict from the judges: on its own the attempt is no failure, and the agent still reads the
refusal. The exception is a violation ``by_own_write`` (:class:`~.rule.Check`): the conversation's
own earlier write made the call impossible, and the refusal does not bring the spent action
back. Such findings keep ``rejected=True`` (``evaluate`` reports them); the gate, which asks
before the call runs (no result yet), judges every call.

Verdicts: one per (rule, assistant message with a guarded call the rule could check): label 0
with the rule's category when a call breaks it, 1 when every checked call complies; none when
the rule could not tell (missing data). The rationale's first line names the tool call, what
was wrong and the clause; ``evidence`` holds ``rule``, ``clause``, ``calls`` (id, name,
arguments) and ``evidence`` (the tool results and user turns, by event id, with excerpts).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from monitor.contract.events import AgentEvent, ToolCall
from monitor.judges.base import Conversation, Judge, Verdict
from monitor.judges.det_base import DeterministicJudge
from monitor.judges.policy.facts import Facts, rejected
from monitor.judges.policy.rule import Check, Rule

VERSION = "2"  # 2: a call the tool refused gets no verdict (unless spent by an own write)
APPLIES_TO = "tool-using conversations of the rule's domain; assistant messages calling {tools}"


@dataclass(frozen=True, slots=True)
class Finding:
    """One rule on one guarded call: its check, or the error the condition raised."""

    rule: Rule
    message: AgentEvent
    call: ToolCall
    check: Check
    error: str | None = None
    rejected: bool = False


def evaluate(rules: Sequence[Rule], conv: Conversation, only: str | None = None) -> list[Finding]:
    """Every applicable (rule, call) check in ``conv``, in order; with ``only``, those on the
    message with that event id alone (the facts before it are still read in full)."""
    if only is not None:  # only the first event with that id is judged: a call, or nothing
        target = next((e.message for e in conv.events if e.event_id == only), None)
        if target is None or target.role != "assistant" or not target.tool_calls:
            return []
    facts = Facts()
    out: list[Finding] = []
    for event in conv.events:
        msg = event.message
        wanted = only is None or event.event_id == only
        if wanted and msg is not None and msg.role == "assistant" and msg.tool_calls:
            for call in msg.tool_calls:
                for rule in rules:
                    if rule.guards_call(call):
                        out.extend(_run(rule, call, event, facts))
        if only is not None and event.event_id == only:
            break
        facts.observe(event)
    return [
        replace(f, rejected=True)
        if (r := facts.results.get(f.call.id)) is not None and rejected(r)
        else f
        for f in out
    ]


def _run(rule: Rule, call: ToolCall, message: AgentEvent, facts: Facts) -> list[Finding]:
    try:
        check = rule.check(call, message, facts)
    except Exception as exc:  # one rule's bug must not hide the others
        return [Finding(rule, message, call, Check.skip(), f"{type(exc).__name__}: {exc}")]
    return [Finding(rule, message, call, check)] if check.applies else []


class RuleSet:
    """A domain's rules; one judge per rule sharing the last evaluation (module docstring)."""

    def __init__(self, domain: str, rules: Sequence[Rule], source: str) -> None:
        ids = [r.id for r in rules]
        if len(set(ids)) != len(ids):
            raise ValueError(f"duplicate rule ids in {domain}: {ids}")
        self.domain = domain
        self.rules = tuple(rules)
        self.source = source
        self._lock = threading.Lock()
        self._last: tuple[Conversation, str | None, list[Finding]] | None = None

    def findings(self, conv: Conversation, only: str | None = None) -> list[Finding]:
        """:func:`evaluate` of this rule set, reused while the same conversation object (and
        ``only``) is asked again."""
        with self._lock:
            last = self._last
        if last is not None and last[0] is conv and last[1] == only:
            return last[2]
        found = evaluate(self.rules, conv, only)
        with self._lock:
            self._last = (conv, only, found)
        return found

    def judges(self, opt_in: bool = False) -> tuple[Judge, ...]:
        """One :class:`RuleJudge` per default rule; with ``opt_in``, per opt-in rule
        (``Rule.default`` false) instead."""
        return tuple(RuleJudge(self, rule) for rule in self.rules if rule.default != opt_in)


class RuleJudge(DeterministicJudge):
    """The verdicts of one policy rule (see the module docstring)."""

    version = VERSION
    judges_calls_only = True  # a verdict is on a message with a guarded call

    def __init__(self, ruleset: RuleSet, rule: Rule) -> None:
        self.ruleset = ruleset
        self.rule = rule
        self.name = rule.judge_name
        tools = ", ".join(sorted(rule.guards)) or "any tool"
        self.applies_to = APPLIES_TO.format(tools=tools)

    def _judge(self, conv: Conversation, only: str | None = None) -> list[Verdict]:
        found = self.ruleset.findings(conv, only)
        mine = [
            f for f in found if f.rule is self.rule and (not f.rejected or f.check.by_own_write)
        ]
        errors = [f for f in mine if f.error is not None]
        if errors:
            raise RuntimeError(errors[0].error)
        by_message: dict[str, list[Finding]] = {}
        for f in mine:
            by_message.setdefault(f.message.event_id, []).append(f)
        return [self._message_verdict(conv, fs) for fs in by_message.values()]

    def _message_verdict(self, conv: Conversation, findings: list[Finding]) -> Verdict:
        broken = [f for f in findings if not f.check.ok]
        shown = broken or findings
        evidence: dict[str, Any] = {
            "rule": self.rule.id,
            "clause": self.rule.clause,
            "policy": self.ruleset.source,
            "calls": [
                {"call_id": f.call.id, "name": f.call.name, "arguments": f.call.arguments}
                for f in shown
            ],
            "evidence": [ev.to_dict() for f in shown for ev in f.check.evidence],
        }
        first = shown[0]
        if broken:
            rationale = f'{first.call.name}: {first.check.reason} (policy: "{self.rule.clause}")'
        else:
            rationale = f"{first.call.name}: {first.check.reason or 'complies'}"
        return self._verdict(
            conv, first.message, not broken, (self.rule.category,), evidence, rationale
        )
