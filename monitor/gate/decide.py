"""The gate's decision: stated confidence + inline checks + policy -> proceed/revise/escalate.

Pure (no I/O): everything the decision needs is passed in (the policy, the isotonic maps held
in memory, the inline checks, a monotonic ``timer`` in seconds and the aware ``now``).

How :func:`decide` decides (docs/gate.md):

1. The first policy rule matching (agent, domain, tier); none -> :class:`UnknownAgent`.
2. ``calibrated``: the agent x domain isotonic map (else the agent's all-domains map, domain
   ``""``) applied to the stated confidence; without a map it is the stated confidence and
   ``map_version`` is None (the answer says ``calibrated: false``).
3. The rule's inline checks run on the conversation so far (``history``) plus the proposed
   message; each check that *fails on the proposed message* is a finding (judge, category, the
   judge's one-line rationale as the critique). A finding -> ``on_check_failure``.
4. ``calibrated < threshold`` -> ``below_threshold``. With neither, ``proceed``; with both,
   the stricter action (escalate > revise).
5. Undecidable in time: a check that errors, or checks running past ``deadline_ms`` (their own
   wall time, from the first check to the last: not the request's wait before them), make the
   decision the rule's ``fail`` choice (open -> proceed, closed -> escalate) with ``degraded``
   naming why; the findings found are still reported.
6. A rule in ``mode: shadow`` decides the same way; the decision event records it with
   ``enforced: false`` and the answer is ``proceed``, the would-be decision beside it
   (``shadow_decision``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from monitor.analytics.recalibration import IsotonicMap
from monitor.contract.events import AgentEvent, Context, GateFinding, GatePayload, MessagePayload
from monitor.core.errors import UnknownAgent
from monitor.gate.advised import AdvisorCuts, advised_threshold
from monitor.gate.checks import CheckSet, CheckStates, verdicts_on
from monitor.gate.policy import GatePolicy, GateRule
from monitor.gate.request import GateRequest
from monitor.judges.base import Conversation

_SEVERITY = {"proceed": 0, "revise": 1, "escalate": 2}
MAX_CRITIQUE = 300


@dataclass(frozen=True)
class MapEntry:
    """A fitted map held in memory and its stored version."""

    map: IsotonicMap
    version: int


#: (agent_id, domain) -> map; domain "" is the agent's map over all domains.
Maps = Mapping[tuple[str, str], MapEntry]


@dataclass(frozen=True)
class GateDecision:
    """A decision and everything the answer and the decision event carry."""

    event_id: str
    payload: GatePayload
    rule_index: int

    def answer(self) -> dict[str, Any]:
        """The JSON answer of ``POST /v1/gate``: for a shadow rule's decision (not
        ``enforced``) ``proceed``, with the decision made as ``shadow_decision``."""
        p = self.payload
        shadow = {} if p.enforced else {"shadow_decision": p.decision}
        return {
            "decision": p.decision if p.enforced else "proceed",
            "enforced": p.enforced,
            **shadow,
            "confidence": p.confidence,
            "calibrated": p.map_version is not None,
            "calibrated_confidence": p.calibrated,
            "map_version": p.map_version,
            "threshold": p.threshold,
            "threshold_source": p.threshold_source,
            "findings": [f.model_dump() for f in p.findings],
            "policy_version": p.policy_version,
            "degraded": p.degraded,
            "latency_ms": p.latency_ms,
            "decision_id": self.event_id,
        }


def lookup_map(maps: Maps, agent_id: str, domain: str | None) -> MapEntry | None:
    """The agent x domain map, else the agent's all-domains map, else None."""
    if domain:
        found = maps.get((agent_id, domain))
        if found is not None:
            return found
    return maps.get((agent_id, ""))


def proposed_message(req: GateRequest, event_id: str, now: datetime) -> AgentEvent:
    """The message the agent is about to send, as the event the checks read (ts not before
    the latest history event, so it sorts last)."""
    latest = max((e.ts for e in req.history), default=now)
    return AgentEvent(
        event_id=event_id,
        type="message",
        ts=max(now, latest),
        conversation_id=req.conversation_id,
        agent=req.agent,
        context=Context(domain=req.domain, tier=req.tier),
        turn=max((e.turn for e in req.history if e.turn is not None), default=-1) + 1,
        message=MessagePayload(
            role="assistant",
            content=req.content,
            tool_calls=list(req.tool_calls),
            confidence=req.confidence,
        ),
    )


def _run_checks(
    req: GateRequest,
    rule: GateRule,
    checks: CheckSet,
    message: AgentEvent,
    states: CheckStates | None = None,
) -> tuple[list[GateFinding], list[str]]:
    history = [e for e in req.history if e.conversation_id == req.conversation_id]
    conv = Conversation.of([*history, message])
    findings: list[GateFinding] = []
    errors: list[str] = []
    calls = bool(req.tool_calls)
    judges = checks.judges(rule.checks, req.domain)
    if states is None:
        answers = [verdicts_on(judge, conv, message.event_id, calls) for judge in judges]
    else:
        answers = states.verdicts(judges, conv, message.event_id, calls)
    for verdicts in answers:
        for v in verdicts:
            if v.status == "error":
                errors.append(f"{v.judge}: {v.error}")
            elif v.item_id == message.event_id and v.label == 0:
                critique = (v.rationale or "check failed").splitlines()[0][:MAX_CRITIQUE]
                category = next((c for c in v.categories if ":" in c), None) or (
                    v.categories[0] if v.categories else None
                )
                findings.append(GateFinding(judge=v.judge, category=category, critique=critique))
    return findings, errors


def decide(
    req: GateRequest,
    policy: GatePolicy,
    maps: Maps,
    checks: CheckSet,
    *,
    event_id: str,
    now: datetime,
    timer: Callable[[], float],
    started: float | None = None,
    cuts: AdvisorCuts | None = None,
    check_states: CheckStates | None = None,
) -> GateDecision:
    """Decide on ``req`` (see the module docstring). ``started`` is the ``timer()`` value when
    the request arrived (default: now), so ``latency_ms`` covers the parsing too. ``cuts``:
    the advisor's thresholds held in memory, for rules whose threshold is the advisor's
    (:mod:`monitor.gate.advised`; without them such a rule uses its fallback).
    ``check_states``: the checks' states kept per conversation (:class:`CheckStates`; the
    same verdicts as without them).

    Raises:
        UnknownAgent: no rule of ``policy`` covers the agent/domain/tier.
    """
    t0 = timer() if started is None else started
    index, rule = _rule(policy, req)
    entry = lookup_map(maps, req.agent.id, req.domain)
    calibrated = req.confidence if entry is None else entry.map.apply_one(req.confidence)
    calibrated = min(1.0, max(0.0, calibrated))
    message = proposed_message(req, event_id + ":message", now)
    checks_started = timer()  # the deadline is the checks' time, not the queueing before them
    findings, errors = _run_checks(req, rule, checks, message, check_states)
    elapsed_ms = (timer() - checks_started) * 1000.0
    actions = ["proceed"]
    if findings:
        actions.append(rule.on_check_failure)
    threshold, source = rule.fixed_threshold, f"policy {policy.source} rules[{index}]"
    if rule.advisor is not None:
        threshold, source = advised_threshold(cuts, index, rule, req.agent.id, req.domain)
    if calibrated < threshold:
        actions.append(rule.below_threshold)
    decision = strictest(actions)
    degraded: str | None = None
    if errors or elapsed_ms > rule.deadline_ms:
        why = (
            f"check error ({errors[0]})"
            if errors
            else (f"checks took {elapsed_ms:.1f} ms, deadline {rule.deadline_ms:g} ms")
        )
        degraded = f"fail {rule.fail}: {why}"[:MAX_CRITIQUE]
        decision = "proceed" if rule.fail == "open" else "escalate"
    payload = GatePayload(
        decision=decision,  # type: ignore[arg-type]
        confidence=req.confidence,
        calibrated=calibrated,
        map_version=None if entry is None else entry.version,
        threshold=threshold,
        threshold_source=source,
        findings=findings,
        policy_version=policy.version,
        latency_ms=round((timer() - t0) * 1000.0, 3),
        degraded=degraded,
        enforced=rule.mode == "enforce",
    )
    return GateDecision(event_id=event_id, payload=payload, rule_index=index)


def _rule(policy: GatePolicy, req: GateRequest) -> tuple[int, GateRule]:
    for i, rule in enumerate(policy.rules):
        if rule.matches(req.agent.id, req.domain, req.tier):
            return i, rule
    raise UnknownAgent(
        f"no gate policy rule covers agent {req.agent.id!r}"
        f" (domain {req.domain!r}, tier {req.tier}); policy {policy.version}"
    )


def decision_event(req: GateRequest, decision: GateDecision, now: datetime) -> AgentEvent:
    """The agent-event/v1 ``gate`` event recording ``decision`` (stored like any event and
    joined with the conversation's outcome by ``conversation_id``)."""
    return AgentEvent(
        event_id=decision.event_id,
        type="gate",
        ts=now,
        conversation_id=req.conversation_id,
        agent=req.agent,
        context=Context(domain=req.domain, tier=req.tier),
        gate=decision.payload,
    )


def strictest(decisions: Sequence[str]) -> str:
    """The strictest of ``decisions`` (escalate > revise > proceed)."""
    return max(decisions, key=lambda a: _SEVERITY[a], default="proceed")
