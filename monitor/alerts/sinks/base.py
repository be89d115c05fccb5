"""The sink contract shared by every delivery channel: the :class:`Sink` protocol, the
:class:`DeliveryResult` it answers with, and the helpers that classify HTTP answers. The sinks:
:mod:`~monitor.alerts.sinks.webhook`, :mod:`~monitor.alerts.sinks.alertmanager`,
:mod:`~monitor.alerts.sinks.slack`; :func:`monitor.alerts.sinks.registry.configured_sinks` builds
the ones the settings name.

Contract of every sink: ``await sink.deliver(payload, context)`` sends one outbox payload
(``Notification.to_dict()`` or ``GroupedNotification.to_dict()``, see
:mod:`monitor.alerts.sinks.slack_blocks`) once, without retrying itself, and never raises for a
delivery problem: it returns a :class:`DeliveryResult` whose ``outcome`` is

- ``delivered``: the receiver accepted it; ``response`` is what the notifier stores (Slack:
  ``channel`` and ``ts``, for threading the resolved message);
- ``retry``: worth trying again later (5xx, 429, timeouts, connection errors, Slack
  ``ratelimited``); ``retry_after`` carries the server's ``Retry-After`` in seconds if any;
- ``permanent``: will not succeed as is (other 4xx, Slack ``invalid_auth``,
  ``channel_not_found``, a malformed payload).

``error`` texts name the status, the receiver's error code or the exception class, never a
URL, token or secret. ``aclose()`` releases connections.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal, Protocol

import httpx

from monitor.core.redact import redact_secrets
from monitor.core.resilience import parse_retry_after

Outcome = Literal["delivered", "retry", "permanent"]
USER_AGENT = "agent-reliability-monitor"


@dataclass(frozen=True)
class DeliveryContext:
    """What a sink knows besides the payload.

    ``idempotency_key``: the outbox row's key (receivers drop repeats by it); ``attempt``:
    1-based; ``now``: aware wall time (for ``Retry-After`` dates and Alertmanager ``endsAt``);
    ``thread``: for a payload that resolves an episode, the stored ``response`` of that
    episode's firing message on the same sink (Slack: ``{"channel", "ts"}``), else None.
    """

    idempotency_key: str
    attempt: int
    now: datetime
    thread: Mapping[str, Any] | None = None


@dataclass(frozen=True)
class DeliveryResult:
    """One delivery attempt's outcome (see the module docstring)."""

    outcome: Outcome
    status: int | None = None
    response: dict[str, Any] = field(default_factory=dict)
    error: str | None = None
    retry_after: float | None = None

    @property
    def ok(self) -> bool:
        """True when delivered."""
        return self.outcome == "delivered"


class Sink(Protocol):
    """A notification destination (see the module docstring for the contract)."""

    async def deliver(self, payload: dict[str, Any], context: DeliveryContext) -> DeliveryResult:
        """Send ``payload`` once and report the outcome; never raises for delivery errors."""
        ...

    async def aclose(self) -> None:
        """Release network resources."""
        ...


def excerpt(text: str, limit: int = 120) -> str:
    """A short, secret-free, single-line excerpt of a receiver's answer for error texts."""
    flat = " ".join(redact_secrets(text).split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def classify_status(
    status: int, headers: Mapping[str, str], body: str, now: datetime, what: str
) -> DeliveryResult:
    """Result of a non-2xx HTTP answer: 408, 425, 429 and 5xx retry (429/503 honour
    ``Retry-After``); any other status is permanent. ``what`` names the sink in the error."""
    retry_after = parse_retry_after(headers.get("Retry-After"), now)
    error = f"{what} answered HTTP {status}" + (f": {excerpt(body)}" if body.strip() else "")
    if status in (408, 425, 429) or status >= 500:
        return DeliveryResult("retry", status, error=error, retry_after=retry_after)
    return DeliveryResult("permanent", status, error=error)


def classify_exception(exc: BaseException, what: str) -> DeliveryResult:
    """Result of a failed request: timeouts and connection errors retry (so does anything
    unexpected, named by its class only: its text could contain a URL with a secret)."""
    if isinstance(exc, httpx.TimeoutException | asyncio.TimeoutError | TimeoutError):
        return DeliveryResult("retry", error=f"{what}: timed out ({type(exc).__name__})")
    if isinstance(exc, httpx.TransportError | OSError):
        return DeliveryResult("retry", error=f"{what}: connection failed ({type(exc).__name__})")
    name = type(exc).__name__
    if "Connect" in name or "Connection" in name or "Timeout" in name:  # aiohttp errors
        return DeliveryResult("retry", error=f"{what}: connection failed ({name})")
    return DeliveryResult("retry", error=f"{what}: request failed ({name})")


async def post(
    client: httpx.AsyncClient, url: str, what: str, now: datetime, **request: Any
) -> httpx.Response | DeliveryResult:
    """POST to ``url`` (``request``: httpx's ``json``/``content``/``headers``): the response
    when it is 2xx, else the result of the failure (:func:`classify_exception`,
    :func:`classify_status`; ``what`` names the sink)."""
    try:
        resp = await client.post(url, **request)
    except Exception as exc:
        return classify_exception(exc, what)
    if not 200 <= resp.status_code < 300:
        return classify_status(resp.status_code, resp.headers, resp.text, now, what)
    return resp


def malformed(exc: Exception) -> DeliveryResult:
    """A payload that cannot be rendered never will be: permanent."""
    return DeliveryResult("permanent", error=f"malformed payload ({type(exc).__name__})")
