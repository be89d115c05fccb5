"""The inline LLM check of a gate rule that lists ``llm`` among its checks (pure, async).

Off by default: only a rule with ``llm`` in ``checks`` runs it. The deterministic decision
(:func:`monitor.gate.decide.decide`) is made first, synchronously; when its rule uses the LLM
(and the decision is not already the fail-open/closed choice), the endpoint answers with a
:class:`LlmPending` and the worker awaits :func:`finish_llm`, which sends the conversation and
the proposed message to the LLM judge (any ``async (Conversation) -> list[Verdict]``: the
worker's :class:`monitor.judges.llm.LLMJudge`, OpenAI-compatible over httpx, without retries)
under the rule's ``llm_timeout_ms``. The event loop is never blocked: the call is awaited.

How the LLM's answer changes the decision:

- the judge labels the proposed message failing (label 0): a finding (judge ``llm``, its
  category and rationale) and the rule's ``on_check_failure`` (the stricter of the two wins);
- it passes: the deterministic decision stands;
- it does not answer within ``llm_timeout_ms``, or answers with an error (HTTP error, open
  circuit, malformed output), or no judge is configured: ``on_llm_timeout`` decides:
  ``skip`` keeps the deterministic decision, ``proceed`` answers proceed, ``revise`` /
  ``escalate`` the stricter of it and the deterministic decision; ``degraded`` says so, e.g.
  ``"llm timeout after 200 ms: on_llm_timeout revise"``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from monitor.contract.events import AgentEvent, GateFinding
from monitor.gate.decide import (
    MAX_CRITIQUE,
    GateDecision,
    decision_event,
    proposed_message,
    strictest,
)
from monitor.gate.policy import GateRule
from monitor.gate.request import GateRequest
from monitor.judges.base import Conversation, Verdict

#: What the gate calls: the LLM judge's ``judge`` method, or anything with its signature.
LlmJudgeFn = Callable[[Conversation], Awaitable[list[Verdict]]]


@dataclass(frozen=True)
class LlmPending:
    """A deterministic decision waiting for the rule's inline LLM check."""

    req: GateRequest
    decision: GateDecision
    rule: GateRule
    now: datetime
    started: float
    status: dict[str, Any] = field(default_factory=dict)


def _finding(v: Verdict) -> GateFinding:
    critique = (v.rationale or "the LLM judge labelled the message failing").splitlines()[0]
    category = next((c for c in v.categories if ":" in c), None) or (
        v.categories[0] if v.categories else None
    )
    return GateFinding(judge=v.judge, category=category, critique=critique[:MAX_CRITIQUE])


async def _ask(
    pending: LlmPending, judge: LlmJudgeFn | None, timer: Callable[[], float]
) -> tuple[GateFinding | None, str | None]:
    """(a finding or None, the failure or None) for the proposed message."""
    if judge is None:
        return None, "no LLM judge configured"
    req = pending.req
    message = proposed_message(req, pending.decision.event_id + ":message", pending.now)
    history = [e for e in req.history if e.conversation_id == req.conversation_id]
    budget = pending.rule.llm_timeout_ms
    t0 = timer()
    try:
        async with asyncio.timeout(budget / 1000.0):
            verdicts = await judge(Conversation.of([*history, message]))
    except TimeoutError:
        return None, f"timeout after {(timer() - t0) * 1000.0:.0f} ms (budget {budget:g} ms)"
    mine = [v for v in verdicts if v.item_id in (message.event_id, None)]
    errors = [v for v in mine if v.status == "error"]
    if errors:
        return None, f"error {errors[0].error}"
    failing = next((v for v in mine if v.label == 0 and v.item_id == message.event_id), None)
    return (None if failing is None else _finding(failing)), None


async def finish_llm(
    pending: LlmPending, judge: LlmJudgeFn | None, timer: Callable[[], float]
) -> tuple[dict[str, Any], AgentEvent]:
    """The final answer and decision event once the LLM check answered or timed out (see the
    module docstring). Never raises for the judge's failures (only for cancellation)."""
    finding, failure = await _ask(pending, judge, timer)
    p, rule = pending.decision.payload, pending.rule
    decision: str = p.decision
    findings, degraded = list(p.findings), p.degraded
    if finding is not None:
        findings.append(finding)
        decision = strictest([decision, rule.on_check_failure])
    if failure is not None:
        fallback = rule.on_llm_timeout
        if fallback == "proceed":
            decision = "proceed"
        elif fallback != "skip":
            decision = strictest([decision, fallback])
        degraded = f"llm {failure}: on_llm_timeout {fallback}"[:MAX_CRITIQUE]
    payload = p.model_copy(
        update={
            "decision": decision,
            "findings": findings,
            "degraded": degraded,
            "latency_ms": round((timer() - pending.started) * 1000.0, 3),
        }
    )
    final = GateDecision(pending.decision.event_id, payload, pending.decision.rule_index)
    answer = {**final.answer(), **pending.status}
    return answer, decision_event(pending.req, final, pending.now)
