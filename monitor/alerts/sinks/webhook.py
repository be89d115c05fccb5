"""Where notifications go: the :class:`Sink` protocol, the webhook and Alertmanager sinks, and
:func:`configured_sinks`. The Slack sinks live in :mod:`monitor.alerts.sinks.slack`.

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
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Literal, Protocol

import httpx

from monitor.alerts.grouping import GroupedNotification
from monitor.alerts.redact import redact_secrets
from monitor.alerts.signing import IDEMPOTENCY_HEADER, SIGNATURE_HEADER, encode_body, sign
from monitor.alerts.sinks.slack_blocks import (
    customer_content_allowed,
    dashboard_link,
    parse_payload,
    scrub,
    scrub_payload,
    scrub_scope,
    value_text,
)
from monitor.alerts.states import Kind
from monitor.config import Settings
from monitor.core.errors import ConfigError
from monitor.judges.resilience import parse_retry_after

Outcome = Literal["delivered", "retry", "permanent"]
USER_AGENT = "agent-reliability-monitor"
_LABEL_NAME = re.compile(r"[^A-Za-z0-9_]")


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


def malformed(exc: Exception) -> DeliveryResult:
    """A payload that cannot be rendered never will be: permanent."""
    return DeliveryResult("permanent", error=f"malformed payload ({type(exc).__name__})")


class WebhookSink:
    """POST the payload as JSON to one URL (httpx).

    Body: the payload with every text value scrubbed (:func:`slack_blocks.scrub_payload`), encoded
    by :func:`signing.encode_body`. Headers: ``Idempotency-Key`` (the outbox key: receivers
    drop repeats), ``X-Monitor-Signature`` (HMAC-SHA256 over ``<unix time>.`` + body, see
    :mod:`monitor.alerts.signing`) when a secret is configured. Any 2xx is delivered; the
    answer's status (and JSON body, if any) is the stored response.
    """

    def __init__(
        self,
        url: str,
        secret: str | None = None,
        timeout_s: float = 10.0,
        clock: Callable[[], float] = time.time,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self._url = url
        self._secret = secret
        self._clock = clock
        self._client = httpx.AsyncClient(timeout=timeout_s, transport=transport)

    async def deliver(self, payload: dict[str, Any], context: DeliveryContext) -> DeliveryResult:
        """Send once (see the class docstring)."""
        try:
            body = encode_body(scrub_payload(payload))
        except (TypeError, ValueError) as exc:
            return malformed(exc)
        headers = {
            "Content-Type": "application/json",
            "User-Agent": USER_AGENT,
            IDEMPOTENCY_HEADER: context.idempotency_key,
        }
        if self._secret:
            headers[SIGNATURE_HEADER] = sign(self._secret, int(self._clock()), body)
        try:
            resp = await self._client.post(self._url, content=body, headers=headers)
        except Exception as exc:
            return classify_exception(exc, "webhook")
        if not 200 <= resp.status_code < 300:
            return classify_status(
                resp.status_code, resp.headers, resp.text, context.now, "webhook"
            )
        answer: dict[str, Any] = {"status": resp.status_code}
        try:
            data = resp.json()
        except ValueError:
            data = None
        if isinstance(data, dict):
            answer["body"] = data
        return DeliveryResult("delivered", resp.status_code, answer)

    async def aclose(self) -> None:
        """Close the HTTP client."""
        await self._client.aclose()


def _label_name(name: str) -> str:
    clean = _LABEL_NAME.sub("_", name)
    return clean if clean and not clean[0].isdigit() else f"_{clean}"


def alertmanager_alerts(
    payload: Mapping[str, Any], dashboard_url: str, now: datetime, firing_ttl: timedelta
) -> list[dict[str, Any]]:
    """The Alertmanager v2 alert list for a payload (one alert per member of a group).

    Labels: the notification's labels (``alertname`` = rule, ``severity``, ``metric``, scope,
    rule labels; names sanitised to ``[A-Za-z_][A-Za-z0-9_]*``). Annotations: ``summary``,
    ``description``, ``runbook_url`` (when set), ``value``. ``startsAt`` = ``fired_at``;
    ``endsAt`` = ``resolved_at`` for resolved, else ``now + firing_ttl`` (Alertmanager resolves
    an alert nobody re-sends; repeats re-send it, so keep the ttl above the repeat interval).
    ``generatorURL`` = the dashboard link with the (scrubbed) scope preselected.
    """
    n = parse_payload(payload)
    allow = customer_content_allowed(payload)
    members = n.notifications if isinstance(n, GroupedNotification) else (n,)
    out = []
    for m in members:
        annotations = {"summary": scrub(m.summary, allow), "value": value_text(m)}
        if m.description:
            annotations["description"] = scrub(m.description, allow)
        if m.runbook_url:
            annotations["runbook_url"] = m.runbook_url
        ends = (m.resolved_at or now) if m.kind is Kind.RESOLVED else now + firing_ttl
        scope = scrub_scope(m.scope, allow)
        out.append(
            {
                "labels": {_label_name(k): scrub(v, allow) for k, v in m.labels.items()},
                "annotations": annotations,
                "startsAt": m.fired_at.isoformat(),
                "endsAt": ends.isoformat(),
                "generatorURL": dashboard_link(dashboard_url, scope, m.metric),
            }
        )
    return out


class AlertmanagerSink:
    """POST ``{url}/api/v2/alerts`` with :func:`alertmanager_alerts` (httpx). Alertmanager
    deduplicates by label set, so a repeated post is harmless."""

    def __init__(
        self,
        url: str,
        dashboard_url: str,
        timeout_s: float = 10.0,
        firing_ttl: timedelta = timedelta(hours=12),
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self._url = url.rstrip("/") + "/api/v2/alerts"
        self._dashboard_url = dashboard_url
        self._ttl = firing_ttl
        self._client = httpx.AsyncClient(timeout=timeout_s, transport=transport)

    async def deliver(self, payload: dict[str, Any], context: DeliveryContext) -> DeliveryResult:
        """Send once (see the class docstring)."""
        try:
            alerts = alertmanager_alerts(payload, self._dashboard_url, context.now, self._ttl)
        except (KeyError, TypeError, ValueError) as exc:
            return malformed(exc)
        try:
            resp = await self._client.post(
                self._url, json=alerts, headers={"User-Agent": USER_AGENT}
            )
        except Exception as exc:
            return classify_exception(exc, "alertmanager")
        if not 200 <= resp.status_code < 300:
            return classify_status(
                resp.status_code, resp.headers, resp.text, context.now, "alertmanager"
            )
        return DeliveryResult("delivered", resp.status_code, {"status": resp.status_code})

    async def aclose(self) -> None:
        """Close the HTTP client."""
        await self._client.aclose()


def configured_sinks(settings: Settings, clock: Callable[[], float] = time.time) -> dict[str, Sink]:
    """The sinks the settings configure, by outbox sink name: ``slack`` (bot token + channel,
    else the incoming webhook URL), ``webhook``, ``alertmanager``. Empty when none is set.

    Raises ConfigError when ``slack_bot_token`` is set without ``slack_channel``.
    """
    from monitor.alerts.sinks.slack import SlackSink, SlackWebhookSink  # imports this module

    sinks: dict[str, Sink] = {}
    if settings.slack_bot_token:
        if not settings.slack_channel:
            raise ConfigError("slack_channel: required when slack_bot_token is set")
        sinks["slack"] = SlackSink(
            settings.slack_bot_token,
            settings.slack_channel,
            settings.dashboard_url,
            base_url=settings.slack_api_url,
        )
    elif settings.slack_webhook_url:
        sinks["slack"] = SlackWebhookSink(settings.slack_webhook_url, settings.dashboard_url)
    if settings.webhook_url:
        sinks["webhook"] = WebhookSink(settings.webhook_url, settings.webhook_secret, clock=clock)
    if settings.alertmanager_url:
        sinks["alertmanager"] = AlertmanagerSink(settings.alertmanager_url, settings.dashboard_url)
    return sinks
