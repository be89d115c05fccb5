"""Slack sinks (slack-sdk): a bot token with ``chat.postMessage``, or an incoming webhook.

Both send :func:`monitor.alerts.sinks.slack_blocks.render_message` (Block Kit blocks, colour bar,
plain-text fallback) and follow the contract of :mod:`monitor.alerts.sinks.webhook` (one attempt, no
retry inside slack-sdk, never raise, errors without tokens or URLs).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient
from slack_sdk.webhook.async_client import AsyncWebhookClient

from monitor.alerts.sinks.base import (
    DeliveryContext,
    DeliveryResult,
    classify_exception,
    classify_status,
    excerpt,
    malformed,
)
from monitor.alerts.sinks.slack_blocks import render_message
from monitor.core.resilience import parse_retry_after

RETRYABLE_ERRORS = frozenset(
    {
        "ratelimited",
        "rate_limited",
        "internal_error",
        "fatal_error",
        "service_unavailable",
        "request_timeout",
        "team_added_to_org",
    }
)
"""Slack ``error`` codes worth retrying; any other code (``invalid_auth``, ``not_authed``,
``channel_not_found``, ``not_in_channel``, ``is_archived``, ``invalid_blocks``...) is permanent
unless the HTTP status is 429 or 5xx."""


def _headers(resp: Any) -> Mapping[str, str]:
    headers = getattr(resp, "headers", None)
    return headers if isinstance(headers, Mapping) else {}


def classify_api_error(exc: SlackApiError, now: datetime) -> DeliveryResult:
    """Result of a Web API call that answered ``ok: false`` or a non-200 status."""
    resp = exc.response
    status = getattr(resp, "status_code", None) or getattr(resp, "status", None)
    data = getattr(resp, "data", None)
    code = str(data.get("error", "")) if isinstance(data, dict) else ""
    retry_after = parse_retry_after(_headers(resp).get("Retry-After"), now)
    error = f"slack answered HTTP {status}" + (f": {excerpt(code)}" if code else "")
    retry = code in RETRYABLE_ERRORS or status == 429 or (isinstance(status, int) and status >= 500)
    if retry:
        return DeliveryResult("retry", status, error=error, retry_after=retry_after)
    return DeliveryResult("permanent", status, error=error)


class SlackSink:
    """``chat.postMessage`` with a bot token (scope ``chat:write``) to one channel.

    Incidents (:mod:`monitor.alerts.incidents`): the page that opens an incident is a new
    message, the thread of the incident; every later message of the incident (``context.thread``
    holds the thread's ``channel`` and ``ts``) is a reply in that thread: updates quietly, a
    re-page and the incident's resolution also broadcast to the channel (``reply_broadcast``).
    Without an incident, a payload that resolves an episode whose firing message this sink
    delivered is a broadcast reply under it. The stored response is ``{"channel": <id>, "ts":
    <message ts>}`` (+ ``thread_ts`` for a reply). ``base_url`` is the Web API root (tests
    point it at a local server).
    """

    def __init__(
        self,
        token: str,
        channel: str,
        dashboard_url: str,
        base_url: str = "https://slack.com/api/",
        timeout_s: int = 10,
    ) -> None:
        self._channel = channel
        self._dashboard_url = dashboard_url
        self._client = AsyncWebClient(
            token=token, base_url=base_url, timeout=timeout_s, retry_handlers=[]
        )

    async def deliver(self, payload: dict[str, Any], context: DeliveryContext) -> DeliveryResult:
        """Post once (see the class docstring)."""
        try:
            message = render_message(payload, self._dashboard_url)
        except (KeyError, TypeError, ValueError) as exc:
            return malformed(exc)
        channel, thread_ts = self._channel, None
        thread = context.thread
        if thread and thread.get("channel") and thread.get("ts"):
            channel, thread_ts = str(thread["channel"]), str(thread["ts"])
        try:
            resp = await self._client.chat_postMessage(
                channel=channel,
                text=message["text"],
                blocks=message["blocks"],
                attachments=message["attachments"],
                thread_ts=thread_ts,
                reply_broadcast=True if thread_ts and broadcast(payload) else None,
                unfurl_links=False,
            )
        except SlackApiError as exc:
            return classify_api_error(exc, context.now)
        except Exception as exc:
            return classify_exception(exc, "slack")
        answer = {"channel": resp.get("channel"), "ts": resp.get("ts")}
        if thread_ts:
            answer["thread_ts"] = thread_ts
        return DeliveryResult("delivered", resp.status_code, answer)

    async def aclose(self) -> None:
        """Nothing to release: slack-sdk opens a session per request."""


def broadcast(payload: Mapping[str, Any]) -> bool:
    """Whether a threaded reply is also shown in the channel: not for an incident's updates
    (``incident_role`` ``update``), for anything else (a re-page, an incident's close, an
    episode's resolution)."""
    return payload.get("incident_role") != "update"


SKIPPED_UPDATE = "incident update: an incoming webhook cannot thread"


class SlackWebhookSink:
    """An incoming webhook (``https://hooks.slack.com/services/...``).

    Incoming webhooks answer ``ok`` and return no message ``ts``, so nothing can be threaded:
    an incident is ONE message, its page (and a re-page, which is a page too); its updates and
    its close are not posted (each is recorded as delivered with the response ``{"skipped":
    SKIPPED_UPDATE}``; ``monitor alerts list`` and the dashboards show them). A notification of
    no incident is posted as before, a resolution as a new message. Use a bot token
    (:class:`SlackSink`) to get the incident's thread. The URL itself is a secret and never
    appears in an error.
    """

    def __init__(self, url: str, dashboard_url: str, timeout_s: int = 10) -> None:
        self._dashboard_url = dashboard_url
        self._client = AsyncWebhookClient(url, timeout=timeout_s, retry_handlers=[])

    async def deliver(self, payload: dict[str, Any], context: DeliveryContext) -> DeliveryResult:
        """Post once (see the class docstring)."""
        if payload.get("incident_id") and payload.get("incident_role") in ("update", "close"):
            return DeliveryResult("delivered", None, {"skipped": SKIPPED_UPDATE})
        try:
            message = render_message(payload, self._dashboard_url)
        except (KeyError, TypeError, ValueError) as exc:
            return malformed(exc)
        try:
            resp = await self._client.send(
                text=message["text"],
                blocks=message["blocks"],
                attachments=message["attachments"],
                unfurl_links=False,
            )
        except Exception as exc:
            return classify_exception(exc, "slack webhook")
        if resp.status_code != 200:
            body = resp.body or ""
            return classify_status(
                resp.status_code, _headers(resp), body, context.now, "slack webhook"
            )
        return DeliveryResult("delivered", resp.status_code, {"status": resp.status_code})

    async def aclose(self) -> None:
        """Nothing to release: slack-sdk opens a session per request."""
