"""``POST /v1/gate``: from a request to a status, a JSON answer and the decision event (pure).

The worker (:mod:`monitor.worker.app`) calls :func:`receive_gate` with the request's headers
and a chunk reader, and hands the decision event to the same producer as ``POST /v1/events``.
:func:`receive_gate` refuses before working: the caller is authorized (:func:`authorize`) and
rate-limited before the body is read, the media type (``application/json`` or none) and the
encoding are checked, and the body is read under its limits (size, decompression, deadline).
Status codes (every answer is a JSON object; client errors carry ``error`` and a
machine-readable ``reason``):

- 200 a decision (``decision``, ``calibrated``, ``threshold``, ``findings``, ``latency_ms`` ...);
  for a rule with the inline LLM check the reply carries ``pending`` and the worker awaits
  :func:`finish_gate` for the final answer (the deterministic path stays synchronous);
- 401 ``unauthorized``: ``gate_token`` set and the bearer token missing or wrong;
- 403 ``not_loopback``: ``gate_token`` unset and the caller is not on the loopback address;
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
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from monitor.contract.events import AgentEvent
from monitor.core.http_body import (
    BadEncoding,
    BodyLimits,
    BodyTimeout,
    BodyTooLarge,
    UnsupportedEncoding,
    read_body,
)
from monitor.core.http_guard import Guard, Refusal, credential_key, media_type, unsupported_media
from monitor.core.inflate import encoding_of
from monitor.gate.advised import AdvisorCuts
from monitor.gate.checks import CheckSet
from monitor.gate.decide import Maps, UnknownAgent, decide, decision_event
from monitor.gate.inline_llm import LlmJudgeFn, LlmPending, finish_llm
from monitor.gate.policy import GatePolicy
from monitor.gate.request import GateRequest, GateRequestError, HistoryCache, parse_gate_request
from monitor.ingest.http import token_ok

log = logging.getLogger("monitor.gate.endpoint")
LOOPBACK = ("127.0.0.1", "::1", "localhost")
MEDIA_TYPES = ("application/json", "")


@dataclass(frozen=True)
class GateLimits:
    """The request limits and the token (from the settings)."""

    token: str | None
    max_body_bytes: int
    max_content_chars: int
    read_timeout_s: float = 10.0
    max_inflate_ratio: float = 100.0

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


def _refused(refusal: Refusal) -> GateReply:
    body = {"error": refusal.message, "reason": refusal.reason}
    return GateReply(refusal.status, body, headers=dict(refusal.headers))


async def receive_gate(
    *,
    headers: Mapping[str, str],
    peer: str | None,
    read_chunk: Callable[[], Awaitable[bytes]],
    limits: GateLimits,
    guard: Guard,
    decide_body: Callable[[bytes | None], GateReply],
) -> GateReply:
    """Authorize, rate-limit, check the media type, read the body, then ``decide_body`` (the
    worker's :func:`decide_gate` with its state); never raises for a request."""
    authorization = headers.get("Authorization")
    denied = authorize(authorization, peer, limits.token)
    if denied is not None:
        throttled = guard.stranger(peer)
        return denied if throttled is None else _refused(throttled)
    key = credential_key(authorization) if limits.token else f"peer:{peer}"
    limited = guard.credential(key)
    if limited is not None:
        return _refused(limited)
    content_type = headers.get("Content-Type")
    if media_type(content_type) not in MEDIA_TYPES:
        return _refused(unsupported_media(content_type, MEDIA_TYPES))
    try:
        encoding_of(headers.get("Content-Encoding"))
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
    return decide_body(body)


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
) -> GateReply:
    """Authorize, parse and decide one request (see the module docstring); never raises.
    The same answer as :func:`authorize` then :func:`decide_gate`."""
    denied = authorize(authorization, peer, limits.token)
    if denied is not None:
        return denied
    return decide_gate(
        body,
        limits=limits,
        policy=policy,
        maps=maps,
        checks=checks,
        now=now,
        timer=timer,
        started=started,
        new_id=new_id,
        status=status,
        history_cache=history_cache,
        cuts=cuts,
    )


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
) -> GateReply:
    """Parse and decide one authorized request; never raises. ``body`` None means the body
    was above the limit (413); ``status`` (the maps' freshness) is merged into a decision's
    answer; ``history_cache`` (the worker's) spares re-validating history events already seen
    (the same answer as without it); ``cuts`` are the advisor's thresholds held in memory."""
    if body is None:
        return GateReply(413, {"error": f"body above {limits.max_body_bytes} bytes",
                               "reason": "too_large"})  # fmt: skip
    req: GateRequest | None = None
    try:
        req = parse_gate_request(
            body, max_body_bytes=limits.max_body_bytes, max_content_chars=limits.max_content_chars,
            history_cache=history_cache,
        )  # fmt: skip
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
