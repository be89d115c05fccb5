"""``POST /v1/gate``: from a request to a status, a JSON answer and the decision event (pure).

The gate process (:mod:`monitor.gate.answering`) calls :func:`receive_gate` with the request's
headers, a chunk reader and its authorizer (bound to the ``gate`` action), and hands the
decision event to its decision outbox. :func:`receive_gate` refuses before working: the
caller is authorized (:func:`gate_rule` over the authorizer's answer) and rate-limited
(:func:`monitor.auth.admission.admit`) before the body is read, the media type
(``application/json`` or none) and the encoding are checked, and the body is read under its
limits (size, decompression, deadline). Status codes (every answer is a JSON object; client
errors carry ``error`` and a machine-readable ``reason``):

- 200 a decision (``decision``, ``calibrated``, ``threshold``, ``findings``, ``latency_ms`` ...);
  for a rule with the inline LLM check the reply carries ``pending`` and the server awaits
  :func:`finish_gate` for the final answer (the deterministic path stays synchronous);
- 401 ``unauthorized``: ``gate_token`` set and the bearer token missing or wrong (neither it
  nor an API key with the ``gate`` scope, :mod:`monitor.auth`);
- 403 ``out_of_scope`` / ``missing_scope``: an API key for other agents or without ``gate``;
- 403 ``not_loopback``: ``gate_token`` unset, no API key, and the caller is not on the
  loopback address;
- 400 ``not_json`` / ``invalid_field`` / ``invalid_history`` / ``bad_encoding``; 413
  ``too_large`` (declared, streamed or inflated body above the limit); 408 ``timeout`` (the
  body did not arrive within ``read_timeout_s``); 415 ``unsupported_media`` /
  ``unsupported_encoding``; 429 ``rate_limited`` (with ``Retry-After``: the credential's rate,
  or too many failed authentications from the peer address);
- 404 ``unknown_agent``: no policy rule covers the agent;
- 503 ``gate_error``: an unexpected failure before any rule could decide (never a 500). An
  unexpected failure once a rule is known answers with that rule's fail-open/closed decision.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from monitor.auth.admission import Authorize, admit
from monitor.auth.authorizer import Denied, Grant, out_of_scope
from monitor.contract.events import AgentEvent
from monitor.core.errors import (
    BadEncoding,
    BodyTimeout,
    BodyTooLarge,
    GateRequestError,
    UnknownAgent,
    UnsupportedEncoding,
)
from monitor.core.http_body import BodyLimits, ReadChunk, read_body
from monitor.core.http_guard import Guard, Refusal, unreadable
from monitor.core.throttled_log import ThrottledExceptionLog
from monitor.gate.advised import AdvisorCuts
from monitor.gate.checks import CheckSet, CheckStates
from monitor.gate.decide import Maps, decide, decision_event
from monitor.gate.inline_llm import LlmJudgeFn, LlmPending, finish_llm
from monitor.gate.policy import GatePolicy, GateRule
from monitor.gate.request import GateRequest, HistoryCache, parse_gate_request

log = logging.getLogger("monitor.gate.endpoint")
# failures a request can provoke: a traceback once a minute per kind, not per request
_failures = ThrottledExceptionLog(log)
LOOPBACK = ("127.0.0.1", "::1", "localhost")
LOOPBACK_CALLER = "loopback"  # the identity of a loopback caller granted without a credential
MEDIA_TYPES = ("application/json", "")


@dataclass(frozen=True)
class GateLimits:
    """The request limits (from the settings); ``loopback_open``: ``gate_token`` is unset, so a
    loopback caller without a credential may ask (:func:`gate_rule`)."""

    max_body_bytes: int
    max_content_chars: int
    read_timeout_s: float = 10.0
    max_inflate_ratio: float = 100.0
    loopback_open: bool = False

    @property
    def body(self) -> BodyLimits:
        return BodyLimits(self.max_body_bytes, self.max_inflate_ratio, self.read_timeout_s)


@dataclass(frozen=True)
class GateReply:
    """What the endpoint answers, and the decision event to publish (None on an error).
    ``pending`` set: the rule's inline LLM check is still to run (:func:`finish_gate`);
    ``body`` is then the deterministic answer and ``event`` None."""

    status: int
    body: dict[str, Any]
    event: AgentEvent | None = None
    pending: LlmPending | None = None
    headers: dict[str, str] = field(default_factory=dict)
    rule: int | None = None  # the index of the policy rule that decided (None: no rule)
    agent_id: str | None = None

    def degraded_kinds(self) -> list[str]:
        """How this answer was not made the ordinary way (:func:`degraded_kinds`)."""
        return degraded_kinds(self.body) if self.rule is not None else []


def degraded_kinds(body: Mapping[str, Any]) -> list[str]:
    """The kinds of a decision's degradation, from its answer: ``fail_open`` / ``fail_closed``
    (the rule's fail choice decided: a check error, the deadline, a gate error), ``deadline``
    (the checks ran past ``deadline_ms``), ``llm_timeout`` / ``llm_error`` (``on_llm_timeout``
    decided), ``maps_stale`` (the maps' last refresh failed). Empty for an ordinary answer."""
    kinds = []
    degraded = str(body.get("degraded") or "")
    if degraded.startswith("fail open"):
        kinds.append("fail_open")
    elif degraded.startswith("fail closed"):
        kinds.append("fail_closed")
    if degraded.startswith("fail ") and ", deadline " in degraded:
        kinds.append("deadline")
    if degraded.startswith("llm timeout"):
        kinds.append("llm_timeout")
    elif degraded.startswith("llm "):
        kinds.append("llm_error")
    if "maps_stale" in body:
        kinds.append("maps_stale")
    return kinds


def _refused(refusal: Refusal) -> GateReply:
    body = {"error": refusal.message, "reason": refusal.reason}
    return GateReply(refusal.status, body, headers=dict(refusal.headers))


async def receive_gate(
    *,
    headers: Mapping[str, str],
    peer: str | None,
    read_chunk: ReadChunk,
    authorize: Authorize,
    limits: GateLimits,
    guard: Guard,
    decide_body: Callable[[bytes | None, Grant], GateReply],
) -> GateReply:
    """Authorize, rate-limit, check the media type, read the body, then ``decide_body`` (the
    worker's :func:`decide_gate` with its state and the request's grant); never raises for a
    request."""
    answer = gate_rule(await authorize(headers.get("Authorization")), peer, limits.loopback_open)
    grant = admit(answer, peer, guard)
    if isinstance(grant, Refusal):
        return _refused(grant)
    unread = unreadable(headers, MEDIA_TYPES)
    if unread is not None:
        return _refused(unread)
    try:
        body: bytes | None = await read_body(
            read_chunk,
            content_length=headers.get("Content-Length"),
            content_encoding=headers.get("Content-Encoding"),
            limits=limits.body,
        )
    except UnsupportedEncoding as exc:
        return GateReply(415, {"error": str(exc), "reason": "unsupported_encoding"})
    except BodyTooLarge:
        body = None  # the 413 of decide_body
    except BodyTimeout as exc:
        return GateReply(
            408, {"error": str(exc), "reason": "timeout"}, headers={"Connection": "close"}
        )
    except BadEncoding as exc:
        return GateReply(400, {"error": str(exc), "reason": "bad_encoding"})
    return decide_body(body, grant)


def is_loopback(peer: str | None) -> bool:
    """True for a loopback caller (127.0.0.0/8, ::1, IPv4-mapped 127.x)."""
    if not peer:
        return False
    host = peer.removeprefix("::ffff:")
    return host in LOOPBACK or host.startswith("127.")


def gate_rule(answer: Grant | Denied, peer: str | None, loopback_open: bool) -> Grant | Denied:
    """The gate's rule over the authorizer's answer: a grant (an API key with the ``gate``
    scope, or ``gate_token``) and a 403 of a known key stand; otherwise, with ``gate_token``
    unset (``loopback_open``), a loopback caller is granted every agent and any other is
    refused (403 ``not_loopback``)."""
    if isinstance(answer, Grant) or answer.status != 401 or not loopback_open:
        return answer
    if is_loopback(peer):
        return Grant(LOOPBACK_CALLER, None)
    message = "MONITOR_GATE_TOKEN is unset: the gate answers loopback callers only"
    return Denied(403, "not_loopback", message)


def decide_gate(
    body: bytes | None,
    *,
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
    grant: Grant | None = None,
    check_states: CheckStates | None = None,
) -> GateReply:
    """Parse and decide one authorized request; never raises. ``body`` None means the body
    was above the limit (413); ``status`` (the maps' freshness) is merged into a decision's
    answer; ``history_cache`` (the worker's) spares re-validating history events already seen
    (the same answer as without it); ``cuts`` are the advisor's thresholds held in memory;
    ``grant`` (the request's credential) covers only its agents (403 ``out_of_scope``);
    ``check_states`` (with ``history_cache``, whose unchanged events it recognises) spares
    re-running the checks over history already seen (the same verdicts)."""
    if body is None:
        return GateReply(
            413, {"error": f"body above {limits.max_body_bytes} bytes", "reason": "too_large"}
        )
    req: GateRequest | None = None
    try:
        req = parse_gate_request(
            body,
            max_body_bytes=limits.max_body_bytes,
            max_content_chars=limits.max_content_chars,
            history_cache=history_cache,
        )
        if grant is not None and not grant.allows(req.agent.id):
            refused = {"error": out_of_scope(grant, req.agent.id), "reason": "out_of_scope"}
            return GateReply(403, refused)
        event_id = f"gate:{req.request_id or new_id()}"
        decision = decide(
            req,
            policy,
            maps,
            checks,
            event_id=event_id,
            now=now,
            timer=timer,
            started=started,
            cuts=cuts,
            check_states=check_states,
        )
    except GateRequestError as exc:
        return GateReply(exc.status, exc.as_dict())
    except UnknownAgent as exc:
        return GateReply(404, {"error": str(exc), "reason": "unknown_agent"})
    except Exception as exc:  # a bug must not become a 500: the rule's fail mode answers
        _failures.exception("the gate could not decide", exc)
        return _failed(req, policy, exc, (timer() - started) * 1000.0)
    answer = {**decision.answer(), **(status or {})}
    index, agent_id = decision.rule_index, req.agent.id
    rule = policy.rules[index]
    if rule.uses_llm and decision.payload.degraded is None:  # the async path (inline_llm)
        pending = LlmPending(req, decision, rule, now, started, status or {})
        return GateReply(200, answer, None, pending, rule=index, agent_id=agent_id)
    event = decision_event(req, decision, now)
    return GateReply(200, answer, event, rule=index, agent_id=agent_id)


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
        _failures.exception("the gate's LLM check failed", exc)
        why = f"{type(exc).__name__}: {exc}"[:300]
        degraded = f"fail {p.rule.fail}: gate error ({why})"
        latency_ms = round((timer() - p.started) * 1000.0, 3)
        version = p.decision.payload.policy_version
        body = fail_answer(p.rule, degraded, version, latency_ms)
        return GateReply(200, body, rule=reply.rule, agent_id=reply.agent_id)
    return GateReply(200, answer, event, rule=reply.rule, agent_id=reply.agent_id)


def _failed(
    req: GateRequest | None, policy: GatePolicy, exc: Exception, latency_ms: float
) -> GateReply:
    rule = policy.rule_for(req.agent.id, req.domain, req.tier) if req is not None else None
    why = f"{type(exc).__name__}: {exc}"[:300]
    if rule is None:
        return GateReply(
            503, {"error": f"the gate could not decide ({why})", "reason": "gate_error"}
        )
    degraded = f"fail {rule.fail}: gate error ({why})"
    body = fail_answer(rule, degraded, policy.version, round(latency_ms, 3))
    index = next(i for i, r in enumerate(policy.rules) if r is rule)
    return GateReply(200, body, rule=index, agent_id=req.agent.id if req is not None else None)


def fail_answer(
    rule: GateRule, degraded: str, policy_version: str, latency_ms: float
) -> dict[str, Any]:
    """The answer when an internal error leaves the rule's fail choice to decide (no decision
    event): open -> proceed, closed -> escalate; a shadow rule answers ``proceed`` with that
    choice as ``shadow_decision``."""
    decision = "proceed" if rule.fail == "open" else "escalate"
    enforced = rule.mode == "enforce"
    return {
        "decision": decision if enforced else "proceed",
        "enforced": enforced,
        **({} if enforced else {"shadow_decision": decision}),
        "degraded": degraded,
        "policy_version": policy_version,
        "findings": [],
        "latency_ms": latency_ms,
    }
