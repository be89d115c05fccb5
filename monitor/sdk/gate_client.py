"""Asking the runtime trust gate (``POST /v1/gate``, docs/gate.md) over HTTP with httpx.

:class:`GateClient` (asyncio) and :class:`SyncGateClient` (blocking) send one request per call
and return a :class:`GateAnswer`; the emitters' ``gate()`` use them (``gate_url=`` on the
emitter). A refusal (4xx/5xx) raises :class:`GateError` with the status and the gate's
``reason``; an unreachable gate or a timeout raises :class:`GateUnavailable`, so the agent
applies its own fail-open/closed choice. The HTTP transport can be injected (tests, proxies).

``Retry-After`` is honoured: a 429 or 503 carrying it (seconds, or an HTTP date) raises
:class:`GateRateLimited` with ``retry_after_s``, and until that time has passed the client
sends nothing: each call raises :class:`GateRateLimited` at once with the time that remains
(status 429, reason ``retry_after``), no request made. A call is never retried inside: the
gate is asked before a message is sent, and waiting a second or more in the agent's path is
the agent's decision (its fail mode applies at once).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any, TypedDict, Unpack

import httpx

from monitor.contract.events import Agent, AgentEvent, ToolCall
from monitor.core.errors import GateError, GateRateLimited, GateUnavailable


@dataclass(frozen=True)
class Finding:
    """One inline check that fired: judge, category and the critique to revise with."""

    judge: str
    category: str | None
    critique: str


@dataclass(frozen=True)
class GateAnswer:
    """The gate's decision (``proceed`` | ``revise`` | ``escalate``) and why. ``enforced``
    False: the rule is in shadow mode, ``decision`` is ``proceed`` and ``shadow_decision``
    what the gate would have answered."""

    decision: str
    calibrated: bool
    calibrated_confidence: float | None
    threshold: float | None
    threshold_source: str | None
    findings: tuple[Finding, ...]
    policy_version: str
    latency_ms: float
    decision_id: str | None
    degraded: str | None
    enforced: bool = True
    shadow_decision: str | None = None
    raw: dict[str, Any] = field(repr=False, default_factory=dict)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> GateAnswer:
        findings = tuple(
            Finding(f["judge"], f.get("category"), f["critique"]) for f in data.get("findings", [])
        )
        return cls(
            decision=data["decision"],
            calibrated=bool(data.get("calibrated", False)),
            calibrated_confidence=data.get("calibrated_confidence"),
            threshold=data.get("threshold"),
            threshold_source=data.get("threshold_source"),
            findings=findings,
            policy_version=data.get("policy_version", ""),
            latency_ms=float(data.get("latency_ms", 0.0)),
            decision_id=data.get("decision_id"),
            degraded=data.get("degraded"),
            enforced=bool(data.get("enforced", True)),
            shadow_decision=data.get("shadow_decision"),
            raw=data,
        )


class GateOptions(TypedDict, total=False):
    """What a gate request may carry beside the message and the agent's confidence: the tool
    calls the message carries, the conversation's earlier events (what the inline checks compare
    the message with), its domain and tier, and ``request_id`` (the decision event's id is then
    ``gate:<request_id>``)."""

    tool_calls: Sequence[ToolCall | dict[str, Any]]
    history: Sequence[AgentEvent]
    domain: str | None
    tier: int | None
    request_id: str | None


def gate_body(
    conversation_id: str,
    content: str,
    *,
    agent: Agent,
    confidence: float,
    **options: Unpack[GateOptions],
) -> dict[str, Any]:
    """The JSON body of one gate request."""
    tool_calls = options.get("tool_calls", ())
    body: dict[str, Any] = {
        "conversation_id": conversation_id,
        "agent": agent.model_dump(exclude_none=True),
        "content": content,
        "confidence": confidence,
        "tool_calls": [c.model_dump() if isinstance(c, ToolCall) else c for c in tool_calls],
        "history": [e.to_dict() for e in options.get("history", ())],
    }
    for key in ("domain", "tier", "request_id"):
        if (value := options.get(key)) is not None:
            body[key] = value
    return body


def body_for(
    agent: Agent | None,
    default_domain: str | None,
    conversation_id: str,
    content: str,
    confidence: float,
    **options: Unpack[GateOptions],
) -> dict[str, Any]:
    """:func:`gate_body` with an emitter's defaults (its agent, its context's domain)."""
    if agent is None:
        raise ValueError("no agent to gate: pass agent=Agent(id=...) to the emitter or the call")
    if options.get("domain") is None:
        options["domain"] = default_domain
    return gate_body(conversation_id, content, agent=agent, confidence=confidence, **options)


def retry_after_s(value: str | None, now: datetime | None = None) -> float | None:
    """Seconds a ``Retry-After`` header asks to wait: a number of seconds or an HTTP date
    (``now``: the wall time it is compared with); None when absent or unreadable."""
    if not value:
        return None
    text = value.strip()
    try:
        return max(0.0, float(text))
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(text)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - (now or datetime.now(UTC))).total_seconds())


class RetryAfter:
    """When the gate last asked to wait: the monotonic time before which nothing is sent."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._not_before = 0.0

    def check(self) -> None:
        """Raise :class:`GateRateLimited` while the gate's ``Retry-After`` has not passed."""
        left = self._not_before - self._clock()
        if left > 0:
            raise GateRateLimited(
                429, "retry_after", "not sent: the gate asked to wait (Retry-After)", left
            )

    def answer(self, response: httpx.Response) -> GateAnswer:
        """The answer in ``response``; a 429/503 with ``Retry-After`` starts the wait."""
        try:
            data = response.json()
        except ValueError:
            data = {}
        if response.status_code == 200 and isinstance(data, dict) and "decision" in data:
            return GateAnswer.from_json(data)
        reason = data.get("reason", "unknown") if isinstance(data, dict) else "unknown"
        detail = data.get("error", response.text[:200]) if isinstance(data, dict) else ""
        wait = retry_after_s(response.headers.get("Retry-After"))
        if response.status_code in (429, 503) and wait is not None:
            self._not_before = max(self._not_before, self._clock() + wait)
            raise GateRateLimited(response.status_code, str(reason), str(detail), wait)
        raise GateError(response.status_code, str(reason), str(detail))


def _headers(token: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"} if token else {}


class GateClient:
    """Async client of ``POST {base_url}/v1/gate``; ``timeout`` bounds each call (seconds);
    ``clock`` (monotonic seconds) times the gate's ``Retry-After``."""

    def __init__(
        self,
        base_url: str,
        token: str | None = None,
        *,
        timeout: float = 2.0,
        transport: httpx.AsyncBaseTransport | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._http = httpx.AsyncClient(
            base_url=base_url, headers=_headers(token), timeout=timeout, transport=transport
        )
        self._retry_after = RetryAfter(clock)

    async def ask(self, body: dict[str, Any]) -> GateAnswer:
        """Send one request body (:func:`gate_body`). Raises GateError (GateRateLimited while
        the gate's ``Retry-After`` runs, nothing sent), GateUnavailable."""
        self._retry_after.check()
        try:
            response = await self._http.post("/v1/gate", json=body)
        except httpx.HTTPError as exc:
            raise GateUnavailable(f"gate unreachable: {type(exc).__name__}: {exc}") from exc
        return self._retry_after.answer(response)

    async def aclose(self) -> None:
        await self._http.aclose()


class SyncGateClient:
    """Blocking client of ``POST {base_url}/v1/gate`` (thread-safe, like httpx.Client);
    ``Retry-After`` as :class:`GateClient`."""

    def __init__(
        self,
        base_url: str,
        token: str | None = None,
        *,
        timeout: float = 2.0,
        transport: httpx.BaseTransport | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._http = httpx.Client(
            base_url=base_url, headers=_headers(token), timeout=timeout, transport=transport
        )
        self._retry_after = RetryAfter(clock)

    def ask(self, body: dict[str, Any]) -> GateAnswer:
        """Send one request body (:func:`gate_body`). Raises GateError (GateRateLimited while
        the gate's ``Retry-After`` runs, nothing sent), GateUnavailable."""
        self._retry_after.check()
        try:
            response = self._http.post("/v1/gate", json=body)
        except httpx.HTTPError as exc:
            raise GateUnavailable(f"gate unreachable: {type(exc).__name__}: {exc}") from exc
        return self._retry_after.answer(response)

    def close(self) -> None:
        self._http.close()
