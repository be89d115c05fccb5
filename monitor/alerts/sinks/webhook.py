"""The signed webhook sink: one HMAC-signed JSON POST per notification (contract:
:mod:`monitor.alerts.sinks.base`)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import httpx

from monitor.alerts.exemplars import with_links
from monitor.alerts.signing import IDEMPOTENCY_HEADER, SIGNATURE_HEADER, encode_body, sign
from monitor.alerts.sinks.base import USER_AGENT, DeliveryContext, DeliveryResult, malformed, post
from monitor.alerts.sinks.slack_blocks import scrub_payload


class WebhookSink:
    """POST the payload as JSON to one URL (httpx).

    Body: the payload with every text value scrubbed (:func:`slack_blocks.scrub_payload`), encoded
    by :func:`signing.encode_body`; its exemplars (:mod:`monitor.alerts.exemplars`) each with the
    command that prints the conversation and, with a ``dashboard_url``, the link to the
    Conversation dashboard. Headers: ``Idempotency-Key`` (the outbox key: receivers
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
        dashboard_url: str | None = None,
    ) -> None:
        self._url = url
        self._dashboard_url = dashboard_url
        self._secret = secret
        self._clock = clock
        self._client = httpx.AsyncClient(timeout=timeout_s, transport=transport)

    async def deliver(self, payload: dict[str, Any], context: DeliveryContext) -> DeliveryResult:
        """Send once (see the class docstring)."""
        try:
            body = encode_body(scrub_payload(with_links(payload, self._dashboard_url)))
        except (TypeError, ValueError) as exc:
            return malformed(exc)
        headers = {
            "Content-Type": "application/json",
            "User-Agent": USER_AGENT,
            IDEMPOTENCY_HEADER: context.idempotency_key,
        }
        if self._secret:
            headers[SIGNATURE_HEADER] = sign(self._secret, int(self._clock()), body)
        resp = await post(
            self._client, self._url, "webhook", context.now, content=body, headers=headers
        )
        if isinstance(resp, DeliveryResult):
            return resp
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
