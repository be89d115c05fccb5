"""``POST /v1/gate``: from a request to a status, a JSON answer and the decision event (pure).

The worker (:mod:`monitor.worker.app`) reads the body, calls :func:`handle_gate` and hands the
decision event to the same producer as ``POST /v1/events``. Status codes (every answer is a
JSON object; client errors carry ``error`` and a machine-readable ``reason``):

- 200 a decision (``decision``, ``calibrated``, ``threshold``, ``findings``, ``latency_ms`` ...);
  for a rule with the inline LLM check the reply carries ``pending`` and the worker awaits
  :func:`finish_gate` for the final answer (the deterministic path stays synchronous);
- 401 ``unauthorized``: ``gate_token`` set and the bearer token missing or wrong (neither it
  nor an API key with the ``gate`` scope, :mod:`monitor.auth`);
- 403 ``out_of_scope`` / ``missing_scope``: an API key for other agents or without ``gate``;
- 403 ``not_loopback``: ``gate_token`` unset and the caller is not on the loopback address;
- 400 ``not_json`` / ``invalid_field`` / ``invalid_history``; 413 ``too_large``;
- 404 ``unknown_agent``: no policy rule covers the agent;
- 503 ``gate_error``: an unexpected failure before any rule could decide (never a 500). An
  unexpected failure once a rule is known answers with that rule's fail-open/closed decision.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from monitor.auth.authorizer import Denied, Grant, out_of_scope
from monitor.contract.events import AgentEvent
from monitor.gate.advised import AdvisorCuts
from monitor.gate.checks import CheckSet
from monitor.gate.decide import Maps, UnknownAgent, decide, decision_event
from monitor.gate.inline_llm import LlmJudgeFn, LlmPending, finish_llm
from monitor.gate.policy import GatePolicy
from monitor.gate.request import GateRequest, GateRequestError, HistoryCache, parse_gate_request
from monitor.ingest.http import token_ok

log = logging.getLogger("monitor.gate.endpoint")
LOOPBACK = ("127.0.0.1", "::1", "localhost")


@dataclass(frozen=True)
class GateLimits:
    """The request limits and the token (from the settings)."""

    token: str | None
    max_body_bytes: int
    max_content_chars: int


@dataclass(frozen=True)
class GateReply:
    """What the endpoint answers, and the decision event to publish (None on an error).
    ``pending`` set: the rule's inline LLM check is still to run (:func:`finish_gate`);
    ``body`` is then the deterministic answer and ``event`` None."""

    status: int
    body: dict[str, Any]
    event: AgentEvent | None = None
    pending: LlmPending | None = None


def is_loopback(peer: str | None) -> bool:
    """True for a loopback caller (127.0.0.0/8, ::1, IPv4-mapped 127.x)."""
    if not peer:
        return False
    host = peer.removeprefix("::ffff:")
    return host in LOOPBACK or host.startswith("127.")


def authorize(authorization: str | None, peer: str | None, token: str | None) -> GateReply | None:
    """None when the caller may use the gate, else the 401/403 reply."""
    if token:
        if token_ok(authorization, token):
            return None
        return GateReply(401, {"error": "missing or wrong bearer token", "reason": "unauthorized"})
    if is_loopback(peer):
        return None
    return GateReply(403, {
        "error": "MONITOR_GATE_TOKEN is unset: the gate answers loopback callers only",
        "reason": "not_loopback",
    })  # fmt: skip


def handle_gate(
    body: bytes | None,
    *,
    authorization: str | None,
    peer: str | None,
    limits: GateLimits,
    policy: GatePolicy,
    maps: Maps,
    checks: CheckSet,
    now: datetime,
    timer: Callable[[], float],
    started: float,
    new_id: Callable[[], str],
    status: dict[str, Any] | None = None,
    history_cache: HistoryCache | None = None,
    cuts: AdvisorCuts | None = None,
    grant: Grant | Denied | None = None,
) -> GateReply:
    """Authorize, parse and decide one request (see the module docstring); never raises.
    ``body`` None means the body was above the limit (413 once authorized); ``status`` (the
    maps' freshness) is merged into a decision's answer; ``history_cache`` (the worker's)
    spares re-validating history events already seen (the same answer as without it);
    ``cuts`` are the advisor's thresholds held in memory. ``grant``: the authorizer's answer
    for the request's credential (:mod:`monitor.auth`): a key's grant covers only its agents
    (403 ``out_of_scope``), a key without the gate scope is refused (403); otherwise the
    shared token or loopback rule below decides."""
    if isinstance(grant, Denied) and grant.status == 403:
        return GateReply(403, {"error": grant.message, "reason": grant.reason})
    denied = None if isinstance(grant, Grant) else authorize(authorization, peer, limits.token)
    if denied is not None:
        return denied
    if body is None:
        return GateReply(413, {"error": f"body above {limits.max_body_bytes} bytes",
                               "reason": "too_large"})  # fmt: skip
    req: GateRequest | None = None
    try:
        req = parse_gate_request(
            body, max_body_bytes=limits.max_body_bytes, max_content_chars=limits.max_content_chars,
            history_cache=history_cache,
        )  # fmt: skip
        if isinstance(grant, Grant) and not grant.allows(req.agent.id):
            refused = {"error": out_of_scope(grant, req.agent.id), "reason": "out_of_scope"}
            return GateReply(403, refused)
        event_id = f"gate:{req.request_id or new_id()}"
        decision = decide(req, policy, maps, checks, event_id=event_id, now=now, timer=timer,
                          started=started, cuts=cuts)  # fmt: skip
    except GateRequestError as exc:
        return GateReply(exc.status, exc.as_dict())
    except UnknownAgent as exc:
        return GateReply(404, {"error": str(exc), "reason": "unknown_agent"})
    except Exception as exc:  # a bug must not become a 500: the rule's fail mode answers
        log.exception("the gate could not decide")
        return _failed(req, policy, exc, (timer() - started) * 1000.0)
    answer = {**decision.answer(), **(status or {})}
    rule = policy.rules[decision.rule_index]
    if rule.uses_llm and decision.payload.degraded is None:  # the async path (inline_llm)
        return GateReply(200, answer, None, LlmPending(req, decision, rule, now, started,
                                                       status or {}))  # fmt: skip
    return GateReply(200, answer, decision_event(req, decision, now))


async def finish_gate(
    reply: GateReply, judge: LlmJudgeFn | None, timer: Callable[[], float]
) -> GateReply:
    """The final reply of a ``pending`` one (the rule's inline LLM check awaited, see
    :mod:`monitor.gate.inline_llm`); any other reply as is. Never raises: an unexpected
    failure answers with the rule's fail-open/closed choice."""
    p = reply.pending
    if p is None:
        return reply
    try:
        answer, event = await finish_llm(p, judge, timer)
    except Exception as exc:  # a bug must not become a 500
        log.exception("the gate's LLM check failed")
        why = f"{type(exc).__name__}: {exc}"[:300]
        return GateReply(200, {
            "decision": "proceed" if p.rule.fail == "open" else "escalate",
            "degraded": f"fail {p.rule.fail}: gate error ({why})",
            "policy_version": p.decision.payload.policy_version, "findings": [],
            "latency_ms": round((timer() - p.started) * 1000.0, 3),
        })  # fmt: skip
    return GateReply(200, answer, event)


def _failed(
    req: GateRequest | None, policy: GatePolicy, exc: Exception, latency_ms: float
) -> GateReply:
    rule = policy.rule_for(req.agent.id, req.domain, req.tier) if req is not None else None
    why = f"{type(exc).__name__}: {exc}"[:300]
    if rule is None:
        return GateReply(503, {"error": f"the gate could not decide ({why})",
                               "reason": "gate_error"})  # fmt: skip
    decision = "proceed" if rule.fail == "open" else "escalate"
    return GateReply(200, {
        "decision": decision, "degraded": f"fail {rule.fail}: gate error ({why})",
        "policy_version": policy.version, "findings": [], "latency_ms": round(latency_ms, 3),
    })  # fmt: skip
