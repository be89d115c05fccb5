"""The Alertmanager sink: notifications as Alertmanager v2 alerts (contract:
:mod:`monitor.alerts.sinks.base`)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

import httpx

from monitor.alerts.exemplars import conversation_command, conversation_link
from monitor.alerts.grouping import GroupedNotification
from monitor.alerts.sinks.base import USER_AGENT, DeliveryContext, DeliveryResult, malformed, post
from monitor.alerts.sinks.slack_blocks import (
    customer_content_allowed,
    dashboard_link,
    examples_of,
    parse_payload,
    scrub,
    scrub_scope,
    value_text,
)
from monitor.alerts.states import Kind

_LABEL_NAME = re.compile(r"[^A-Za-z0-9_]")


def _label_name(name: str) -> str:
    clean = _LABEL_NAME.sub("_", name)
    return clean if clean and not clean[0].isdigit() else f"_{clean}"


def alertmanager_alerts(
    payload: Mapping[str, Any], dashboard_url: str, now: datetime, firing_ttl: timedelta
) -> list[dict[str, Any]]:
    """The Alertmanager v2 alert list for a payload (one alert per member of a group).

    Labels: the notification's labels (``alertname`` = rule, ``severity``, ``metric``, scope,
    rule labels; names sanitised to ``[A-Za-z_][A-Za-z0-9_]*``). Annotations: ``summary``,
    ``description``, ``runbook_url`` (when set), ``value``, and ``exemplars`` when the alert has
    some: one line each, ``<conversation>: <why> | <Conversation dashboard link> | <command>``
    (scrubbed like the rest). ``startsAt`` = ``fired_at``;
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
        examples = examples_of(payload, m)
        if examples:
            annotations["exemplars"] = "\n".join(
                _exemplar_line(x, dashboard_url, allow) for x in examples
            )
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


def _exemplar_line(x: Mapping[str, Any], dashboard_url: str, allow: bool) -> str:
    reason = scrub(str(x.get("reason", "")), allow)
    cid = x.get("conversation_id")
    if not isinstance(cid, str) or not cid:
        return reason
    shown = scrub(cid, allow)
    link = conversation_link(dashboard_url, shown)
    return f"{shown}: {reason} | {link} | {conversation_command(shown)}"


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
        resp = await post(
            self._client,
            self._url,
            "alertmanager",
            context.now,
            json=alerts,
            headers={"User-Agent": USER_AGENT},
        )
        if isinstance(resp, DeliveryResult):
            return resp
        return DeliveryResult("delivered", resp.status_code, {"status": resp.status_code})

    async def aclose(self) -> None:
        """Close the HTTP client."""
        await self._client.aclose()
